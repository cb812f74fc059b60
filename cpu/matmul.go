package cpu

import (
	"fmt"

	"vlanode/backend"
	"vlanode/tensor"
)

// MatMul tiling. The values only change speed, never results (see dot.go).
const (
	// tileBytes bounds a tile of weight rows widened to float32 in a
	// worker's scratch, so that it stays in the L2 cache while every x row
	// of a block reads it.
	tileBytes = 256 << 10
	// maxTileRows bounds the rows of a tile, so that small K still gives
	// many tasks.
	maxTileRows = 64
	// mBlockRows is how many x rows one task multiplies by its tile.
	mBlockRows = 64
	// gemvChunkBytes is about how many weight bytes one GEMV task reads.
	gemvChunkBytes = 64 << 10
)

// MatMul computes dst[M,N] = x[M,K] · wᵀ + bias for w [N,K] (F32, F16 or
// BF16) and an optional bias [N] (F32, F16 or BF16; nil for none),
// accumulating in float32. Each output element is one float32 sum of the
// products in order of k, then the bias is added: the result never depends
// on M, the tiling or the thread count.
func (b *Backend) MatMul(dst, x, w, bias backend.Tensor) error {
	const op = "matmul"
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
	wt, err := floatOf(op, "w", w)
	if err != nil {
		return err
	}
	m, k := xt.matrix()
	n, wk := wt.matrix()
	dm, dn := d.matrix()
	if wk != k || dm != m || dn != n {
		return fmt.Errorf("cpu: matmul: x %v · wᵀ for w %v does not fit dst %v", xt, wt, d)
	}
	var bt *Tensor
	if t, ok := bias.(*Tensor); bias != nil && (!ok || t != nil) {
		if bt, err = floatOf(op, "bias", bias); err != nil {
			return err
		}
		if bt.elements() != n {
			return fmt.Errorf("cpu: matmul: bias %v for %d outputs", bt, n)
		}
	}
	if shares(d.f32, xt.f32) || shares(d.f32, wt.f32) || (bt != nil && shares(d.f32, bt.f32)) {
		return fmt.Errorf("cpu: matmul: dst %v overlaps an operand", d)
	}
	if m == 0 || n == 0 {
		return nil
	}
	if m == 1 && wt.dt != tensor.F16 {
		return b.gemv(d.f32, xt.f32, wt, bt, n, k)
	}
	return b.gemm(d.f32, xt.f32, wt, bt, m, n, k)
}

// gemv is MatMul for one x row: every task streams a chunk of weight rows
// once, widening BF16 on the fly.
func (b *Backend) gemv(dst, x []float32, w, bias *Tensor, n, k int) error {
	grain := max(4, gemvChunkBytes/max(1, k*w.dt.Size()))
	return b.pool.ranges(n, grain, func(_, lo, hi int) {
		if w.dt == tensor.BF16 {
			dotRowsBF16(dst[lo:hi], x, w.u16[lo*k:hi*k], k)
		} else {
			dotRows(dst[lo:hi], x, w.f32[lo*k:hi*k], k)
		}
		addBias(dst[lo:hi], bias, lo)
	})
}

// gemm is MatMul for several x rows: a task widens a tile of weight rows
// into its scratch once and multiplies a block of x rows by it.
func (b *Backend) gemm(dst, x []float32, w, bias *Tensor, m, n, k int) error {
	tile := max(4, min(maxTileRows, tileBytes/max(1, 4*k))) &^ 3
	nTiles := (n + tile - 1) / tile
	mBlocks := (m + mBlockRows - 1) / mBlockRows
	return b.pool.run(nTiles*mBlocks, func(worker, task int) {
		n0 := task % nTiles * tile
		n1 := min(n, n0+tile)
		m0 := task / nTiles * mBlockRows
		m1 := min(m, m0+mBlockRows)
		var rows []float32
		if w.dt == tensor.F32 {
			rows = w.f32[n0*k : n1*k]
		} else {
			rows = b.scratch.get(worker, (n1-n0)*k)
			w.widen(rows, n0*k)
		}
		i := m0
		for ; i+2 <= m1; i += 2 {
			out0, out1 := dst[i*n+n0:i*n+n1], dst[(i+1)*n+n0:(i+1)*n+n1]
			dotRows2(out0, out1, x[i*k:(i+1)*k], x[(i+1)*k:(i+2)*k], rows, k)
			addBias(out0, bias, n0)
			addBias(out1, bias, n0)
		}
		if i < m1 {
			out := dst[i*n+n0 : i*n+n1]
			dotRows(out, x[i*k:(i+1)*k], rows, k)
			addBias(out, bias, n0)
		}
	})
}

// dotRows2 is dotRows for two x rows at once.
func dotRows2(dst0, dst1, x0, x1, rows []float32, k int) {
	j := 0
	for ; j+2 <= len(dst0); j += 2 {
		r := rows[j*k : (j+2)*k]
		dst0[j], dst0[j+1], dst1[j], dst1[j+1] = dot2x2(x0, x1, r, r[k:])
	}
	if j < len(dst0) {
		r := rows[j*k : (j+1)*k]
		dst0[j], dst1[j] = dot(x0, r), dot(x1, r)
	}
}

// dotRows sets dst[j] = x · rows[j*k : (j+1)*k].
func dotRows(dst, x, rows []float32, k int) {
	j := 0
	for ; j+4 <= len(dst); j += 4 {
		r := rows[j*k : (j+4)*k]
		dst[j], dst[j+1], dst[j+2], dst[j+3] = dot4(x, r, r[k:], r[2*k:], r[3*k:])
	}
	for ; j < len(dst); j++ {
		dst[j] = dot(x, rows[j*k:(j+1)*k])
	}
}

// dotRowsBF16 is dotRows for bfloat16 rows.
func dotRowsBF16(dst, x []float32, rows []uint16, k int) {
	j := 0
	for ; j+4 <= len(dst); j += 4 {
		r := rows[j*k : (j+4)*k]
		dst[j], dst[j+1], dst[j+2], dst[j+3] = dot4BF16(x, r, r[k:], r[2*k:], r[3*k:])
	}
	for ; j < len(dst); j++ {
		dst[j] = dotBF16(x, rows[j*k:(j+1)*k])
	}
}

// addBias adds bias[off+j] to dst[j] (nothing when bias is nil).
func addBias(dst []float32, bias *Tensor, off int) {
	if bias == nil {
		return
	}
	switch bias.dt {
	case tensor.F32:
		for j, v := range bias.f32[off : off+len(dst)] {
			dst[j] += v
		}
	case tensor.BF16:
		for j, h := range bias.u16[off : off+len(dst)] {
			dst[j] += bf16(h)
		}
	case tensor.F16:
		for j, h := range bias.u16[off : off+len(dst)] {
			dst[j] += f16(h)
		}
	}
}
