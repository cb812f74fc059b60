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
	// QKNormRopeCache is QKNormRope, then the rows of k and v copied into
	// the caches kc and vc from row at on (see CopyRows): a decoder
	// layer's keys and values stored for attention.
	QKNormRopeCache(q, k, v, qw, kw, cos, sin Tensor, headDim int, eps float32, kc, vc Tensor, at CacheAt) error
	// MatMuls is MatMul(dsts[i], x, ws[i], biases[i]) for every i: several
	// projections of one input (biases may be nil, or hold nil entries).
	MatMuls(dsts []Tensor, x Tensor, ws, biases []Tensor) error
	// SwiGLU is MatMul(gate, x, wg, nil), MatMul(up, x, wu, nil),
	// SiLUMul(gate, gate, up): the result is in gate, and up is scratch
	// that a fused kernel may leave untouched.
	SwiGLU(gate, up, x, wg, wu Tensor) error
	// MatMulGELU is MatMul(dst, x, w, bias) then GELU(dst, dst, tanh).
	MatMulGELU(dst, x, w, bias Tensor, tanh bool) error
	// MatMulResidual is MatMul(h, a, w, bias) then Add(x, x, h): a
	// projection added to the residual stream x; h is scratch, left
	// holding a·wᵀ with or without the bias.
	MatMulResidual(x, h, a, w, bias Tensor) error
	// SwiGLUDown is SwiGLU(gate, up, x, wg, wu) then MatMul(dst, gate,
	// wd, nil): a decoder's whole MLP; gate and up are scratch that a
	// fused kernel may leave holding anything.
	SwiGLUDown(dst, gate, up, x, wg, wu, wd Tensor) error
	// GELUMLP is MatMulGELU(mid, a, w1, b1, tanh) then MatMulResidual(x,
	// h, mid, w2, b2): a vision block's MLP added to its residual stream;
	// mid and h are scratch that a fused kernel may leave holding anything.
	GELUMLP(x, h, mid, a, w1, b1, w2, b2 Tensor, tanh bool) error
	// RMSNormMatMuls is RMSNorm(h, x, nw, eps) then MatMuls(dsts, h, ws,
	// biases): a decoder layer's input norm and its q, k, v projections;
	// h is scratch that a fused kernel may leave untouched.
	RMSNormMatMuls(dsts []Tensor, h, x, nw Tensor, eps float32, ws, biases []Tensor) error
	// RMSNormMLP is RMSNorm(h, x, nw, eps), SwiGLUDown(h, gate, up, h, wg,
	// wu, wd) then Add(x, x, h): a decoder layer's whole MLP block, norm
	// and residual included; h, gate and up are scratch.
	RMSNormMLP(x, h, gate, up, nw Tensor, eps float32, wg, wu, wd Tensor) error
	// LayerNormMatMuls is LayerNorm(h, x, w, b, eps) then MatMuls(dsts, h,
	// ws, biases): a vision block's first norm and its q, k, v
	// projections; h is scratch that a fused kernel may leave untouched.
	LayerNormMatMuls(dsts []Tensor, h, x, w, b Tensor, eps float32, ws, biases []Tensor) error
	// LayerNormGELUMLP is LayerNorm(h, x, w, b, eps) then GELUMLP(x, h,
	// mid, h, w1, b1, w2, b2, tanh): a vision block's second norm and its
	// MLP added to the residual stream; h and mid are scratch.
	LayerNormGELUMLP(x, h, mid, w, b Tensor, eps float32, w1, b1, w2, b2 Tensor, tanh bool) error
	// RopeAttention is Rope(q, cos, sin, o.HeadDim), Rope(k, cos, sin,
	// o.HeadDim) then Attention(dst, q, k, v, o): a vision block's rotary
	// embeddings and attention; q and k are left holding anything (a fused
	// kernel rotates them as it reads them).
	RopeAttention(dst, q, k, v, cos, sin Tensor, o AttnOpts) error
}

// RopeAttention runs Fused.RopeAttention on be, or its sequence.
func RopeAttention(be Backend, dst, q, k, v, cos, sin Tensor, o AttnOpts) error {
	if f, ok := be.(Fused); ok {
		return f.RopeAttention(dst, q, k, v, cos, sin, o)
	}
	return RopeAttentionSeq(be, dst, q, k, v, cos, sin, o)
}

