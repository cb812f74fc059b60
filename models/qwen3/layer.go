package qwen3

import (
	"vlanode/backend"
	"vlanode/configs"
	"vlanode/models"
)

// Layer is one decoder layer's weights.
type Layer struct {
	cfg *configs.Qwen3

	InputNorm backend.Tensor // [hidden]
	Q         backend.Tensor // [heads*headDim, hidden]
	K         backend.Tensor // [kvHeads*headDim, hidden]
	V         backend.Tensor // [kvHeads*headDim, hidden]
	O         backend.Tensor // [hidden, heads*headDim]
	QBias     backend.Tensor // [heads*headDim], only with attention_bias
	KBias     backend.Tensor // [kvHeads*headDim]
	VBias     backend.Tensor // [kvHeads*headDim]
	OBias     backend.Tensor // [hidden]
	QNorm     backend.Tensor // [headDim]
	KNorm     backend.Tensor // [headDim]
	PostNorm  backend.Tensor // [hidden]
	Gate      backend.Tensor // [intermediate, hidden]
	Up        backend.Tensor // [intermediate, hidden]
	Down      backend.Tensor // [hidden, intermediate]
}

// specs is the one table binding checkpoint names to the layer's fields.
func (l *Layer) specs() []models.Spec {
	c := l.cfg
	h, q, kv, ff, hd := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim, c.IntermediateSize, c.HeadDim
	s := []models.Spec{
		{Name: "input_layernorm.weight", Shape: []int{h}, Dst: &l.InputNorm},
		{Name: "self_attn.q_proj.weight", Shape: []int{q, h}, Dst: &l.Q},
		{Name: "self_attn.k_proj.weight", Shape: []int{kv, h}, Dst: &l.K},
		{Name: "self_attn.v_proj.weight", Shape: []int{kv, h}, Dst: &l.V},
		{Name: "self_attn.o_proj.weight", Shape: []int{h, q}, Dst: &l.O},
		{Name: "self_attn.q_norm.weight", Shape: []int{hd}, Dst: &l.QNorm},
		{Name: "self_attn.k_norm.weight", Shape: []int{hd}, Dst: &l.KNorm},
		{Name: "post_attention_layernorm.weight", Shape: []int{h}, Dst: &l.PostNorm},
		{Name: "mlp.gate_proj.weight", Shape: []int{ff, h}, Dst: &l.Gate},
		{Name: "mlp.up_proj.weight", Shape: []int{ff, h}, Dst: &l.Up},
		{Name: "mlp.down_proj.weight", Shape: []int{h, ff}, Dst: &l.Down},
	}
	if c.AttentionBias {
		s = append(s,
			models.Spec{Name: "self_attn.q_proj.bias", Shape: []int{q}, Dst: &l.QBias},
			models.Spec{Name: "self_attn.k_proj.bias", Shape: []int{kv}, Dst: &l.KBias},
			models.Spec{Name: "self_attn.v_proj.bias", Shape: []int{kv}, Dst: &l.VBias},
			models.Spec{Name: "self_attn.o_proj.bias", Shape: []int{h}, Dst: &l.OBias},
		)
	}
	return s
}

func (l *Layer) free(be backend.Backend) {
	for _, s := range l.specs() {
		if *s.Dst != nil {
			be.Free(*s.Dst)
		}
	}
}

// Forward runs the layer on the residual stream x [T, hidden] in place.
// The T tokens sit at cache rows [pos, pos+T) of the layer's caches kc and
// vc; s holds activations sized for T tokens and their rotary tables
// (Scratch.SetRope).
func (l *Layer) Forward(be backend.Backend, x backend.Tensor, kc, vc backend.Tensor, pos int, s *Scratch) error {
	c := l.cfg
	T := s.t
	steps := []func() error{
		func() error { return be.RMSNorm(s.h, x, l.InputNorm, float32(c.RMSNormEps)) },
		func() error { return be.MatMul(s.q, s.h, l.Q, l.QBias) },
		func() error { return be.MatMul(s.k, s.h, l.K, l.KBias) },
		func() error { return be.MatMul(s.v, s.h, l.V, l.VBias) },
		func() error { return be.RMSNorm(s.q, s.q, l.QNorm, float32(c.RMSNormEps)) },
		func() error { return be.RMSNorm(s.k, s.k, l.KNorm, float32(c.RMSNormEps)) },
		func() error { return be.Rope(s.q, s.cos, s.sin, c.HeadDim) },
		func() error { return be.Rope(s.k, s.cos, s.sin, c.HeadDim) },
		func() error { return copyRows(be, kc, pos, s.k) },
		func() error { return copyRows(be, vc, pos, s.v) },
		func() error {
			return be.Attention(s.attn, s.q, kc, vc, backend.AttnOpts{
				Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim,
				NKV: pos + T, Scale: s.scale, Causal: true, QPos0: pos,
			})
		},
		func() error { return be.MatMul(s.h, s.attn, l.O, l.OBias) },
		func() error { return be.Add(x, x, s.h) },
		func() error { return be.RMSNorm(s.h, x, l.PostNorm, float32(c.RMSNormEps)) },
		func() error { return be.MatMul(s.gate, s.h, l.Gate, nil) },
		func() error { return be.MatMul(s.up, s.h, l.Up, nil) },
		func() error { return be.SiLUMul(s.gate, s.gate, s.up) },
		func() error { return be.MatMul(s.h, s.gate, l.Down, nil) },
		func() error { return be.Add(x, x, s.h) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

func copyRows(be backend.Backend, cache backend.Tensor, pos int, src backend.Tensor) error {
	rows, _ := backend.Matrix(src)
	dst, err := be.Rows(cache, pos, rows)
	if err != nil {
		return err
	}
	return be.Copy(dst, src)
}
