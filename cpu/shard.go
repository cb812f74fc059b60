package cpu

import (
	"fmt"

	"vlanode/backend"
	"vlanode/tensor"
)

var _ backend.ShardMLP = (*Backend)(nil)

// MLPShare computes dst[M,H] = down[:, lo:hi] · (silu(gate[lo:hi]·x) ⊙
// (up[lo:hi]·x)) (backend.ShardMLP): gate's and up's rows [lo, hi) as two
// matrix products into a scratch of M×(hi−lo), then each output row of
// down reads its columns [lo, hi) in place. Every sum is in float32, in
// order of k, as MatMul's.
func (b *Backend) MLPShare(dst, x, gate, up, down backend.Tensor, lo, hi int) error {
	const op = "mlp share"
	if b.closed.Load() {
		return ErrClosed
	}
	d, err := dstOf(op, "dst", dst)
	if err != nil {
		return err
	}
	xt, err := f32Of(op, "x", x)
	if err != nil {
		return err
	}
	dw, err := floatOf(op, "down", down)
	if err != nil {
		return err
	}
	m, _ := xt.matrix()
	h, n := dw.matrix()
	dm, dn := d.matrix()
	if lo < 0 || hi > n || lo >= hi || dm != m || dn != h {
		return fmt.Errorf("cpu: mlp share: columns [%d, %d) of down %v for x %v into dst %v", lo, hi, dw, xt, d)
	}
	if dw.dt == tensor.F16 {
		return fmt.Errorf("cpu: mlp share: down is %v, want F32 or BF16", dw.dt)
	}
	g, err := b.Rows(gate, lo, hi-lo)
	if err != nil {
		return fmt.Errorf("cpu: mlp share: gate rows: %w", err)
	}
	u, err := b.Rows(up, lo, hi-lo)
	if err != nil {
		return fmt.Errorf("cpu: mlp share: up rows: %w", err)
	}
	c := hi - lo
	gs, err := b.Alloc("scratch", tensor.F32, m, c)
	if err != nil {
		return err
	}
	defer b.Free(gs)
	us, err := b.Alloc("scratch", tensor.F32, m, c)
	if err != nil {
		return err
	}
	defer b.Free(us)
	if err := b.MatMul(gs, xt, g, nil); err != nil {
		return fmt.Errorf("cpu: mlp share: gate: %w", err)
	}
	if err := b.MatMul(us, xt, u, nil); err != nil {
		return fmt.Errorf("cpu: mlp share: up: %w", err)
	}
	if err := b.SiLUMul(gs, gs, us); err != nil {
		return fmt.Errorf("cpu: mlp share: silu: %w", err)
	}
	act := gs.(*Tensor).f32
	grain := max(4, gemvChunkBytes/max(1, c*dw.dt.Size()))
	return b.pool.ranges(h, grain, func(_, j0, j1 int) {
		for i := range m {
			a := act[i*c : (i+1)*c]
			out := d.f32[i*h : (i+1)*h]
			for j := j0; j < j1; j++ {
				if dw.dt == tensor.BF16 {
					out[j] = dotBF16(a, dw.u16[j*n+lo:j*n+hi])
				} else {
					out[j] = dot(a, dw.f32[j*n+lo:j*n+hi])
				}
			}
		}
	})
}