// RopeAttentionSeq is the sequence of Fused.RopeAttention, op by op.
func RopeAttentionSeq(be Backend, dst, q, k, v, cos, sin Tensor, o AttnOpts) error {
	if err := be.Rope(q, cos, sin, o.HeadDim); err != nil {
		return err
	}
	if err := be.Rope(k, cos, sin, o.HeadDim); err != nil {
		return err
	}
	return be.Attention(dst, q, k, v, o)
}

// AddRMSNorm runs Fused.AddRMSNorm on be, or its sequence.
func AddRMSNorm(be Backend, dst, x, d, w Tensor, eps float32) error {
	if f, ok := be.(Fused); ok {
		return f.AddRMSNorm(dst, x, d, w, eps)
	}
	return AddRMSNormSeq(be, dst, x, d, w, eps)
}

// AddRMSNormSeq is the sequence of Fused.AddRMSNorm, op by op (what a
// Fused backend runs for shapes its kernels do not take).
func AddRMSNormSeq(be Backend, dst, x, d, w Tensor, eps float32) error {
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
	return QKNormRopeSeq(be, q, k, qw, kw, cos, sin, headDim, eps)
}

// QKNormRopeSeq is the sequence of Fused.QKNormRope, op by op.
func QKNormRopeSeq(be Backend, q, k, qw, kw, cos, sin Tensor, headDim int, eps float32) error {
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

// CacheAt is where rows go in a KV cache: from row Pos on, or, when PosAt
// is not nil, from the row that the one-element I32 tensor PosAt holds
// (DevicePos, for a step captured once and replayed).
type CacheAt struct {
	Pos   int
	PosAt Tensor
}

// CopyRows copies src's rows into cache at at: CopyRowsAt for a device
// position, else Copy into Rows(cache, at.Pos, rows).
func CopyRows(be Backend, cache Tensor, at CacheAt, src Tensor) error {
	if at.PosAt != nil {
		dp, ok := be.(DevicePos)
		if !ok {
			return fmt.Errorf("backend %s has no device positions", be.Name())
		}
		return dp.CopyRowsAt(cache, src, at.PosAt)
	}
	rows, _ := Matrix(src)
	dst, err := be.Rows(cache, at.Pos, rows)
	if err != nil {
		return err
	}
	return be.Copy(dst, src)
}

// QKNormRopeCache runs Fused.QKNormRopeCache on be, or its sequence.
func QKNormRopeCache(be Backend, q, k, v, qw, kw, cos, sin Tensor, headDim int, eps float32, kc, vc Tensor, at CacheAt) error {
	if f, ok := be.(Fused); ok {
		return f.QKNormRopeCache(q, k, v, qw, kw, cos, sin, headDim, eps, kc, vc, at)
	}
	return QKNormRopeCacheSeq(be, q, k, v, qw, kw, cos, sin, headDim, eps, kc, vc, at)
}

// QKAttentionAt is implemented by backends that run a decode step's
// QKNormRopeCache and its AttentionAt as one op.
type QKAttentionAt interface {
	// QKNormRopeCacheAttentionAt is QKNormRopeCache(q, k, v, qw, kw,
	// cos, sin, o.HeadDim, eps, kc, vc, CacheAt{PosAt: pos}) then
	// AttentionAt(dst, q, kc, vc, o, pos), bit for bit in dst and the
	// caches. q and k are scratch afterwards: a fused kernel may leave
	// them as they were.
	QKNormRopeCacheAttentionAt(dst, q, k, v, qw, kw, cos, sin Tensor, eps float32, kc, vc Tensor, o AttnOpts, pos Tensor) error
}

// QKNormRopeCacheAttentionAt runs QKAttentionAt's op on be, or its
// sequence (be must then be a DevicePos).
func QKNormRopeCacheAttentionAt(be Backend, dst, q, k, v, qw, kw, cos, sin Tensor, eps float32, kc, vc Tensor, o AttnOpts, pos Tensor) error {
	if f, ok := be.(QKAttentionAt); ok {
		return f.QKNormRopeCacheAttentionAt(dst, q, k, v, qw, kw, cos, sin, eps, kc, vc, o, pos)
	}
	return QKNormRopeCacheAttentionAtSeq(be, dst, q, k, v, qw, kw, cos, sin, eps, kc, vc, o, pos)
}

// QKNormRopeCacheAttentionAtSeq is the sequence of
// QKAttentionAt.QKNormRopeCacheAttentionAt.
func QKNormRopeCacheAttentionAtSeq(be Backend, dst, q, k, v, qw, kw, cos, sin Tensor, eps float32, kc, vc Tensor, o AttnOpts, pos Tensor) error {
	dp, ok := be.(DevicePos)
	if !ok {
		return fmt.Errorf("backend %s has no device positions", be.Name())
	}
	if err := QKNormRopeCache(be, q, k, v, qw, kw, cos, sin, o.HeadDim, eps, kc, vc, CacheAt{PosAt: pos}); err != nil {
		return err
	}
	return dp.AttentionAt(dst, q, kc, vc, o, pos)
}

// QKNormRopeCacheSeq is the sequence of Fused.QKNormRopeCache, op by op.
func QKNormRopeCacheSeq(be Backend, q, k, v, qw, kw, cos, sin Tensor, headDim int, eps float32, kc, vc Tensor, at CacheAt) error {
	if err := QKNormRopeSeq(be, q, k, qw, kw, cos, sin, headDim, eps); err != nil {
		return err
	}
	if err := CopyRows(be, kc, at, k); err != nil {
		return err
	}
	return CopyRows(be, vc, at, v)
}

// MatMuls runs Fused.MatMuls on be, or one MatMul after another.
func MatMuls(be Backend, dsts []Tensor, x Tensor, ws, biases []Tensor) error {
	if f, ok := be.(Fused); ok {
		return f.MatMuls(dsts, x, ws, biases)
	}
	return MatMulsInTurn(be, dsts, x, ws, biases)
}

// MatMulsInTurn is the sequence of Fused.MatMuls, op by op, with its
// checks.
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
	return SwiGLUSeq(be, gate, up, x, wg, wu)
}

