package cpu

import (
	"fmt"

	"vlanode/backend"
)

// Rope rotates x [T, heads*headDim] in place with rotate-half (NeoX) rotary
// embeddings; cos and sin are [T, headDim/2] (any shape with that matrix
// view). For each row t, head and i < headDim/2, with x1, x2 = x[i],
// x[i+half]: x[i] = x1·cos - x2·sin and x[i+half] = x2·cos + x1·sin, each
// product rounded to float32 before the sum, as torch computes
// x·cos + rotate_half(x)·sin.
func (b *Backend) Rope(x, cos, sin backend.Tensor, headDim int) error {
	const op = "rope"
	if b.closed.Load() {
		return ErrClosed
	}
	xt, err := dstOf(op, "x", x)
	if err != nil {
		return err
	}
	ct, err := f32Of(op, "cos", cos)
	if err != nil {
		return err
	}
	st, err := f32Of(op, "sin", sin)
	if err != nil {
		return err
	}
	rows, cols := xt.matrix()
	if headDim <= 0 || headDim%2 != 0 || cols%headDim != 0 {
		return fmt.Errorf("cpu: rope: head dim %d does not divide the rows of x %v in even halves", headDim, xt)
	}
	half := headDim / 2
	cr, cc := ct.matrix()
	sr, sc := st.matrix()
	if cr != rows || cc != half || sr != rows || sc != half {
		return fmt.Errorf("cpu: rope: cos %v / sin %v must be [%d, %d] for x %v", ct, st, rows, half, xt)
	}
	if shares(xt.f32, ct.f32) || shares(xt.f32, st.f32) {
		return fmt.Errorf("cpu: rope: x %v overlaps cos or sin", xt)
	}
	return b.pool.ranges(rows, normGrainElems/max(1, cols), func(_, lo, hi int) {
		for t := lo; t < hi; t++ {
			c := ct.f32[t*half : (t+1)*half]
			s := st.f32[t*half : (t+1)*half]
			for h := t * cols; h < (t+1)*cols; h += headDim {
				x1 := xt.f32[h : h+half]
				x2 := xt.f32[h+half : h+headDim]
				for i := range half {
					u, v := x1[i], x2[i]
					x1[i] = float32(u*c[i]) - float32(v*s[i])
					x2[i] = float32(v*c[i]) + float32(u*s[i])
				}
			}
		}
	})
}
