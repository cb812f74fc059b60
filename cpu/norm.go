package cpu

import (
	"fmt"
	"math"

	"vlanode/backend"
)

// normGrainElems is about how many elements one task of a row-wise op
// covers, so that small tensors are not split across threads.
const normGrainElems = 16 << 10

// RMSNorm normalizes each row of x over its last n = len(w) elements as
// Hugging Face does in float32: dst = w · (x · rsqrt(mean(x²) + eps)). The
// sum of squares is accumulated in float64. w may be F32, F16 or BF16; dst
// has as many elements as x and may be x itself.
func (b *Backend) RMSNorm(dst, x, w backend.Tensor, eps float32) error {
	const op = "rmsnorm"
	d, xt, wt, rows, n, err := b.normArgs(op, dst, x, w)
	if err != nil {
		return err
	}
	return b.pool.ranges(rows, normGrainElems/max(1, n), func(worker, lo, hi int) {
		wv := wt.floats(b.scratch.get(worker, n))
		for r := lo; r < hi; r++ {
			xr := xt.f32[r*n : (r+1)*n]
			dr := d.f32[r*n : (r+1)*n]
			ms := float32(sumSquares(xr) / float64(n))
			s := rsqrt(ms + eps)
			for i, v := range xr {
				dr[i] = wv[i] * float32(v*s)
			}
		}
	})
}

// LayerNorm normalizes each row of x over its last n = len(w) elements:
// dst = (x - mean) / sqrt(var + eps) · w + b, with the biased variance (as
// torch). Mean, variance and x - mean are computed in float64, so a large
// mean loses no precision. w and b may be F32, F16 or BF16, and b may be nil
// for none; dst has as many elements as x and may be x itself.
func (b *Backend) LayerNorm(dst, x, w, bias backend.Tensor, eps float32) error {
	const op = "layernorm"
	d, xt, wt, rows, n, err := b.normArgs(op, dst, x, w)
	if err != nil {
		return err
	}
	var bt *Tensor
	if t, ok := bias.(*Tensor); bias != nil && (!ok || t != nil) {
		if bt, err = floatOf(op, "b", bias); err != nil {
			return err
		}
		if bt.elements() != n {
			return fmt.Errorf("cpu: layernorm: bias %v for rows of %d", bt, n)
		}
	}
	return b.pool.ranges(rows, normGrainElems/max(1, n), func(worker, lo, hi int) {
		buf := b.scratch.get(worker, 2*n)
		wv, bv := wt.floats(buf[:n]), buf[n:]
		if bt != nil {
			bv = bt.floats(bv)
		} else {
			clear(bv)
		}
		for r := lo; r < hi; r++ {
			xr := xt.f32[r*n : (r+1)*n]
			dr := d.f32[r*n : (r+1)*n]
			mean := sum(xr) / float64(n)
			ss := sumSquaresAround(xr, mean)
			s := float64(rsqrt(float32(ss/float64(n)) + eps))
			for i, v := range xr {
				dr[i] = float32(float32((float64(v)-mean)*s)*wv[i]) + bv[i]
			}
		}
	})
}

// normArgs checks the operands of a row-wise norm and returns the rows of n
// elements to normalize.
func (b *Backend) normArgs(op string, dst, x, w backend.Tensor) (d, xt, wt *Tensor, rows, n int, err error) {
	if b.closed.Load() {
		return nil, nil, nil, 0, 0, ErrClosed
	}
	if d, err = dstOf(op, "dst", dst); err != nil {
		return
	}
	if xt, err = f32Of(op, "x", x); err != nil {
		return
	}
	if wt, err = floatOf(op, "w", w); err != nil {
		return
	}
	n = wt.elements()
	if n == 0 || xt.elements()%n != 0 {
		err = fmt.Errorf("cpu: %s: x %v is not made of rows of len(w) = %d", op, xt, n)
		return
	}
	if d.elements() != xt.elements() {
		err = fmt.Errorf("cpu: %s: dst %v and x %v differ in size", op, d, xt)
		return
	}
	if overlaps(d.f32, xt.f32) {
		err = fmt.Errorf("cpu: %s: dst %v partly overlaps x", op, d)
		return
	}
	return d, xt, wt, xt.elements() / n, n, nil
}

// Row reductions in float64, four partial sums at a time (combined in a
// fixed order, so results do not depend on threads).

// sum is the sum of x.
func sum(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// sumSquares is the sum of the squares of x.
func sumSquares(x []float32) float64 {
	return sumSquaresAround(x, 0)
}

// sumSquaresAround is the sum of (x - m)².
func sumSquaresAround(x []float32, m float64) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		d0, d1, d2, d3 := float64(x[i])-m, float64(x[i+1])-m, float64(x[i+2])-m, float64(x[i+3])-m
		s0 += float64(d0 * d0)
		s1 += float64(d1 * d1)
		s2 += float64(d2 * d2)
		s3 += float64(d3 * d3)
	}
	for ; i < len(x); i++ {
		d := float64(x[i]) - m
		s0 += float64(d * d)
	}
	return (s0 + s1) + (s2 + s3)
}

// rsqrt is 1/sqrt(v) rounded once to float32.
func rsqrt(v float32) float32 { return float32(1 / math.Sqrt(float64(v))) }