// SwiGLUSeq is the sequence of Fused.SwiGLU, op by op.
func SwiGLUSeq(be Backend, gate, up, x, wg, wu Tensor) error {
	if err := be.MatMul(gate, x, wg, nil); err != nil {
		return err
	}
	if err := be.MatMul(up, x, wu, nil); err != nil {
		return err
	}
	return be.SiLUMul(gate, gate, up)
}

// MatMulGELU runs Fused.MatMulGELU on be, or its sequence.
func MatMulGELU(be Backend, dst, x, w, bias Tensor, tanh bool) error {
	if f, ok := be.(Fused); ok {
		return f.MatMulGELU(dst, x, w, bias, tanh)
	}
	return MatMulGELUSeq(be, dst, x, w, bias, tanh)
}

// MatMulGELUSeq is the sequence of Fused.MatMulGELU, op by op.
func MatMulGELUSeq(be Backend, dst, x, w, bias Tensor, tanh bool) error {
	if err := be.MatMul(dst, x, w, bias); err != nil {
		return err
	}
	return be.GELU(dst, dst, tanh)
}

// MatMulResidual runs Fused.MatMulResidual on be, or its sequence.
func MatMulResidual(be Backend, x, h, a, w, bias Tensor) error {
	if f, ok := be.(Fused); ok {
		return f.MatMulResidual(x, h, a, w, bias)
	}
	return MatMulResidualSeq(be, x, h, a, w, bias)
}

// MatMulResidualSeq is the sequence of Fused.MatMulResidual, op by op.
func MatMulResidualSeq(be Backend, x, h, a, w, bias Tensor) error {
	if err := be.MatMul(h, a, w, bias); err != nil {
		return err
	}
	return be.Add(x, x, h)
}

// SwiGLUDown runs Fused.SwiGLUDown on be, or its sequence.
func SwiGLUDown(be Backend, dst, gate, up, x, wg, wu, wd Tensor) error {
	if f, ok := be.(Fused); ok {
		return f.SwiGLUDown(dst, gate, up, x, wg, wu, wd)
	}
	return SwiGLUDownSeq(be, dst, gate, up, x, wg, wu, wd)
}

// SwiGLUDownSeq is the sequence of Fused.SwiGLUDown.
func SwiGLUDownSeq(be Backend, dst, gate, up, x, wg, wu, wd Tensor) error {
	if err := SwiGLU(be, gate, up, x, wg, wu); err != nil {
		return err
	}
	return be.MatMul(dst, gate, wd, nil)
}

// GELUMLP runs Fused.GELUMLP on be, or its sequence.
func GELUMLP(be Backend, x, h, mid, a, w1, b1, w2, b2 Tensor, tanh bool) error {
	if f, ok := be.(Fused); ok {
		return f.GELUMLP(x, h, mid, a, w1, b1, w2, b2, tanh)
	}
	return GELUMLPSeq(be, x, h, mid, a, w1, b1, w2, b2, tanh)
}

