package cpu

import (
	"errors"
	"fmt"

	"vlanode/backend"
	"vlanode/cpu/kern"
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
	if b.kern != nil {
		if ok, err := b.mlpShareKern(d, xt, gate, up, dw, lo, hi); ok || err != nil {
			return err
		}
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

// mlpShareKern is MLPShare on the kernel pool, for bf16 weights: gate's
// and up's rows and down's columns [lo, hi) read in place, the SwiGLU
// rounded to bf16 before down as the GPU's products round their inputs.
// ok is false when the operands are not the kernels' (they stay with the
// Go code).
func (b *Backend) mlpShareKern(d, x *Tensor, gate, up backend.Tensor, down *Tensor, lo, hi int) (bool, error) {
	g, ok1 := gate.(*Tensor)
	u, ok2 := up.(*Tensor)
	if !ok1 || !ok2 || g.dt != tensor.BF16 || u.dt != tensor.BF16 || down.dt != tensor.BF16 {
		return false, nil
	}
	m, k := x.matrix()
	gn, gk := g.matrix()
	un, uk := u.matrix()
	h, n := down.matrix()
	if gk != k || uk != k || gn != n || un != n {
		return false, fmt.Errorf("cpu: mlp share: gate %v, up %v, down %v for x %v", g, u, down, x)
	}
	gw, err := kern.NewWeights(g.u16, gn, gk)
	if err == nil {
		gw, err = gw.RowRange(lo, hi)
	}
	uw, err2 := kern.NewWeights(u.u16, un, uk)
	if err2 == nil {
		uw, err2 = uw.RowRange(lo, hi)
	}
	dw, err3 := kern.NewWeights(down.u16, h, n)
	if err3 == nil {
		dw, err3 = dw.ColRange(lo, hi)
	}
	if err := errors.Join(err, err2, err3); err != nil {
		return false, fmt.Errorf("cpu: mlp share: %w", err)
	}
	// At most kern.MaxRows rows a call (a long prompt's prefill).
	for r0 := 0; r0 < m; r0 += kern.MaxRows {
		rows := min(kern.MaxRows, m-r0)
		op := kern.MLP{Y: d.f32[r0*h:], X: x.f32[r0*k:], M: rows, Gate: gw, Up: uw, Down: dw}
		if err := b.kern.MLP(op); err != nil {
			return false, fmt.Errorf("cpu: mlp share: %w", err)
		}
	}
	return true, nil
}

// KernelThreads is the kernel pool's worker count (0 without one).
func (b *Backend) KernelThreads() int {
	if b.kern == nil {
		return 0
	}
	return b.kern.Threads()
}

// KernelPath names the kernels' path for m rows ("" without a pool).
func (b *Backend) KernelPath(m int) string {
	if b.kern == nil {
		return ""
	}
	return b.kern.PathFor(m).String()
}

var _ backend.ShardMatMul = (*Backend)(nil)

// MatMulShare computes dst[M, hi−lo] = x · w[lo:hi]ᵀ (backend.ShardMatMul):
// rows [lo, hi) of w read in place, on the kernel pool for bf16 weights
// (WithKernels), else as MatMul over a view of the rows.
func (b *Backend) MatMulShare(dst, x, w backend.Tensor, lo, hi int) error {
	if b.closed.Load() {
		return ErrClosed
	}
	wt, err := floatOf("matmul share", "w", w)
	if err != nil {
		return err
	}
	n, k := wt.matrix()
	if lo < 0 || hi > n || lo >= hi {
		return fmt.Errorf("cpu: matmul share: rows [%d, %d) of w %v", lo, hi, wt)
	}
	if b.kern != nil && wt.dt == tensor.BF16 {
		d, err := dstOf("matmul share", "dst", dst)
		if err != nil {
			return err
		}
		xt, err := f32Of("matmul share", "x", x)
		if err != nil {
			return err
		}
		m, xk := xt.matrix()
		dm, dn := d.matrix()
		if xk != k || dm != m || dn != hi-lo {
			return fmt.Errorf("cpu: matmul share: x %v · rows [%d, %d) of w %v do not fit dst %v", xt, lo, hi, wt, d)
		}
		kw, err := kern.NewWeights(wt.u16, n, k)
		if err == nil {
			kw, err = kw.RowRange(lo, hi)
		}
		for r0 := 0; r0 < m && err == nil; r0 += kern.MaxRows { // at most kern.MaxRows rows a call
			rows := min(kern.MaxRows, m-r0)
			err = b.kern.MatMul(kern.GEMM{Y: d.f32[r0*dn:], X: xt.f32[r0*k:], M: rows, W: kw})
		}
		if err != nil {
			return fmt.Errorf("cpu: matmul share: %w", err)
		}
		return nil
	}
	rows, err := b.Rows(w, lo, hi-lo)
	if err != nil {
		return fmt.Errorf("cpu: matmul share: %w", err)
	}
	return b.MatMul(dst, x, rows, nil)
}
