package backend

import "fmt"

// Fused is a backend that runs sequences of ops that every decoder layer
// repeats in fewer kernels (cuda): on a GPU each kernel costs a few
// microseconds however little it does, and a decode step runs twenty a
// layer. Each method computes exactly what the sequence in its comment
// computes, with the same arguments; a backend may run the sequence itself
// for shapes its fused kernels do not take. Models call the functions
// below, which run the sequence on a backend without Fused.
type Fused interface {
	// AddRMSNorm is Add(x, x, d) then RMSNorm(dst, x, w, eps): the
	// residual added in place and the sum normalized. dst may be d.
	AddRMSNorm(dst, x, d, w Tensor, eps float32) error
	// QKNormRope is RMSNorm(q, q, qw, eps), RMSNorm(k, k, kw, eps),
	// Rope(q, cos, sin, headDim), Rope(k, cos, sin, headDim): per-head
	// norms and rotary embeddings of queries and keys, in place.
	QKNormRope(q, k, qw, kw, cos, sin Tensor, headDim int, eps float32) error
	// MatMuls is MatMul(dsts[i], x, ws[i], biases[i]) for every i: several
	// projections of one input (biases may be nil, or hold nil entries).
	MatMuls(dsts []Tensor, x Tensor, ws, biases []Tensor) error
	// SwiGLU is MatMul(gate, x, wg, nil), MatMul(up, x, wu, nil),
	// SiLUMul(gate, gate, up): the result is in gate, and up is scratch
	// that a fused kernel may leave untouched.
	SwiGLU(gate, up, x, wg, wu Tensor) error
}

// AddRMSNorm runs Fused.AddRMSNorm on be, or its sequence.
func AddRMSNorm(be Backend, dst, x, d, w Tensor, eps float32) error {
	if f, ok := be.(Fused); ok {
		return f.AddRMSNorm(dst, x, d, w, eps)
	}
	if err := be.Add(x, x, d); err != nil {
		return err
	}
	return be.RMSNorm(dst, x, w, eps)
}

// QKNormRope runs Fused.QKNormRope on be, or its sequence.
func QKNormRope(be Backend, q, k, qw, kw, cos, sin Tensor, headDim int, eps float32) error {
	if f, ok := be.(Fused); ok {
		return f.QKNormRope(q, k, qw, kw, cos, sin, headDim, eps)
	}
	if err := be.RMSNorm(q, q, qw, eps); err != nil {
		return err
	}
	if err := be.RMSNorm(k, k, kw, eps); err != nil {
		return err
	}
	if err := be.Rope(q, cos, sin, headDim); err != nil {
		return err
	}
	return be.Rope(k, cos, sin, headDim)
}

// MatMuls runs Fused.MatMuls on be, or one MatMul after another.
func MatMuls(be Backend, dsts []Tensor, x Tensor, ws, biases []Tensor) error {
	if f, ok := be.(Fused); ok {
		return f.MatMuls(dsts, x, ws, biases)
	}
	return MatMulsInTurn(be, dsts, x, ws, biases)
}

// MatMulsInTurn is the sequence of Fused.MatMuls, with its checks.
func MatMulsInTurn(be Backend, dsts []Tensor, x Tensor, ws, biases []Tensor) error {
	if len(ws) != len(dsts) || (biases != nil && len(biases) != len(dsts)) {
		return errMatMuls(len(dsts), len(ws), len(biases))
	}
	for i := range dsts {
		var bias Tensor
		if biases != nil {
			bias = biases[i]
		}
		if err := be.MatMul(dsts[i], x, ws[i], bias); err != nil {
			return err
		}
	}
	return nil
}

// SwiGLU runs Fused.SwiGLU on be, or its sequence.
func SwiGLU(be Backend, gate, up, x, wg, wu Tensor) error {
	if f, ok := be.(Fused); ok {
		return f.SwiGLU(gate, up, x, wg, wu)
	}
	if err := be.MatMul(gate, x, wg, nil); err != nil {
		return err
	}
	if err := be.MatMul(up, x, wu, nil); err != nil {
		return err
	}
	return be.SiLUMul(gate, gate, up)
}

// errMatMuls reports MatMuls' operand lists of different lengths.
func errMatMuls(dsts, ws, biases int) error {
	return fmt.Errorf("matmuls: %d destinations, %d weights, %d biases", dsts, ws, biases)
}
