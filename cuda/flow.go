package cuda

import (
	"fmt"

	"vlanode/backend"
)

// Fourier writes diffusion's Fourier features of x into dst
// (backend.FlowFeed): vla_fourier.
func (b *Backend) Fourier(dst, x, freqs, tf, step backend.Tensor) error {
	const op = "fourier"
	d, err := b.dstArg(op, "dst", dst)
	if err != nil {
		return err
	}
	xt, err := b.f32Arg(op, "x", x)
	if err != nil {
		return err
	}
	ft, err := b.f32Arg(op, "freqs", freqs)
	if err != nil {
		return err
	}
	tt, err := b.f32Arg(op, "tf", tf)
	if err != nil {
		return err
	}
	var sp *Tensor
	if step != nil {
		if sp, err = b.posArg(op, step); err != nil {
			return err
		}
	}
	T, C := backend.Matrix(xt)
	fc, H := backend.Matrix(ft)
	tr, tc := backend.Matrix(tt)
	switch dr, dc := backend.Matrix(d); {
	case fc != C:
		return fmt.Errorf("cuda: %s: freqs %v for %d channels", op, ft, C)
	case tc != 2*H || tr == 0:
		return fmt.Errorf("cuda: %s: tf %v must be [steps, %d]", op, tt, 2*H)
	case dr != T || dc != (C+1)*2*H:
		return fmt.Errorf("cuda: %s: dst %v for %d rows of %d features", op, d, T, (C+1)*2*H)
	case d.overlaps(xt):
		return fmt.Errorf("cuda: %s: dst %v overlaps x", op, d)
	}
	if T == 0 || H == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(d.ptr).Ptr(xt.ptr).Ptr(ft.ptr).Ptr(tt.ptr)
		if sp != nil {
			g.args.Ptr(sp.ptr)
		} else {
			g.args.Ptr(0)
		}
		g.args.I32(int32(T)).I32(int32(C)).I32(int32(H))
		return g.elementwise(op, g.k.fourier, int64(T)*int64(C+1)*int64(H))
	})
}

// EulerStep sets x += dt[*step]·v, then *step += 1 (backend.FlowFeed):
// vla_euler_step, one block.
func (b *Backend) EulerStep(x, v, dt, step backend.Tensor) error {
	const op = "euler step"
	xt, err := b.dstArg(op, "x", x)
	if err != nil {
		return err
	}
	vt, err := b.f32Arg(op, "v", v)
	if err != nil {
		return err
	}
	dtt, err := b.f32Arg(op, "dt", dt)
	if err != nil {
		return err
	}
	sp, err := b.posArg(op, step)
	if err != nil {
		return err
	}
	n := xt.elements()
	switch {
	case vt.elements() != n:
		return fmt.Errorf("cuda: %s: v %v for x %v", op, vt, xt)
	case dtt.elements() == 0:
		return fmt.Errorf("cuda: %s: no step sizes", op)
	case n > 1<<24:
		return fmt.Errorf("cuda: %s: %d values are too many for one block", op, n)
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(xt.ptr).Ptr(vt.ptr).Ptr(dtt.ptr).Ptr(sp.ptr).I32(int32(n))
		return g.launch(op, g.k.eulerStep, rowsGrid(1), block1D(threadsPerBlock), 0)
	})
}

var _ backend.FlowFeed = (*Backend)(nil)
