package diffusion

import (
	"fmt"

	"vlanode/backend"
	"vlanode/models"
)

// Layer is one expert decoder layer: a standard Qwen3 (Qwen3-VL text)
// decoder layer, with no biases.
type Layer struct {
	cfg *ExpertConfig

	InputNorm backend.Tensor // [hidden]
	Q         backend.Tensor // [heads*headDim, hidden]
	K         backend.Tensor // [kvHeads*headDim, hidden]
	V         backend.Tensor // [kvHeads*headDim, hidden]
	O         backend.Tensor // [hidden, heads*headDim]
	QNorm     backend.Tensor // [headDim]
	KNorm     backend.Tensor // [headDim]
	PostNorm  backend.Tensor // [hidden]
	Gate      backend.Tensor // [intermediate, hidden]
	Up        backend.Tensor // [intermediate, hidden]
	Down      backend.Tensor // [hidden, intermediate]
}

// specs is the one table binding checkpoint names (under
// expert.layers.N.) to the layer's fields.
func (l *Layer) specs() []models.Spec {
	c := l.cfg
	h, q, kv, ff, hd := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim, c.IntermediateSize, c.HeadDim
	return []models.Spec{
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
}

// Forward runs the layer on the action tokens' residual stream x [T, hidden]
// in place. Their keys and values are written into rows [n, n+T) of kc and
// vc, the VLM layer's cache, whose rows [0, n) hold the prefix; every query
// then attends to all n+T rows but the hidden ones [maskFrom, n), with no
// causal mask: the action tokens see each other both ways. s holds the
// rotary tables of the T tokens and scratch for them.
func (l *Layer) Forward(be backend.Backend, x, kc, vc backend.Tensor, n, maskFrom int, s *scratch) error {
	c := l.cfg
	eps := float32(c.RMSNormEps)
	steps := []struct {
		name string
		run  func() error
	}{
		{"input norm", func() error { return be.RMSNorm(s.h, x, l.InputNorm, eps) }},
		{"q", func() error { return be.MatMul(s.q, s.h, l.Q, nil) }},
		{"k", func() error { return be.MatMul(s.k, s.h, l.K, nil) }},
		{"v", func() error { return be.MatMul(s.v, s.h, l.V, nil) }},
		{"q norm", func() error { return be.RMSNorm(s.q, s.q, l.QNorm, eps) }},
		{"k norm", func() error { return be.RMSNorm(s.k, s.k, l.KNorm, eps) }},
		{"q rope", func() error { return be.Rope(s.q, s.cos, s.sin, c.HeadDim) }},
		{"k rope", func() error { return be.Rope(s.k, s.cos, s.sin, c.HeadDim) }},
		{"k to cache", func() error { return copyRows(be, kc, n, s.k) }},
		{"v to cache", func() error { return copyRows(be, vc, n, s.v) }},
		{"attention", func() error {
			return be.Attention(s.attn, s.q, kc, vc, backend.AttnOpts{
				Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim,
				NKV: n + s.t, Scale: s.scale, MaskFrom: maskFrom, MaskTo: n,
			})
		}},
		{"o", func() error { return be.MatMul(s.h, s.attn, l.O, nil) }},
		{"attention residual", func() error { return be.Add(x, x, s.h) }},
		{"post norm", func() error { return be.RMSNorm(s.h, x, l.PostNorm, eps) }},
		{"gate", func() error { return be.MatMul(s.gate, s.h, l.Gate, nil) }},
		{"up", func() error { return be.MatMul(s.up, s.h, l.Up, nil) }},
		{"silu·up", func() error { return be.SiLUMul(s.gate, s.gate, s.up) }},
		{"down", func() error { return be.MatMul(s.h, s.gate, l.Down, nil) }},
		{"mlp residual", func() error { return be.Add(x, x, s.h) }},
	}
	for _, st := range steps {
		if err := st.run(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	return nil
}

// copyRows copies src [rows, cols] into rows [pos, pos+rows) of cache.
func copyRows(be backend.Backend, cache backend.Tensor, pos int, src backend.Tensor) error {
	rows, _ := backend.Matrix(src)
	dst, err := be.Rows(cache, pos, rows)
	if err != nil {
		return err
	}
	return be.Copy(dst, src)
}