// GELUMLPSeq is the sequence of Fused.GELUMLP.
func GELUMLPSeq(be Backend, x, h, mid, a, w1, b1, w2, b2 Tensor, tanh bool) error {
	if err := MatMulGELU(be, mid, a, w1, b1, tanh); err != nil {
		return err
	}
	return MatMulResidual(be, x, h, mid, w2, b2)
}

// RMSNormMatMuls runs Fused.RMSNormMatMuls on be, or its sequence.
func RMSNormMatMuls(be Backend, dsts []Tensor, h, x, nw Tensor, eps float32, ws, biases []Tensor) error {
	if f, ok := be.(Fused); ok {
		return f.RMSNormMatMuls(dsts, h, x, nw, eps, ws, biases)
	}
	return RMSNormMatMulsSeq(be, dsts, h, x, nw, eps, ws, biases)
}

// RMSNormMatMulsSeq is the sequence of Fused.RMSNormMatMuls.
func RMSNormMatMulsSeq(be Backend, dsts []Tensor, h, x, nw Tensor, eps float32, ws, biases []Tensor) error {
	if err := be.RMSNorm(h, x, nw, eps); err != nil {
		return err
	}
	return MatMuls(be, dsts, h, ws, biases)
}

// LayerNormMatMuls runs Fused.LayerNormMatMuls on be, or its sequence.
func LayerNormMatMuls(be Backend, dsts []Tensor, h, x, w, b Tensor, eps float32, ws, biases []Tensor) error {
	if f, ok := be.(Fused); ok {
		return f.LayerNormMatMuls(dsts, h, x, w, b, eps, ws, biases)
	}
	return LayerNormMatMulsSeq(be, dsts, h, x, w, b, eps, ws, biases)
}

// LayerNormMatMulsSeq is the sequence of Fused.LayerNormMatMuls.
func LayerNormMatMulsSeq(be Backend, dsts []Tensor, h, x, w, b Tensor, eps float32, ws, biases []Tensor) error {
	if err := be.LayerNorm(h, x, w, b, eps); err != nil {
		return err
	}
	return MatMuls(be, dsts, h, ws, biases)
}

// LayerNormGELUMLP runs Fused.LayerNormGELUMLP on be, or its sequence.
func LayerNormGELUMLP(be Backend, x, h, mid, w, b Tensor, eps float32, w1, b1, w2, b2 Tensor, tanh bool) error {
	if f, ok := be.(Fused); ok {
		return f.LayerNormGELUMLP(x, h, mid, w, b, eps, w1, b1, w2, b2, tanh)
	}
	return LayerNormGELUMLPSeq(be, x, h, mid, w, b, eps, w1, b1, w2, b2, tanh)
}

// LayerNormGELUMLPSeq is the sequence of Fused.LayerNormGELUMLP.
func LayerNormGELUMLPSeq(be Backend, x, h, mid, w, b Tensor, eps float32, w1, b1, w2, b2 Tensor, tanh bool) error {
	if err := be.LayerNorm(h, x, w, b, eps); err != nil {
		return err
	}
	return GELUMLP(be, x, h, mid, h, w1, b1, w2, b2, tanh)
}

// RMSNormMLP runs Fused.RMSNormMLP on be, or its sequence.
func RMSNormMLP(be Backend, x, h, gate, up, nw Tensor, eps float32, wg, wu, wd Tensor) error {
	if f, ok := be.(Fused); ok {
		return f.RMSNormMLP(x, h, gate, up, nw, eps, wg, wu, wd)
	}
	return RMSNormMLPSeq(be, x, h, gate, up, nw, eps, wg, wu, wd)
}

// RMSNormMLPSeq is the sequence of Fused.RMSNormMLP.
func RMSNormMLPSeq(be Backend, x, h, gate, up, nw Tensor, eps float32, wg, wu, wd Tensor) error {
	if err := be.RMSNorm(h, x, nw, eps); err != nil {
		return err
	}
	if err := SwiGLUDown(be, h, gate, up, h, wg, wu, wd); err != nil {
		return err
	}
	return be.Add(x, x, h)
}

// errMatMuls reports MatMuls' operand lists of different lengths.
func errMatMuls(dsts, ws, biases int) error {
	return fmt.Errorf("matmuls: %d destinations, %d weights, %d biases", dsts, ws, biases)
}
