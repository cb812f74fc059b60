package cpu

import (
	"fmt"
	"math"

	"vlanode/backend"
)

// elemGrain is how many elements one task of an elementwise op covers at
// least.
const elemGrain = 32 << 10

// SiLU computes dst = x·sigmoid(x) elementwise, evaluated in float64 and
// rounded to float32. dst may be x.
func (b *Backend) SiLU(dst, x backend.Tensor) error {
	d, in, err := b.elementwise("silu", dst, []string{"x"}, x)
	if err != nil {
		return err
	}
	s := in[0]
	return b.pool.ranges(len(d), elemGrain, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			v := float64(s[i])
			d[i] = float32(v / (1 + math.Exp(-v)))
		}
	})
}

// SiLUMul computes dst = silu(gate) · up elementwise, silu(g) = g/(1+e^-g)
// evaluated in float64 and rounded to float32 before the product. The
// operands must have the same element count; dst may be gate or up.
func (b *Backend) SiLUMul(dst, gate, up backend.Tensor) error {
	d, in, err := b.elementwise("silumul", dst, []string{"gate", "up"}, gate, up)
	if err != nil {
		return err
	}
	g, u := in[0], in[1]
	return b.pool.ranges(len(d), elemGrain, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			x := float64(g[i])
			d[i] = float32(x/(1+math.Exp(-x))) * u[i]
		}
	})
}

// GELU computes dst = gelu(x) elementwise in float64, rounded to float32:
// torch's exact x/2·(1 + erf(x/√2)) (as x/2·erfc(-x/√2), which keeps the
// tiny values of large negative x), or with tanh set its approximation
// x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))). dst may be x.
func (b *Backend) GELU(dst, x backend.Tensor, tanh bool) error {
	d, in, err := b.elementwise("gelu", dst, []string{"x"}, x)
	if err != nil {
		return err
	}
	s := in[0]
	return b.pool.ranges(len(d), elemGrain, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			v := float64(s[i])
			if tanh {
				d[i] = float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
			} else {
				d[i] = float32(0.5 * v * math.Erfc(-v/math.Sqrt2)) // = 1 + erf(v/√2), without cancellation
			}
		}
	})
}

// Add computes dst = a + b elementwise; the operands must have the same
// element count, and dst may be a or b.
func (b *Backend) Add(dst, x, y backend.Tensor) error {
	d, in, err := b.elementwise("add", dst, []string{"a", "b"}, x, y)
	if err != nil {
		return err
	}
	u, v := in[0], in[1]
	return b.pool.ranges(len(d), elemGrain, func(_, lo, hi int) {
		d, u, v := d[lo:hi], u[lo:hi], v[lo:hi]
		for i := range d {
			d[i] = u[i] + v[i]
		}
	})
}

// Copy copies src into dst of the same element count and type (F32, F16
// or BF16), e.g. into KV-cache rows obtained with Rows. The two may overlap.
func (b *Backend) Copy(dst, src backend.Tensor) error {
	if b.closed.Load() {
		return ErrClosed
	}
	d, err := asTensor("copy", "dst", dst)
	if err != nil {
		return err
	}
	s, err := asTensor("copy", "src", src)
	if err != nil {
		return err
	}
	if d.root.readOnly {
		return fmt.Errorf("cpu: copy: dst %v is a read-only weight", d)
	}
	if d.dt != s.dt || d.elements() != s.elements() {
		return fmt.Errorf("cpu: copy: src %v does not fit dst %v", s, d)
	}
	copy(d.f32, s.f32)
	copy(d.u16, s.u16)
	return nil
}

// elementwise checks the operands of an elementwise op: F32, dst writable,
// all of the same element count, inputs either dst itself or disjoint from
// it. It returns their elements.
func (b *Backend) elementwise(op string, dst backend.Tensor, names []string, in ...backend.Tensor) ([]float32, [][]float32, error) {
	if b.closed.Load() {
		return nil, nil, ErrClosed
	}
	d, err := dstOf(op, "dst", dst)
	if err != nil {
		return nil, nil, err
	}
	out := make([][]float32, len(in))
	for i, t := range in {
		name := names[i]
		s, err := f32Of(op, name, t)
		if err != nil {
			return nil, nil, err
		}
		if s.elements() != d.elements() {
			return nil, nil, fmt.Errorf("cpu: %s: %s %v does not fit dst %v", op, name, s, d)
		}
		if overlaps(d.f32, s.f32) {
			return nil, nil, fmt.Errorf("cpu: %s: dst %v partly overlaps %s", op, d, name)
		}
		out[i] = s.f32
	}
	return d.f32, out, nil
}
