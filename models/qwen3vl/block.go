package qwen3vl

import (
	"vlanode/backend"
	"vlanode/configs"
	"vlanode/models"
	"vlanode/placement"
)

// VisionBlock is one vision transformer block's weights: pre-LayerNorm
// attention with a fused qkv projection and pre-LayerNorm GELU MLP, each
// with biases.
type VisionBlock struct {
	cfg *configs.Qwen3VLVision

	Norm1W, Norm1B backend.Tensor // [hidden]
	QKV            backend.Tensor // [3*hidden, hidden]: q rows, then k, then v
	QKVBias        backend.Tensor // [3*hidden]
	Proj, ProjBias backend.Tensor // [hidden, hidden], [hidden]
	Norm2W, Norm2B backend.Tensor // [hidden]
	FC1, FC1Bias   backend.Tensor // [intermediate, hidden], [intermediate]
	FC2, FC2Bias   backend.Tensor // [hidden, intermediate], [hidden]

	// q, k, v and their biases are row views of QKV and QKVBias.
	q, k, v, qb, kb, vb backend.Tensor
}

// specs is the one table binding checkpoint names to the block's fields,
// in two parts: the attention (placement.Attn) and the MLP
// (placement.MLP), each its own unit.
func (b *VisionBlock) specs() []models.Spec {
	h, ff := b.cfg.HiddenSize, b.cfg.IntermediateSize
	a, m := placement.Attn, placement.MLP
	return []models.Spec{
		{Name: "norm1.weight", Shape: []int{h}, Dst: &b.Norm1W, Part: a},
		{Name: "norm1.bias", Shape: []int{h}, Dst: &b.Norm1B, Part: a},
		{Name: "attn.qkv.weight", Shape: []int{3 * h, h}, Dst: &b.QKV, Part: a},
		{Name: "attn.qkv.bias", Shape: []int{3 * h}, Dst: &b.QKVBias, Part: a},
		{Name: "attn.proj.weight", Shape: []int{h, h}, Dst: &b.Proj, Part: a},
		{Name: "attn.proj.bias", Shape: []int{h}, Dst: &b.ProjBias, Part: a},
		{Name: "norm2.weight", Shape: []int{h}, Dst: &b.Norm2W, Part: m},
		{Name: "norm2.bias", Shape: []int{h}, Dst: &b.Norm2B, Part: m},
		{Name: "mlp.linear_fc1.weight", Shape: []int{ff, h}, Dst: &b.FC1, Part: m},
		{Name: "mlp.linear_fc1.bias", Shape: []int{ff}, Dst: &b.FC1Bias, Part: m},
		{Name: "mlp.linear_fc2.weight", Shape: []int{h, ff}, Dst: &b.FC2, Part: m},
		{Name: "mlp.linear_fc2.bias", Shape: []int{h}, Dst: &b.FC2Bias, Part: m},
	}
}

// bindViews splits the fused qkv projection into its q, k and v rows.
func (b *VisionBlock) bindViews(be backend.Backend) error {
	h := b.cfg.HiddenSize
	for i, dst := range []*backend.Tensor{&b.q, &b.k, &b.v} {
		t, err := be.Rows(b.QKV, i*h, h)
		if err != nil {
			return err
		}
		*dst = t
	}
	for i, dst := range []*backend.Tensor{&b.qb, &b.kb, &b.vb} {
		t, err := be.Rows(b.QKVBias, i*h, h)
		if err != nil {
			return err
		}
		*dst = t
	}
	return nil
}

// Forward runs the block on the hidden states x [patches, hidden] in place;
// s holds the pass's scratch, rotary tables and frame segments: Attention,
// then MLP.
func (b *VisionBlock) Forward(be backend.Backend, x backend.Tensor, s *visionScratch) error {
	if err := b.Attention(be, x, s); err != nil {
		return err
	}
	return b.MLP(be, x, s)
}

// Attention runs the block's attention part on x in place.
func (b *VisionBlock) Attention(be backend.Backend, x backend.Tensor, s *visionScratch) error {
	c := b.cfg
	hd := c.HeadDim()
	steps := []func() error{
		func() error {
			return backend.LayerNormMatMuls(be, []backend.Tensor{s.q, s.k, s.v}, s.h, x, b.Norm1W, b.Norm1B, visionEps,
				[]backend.Tensor{b.q, b.k, b.v}, []backend.Tensor{b.qb, b.kb, b.vb})
		},
		func() error {
			return backend.RopeAttention(be, s.attn, s.q, s.k, s.v, s.cos, s.sin, backend.AttnOpts{
				Heads: c.NumHeads, KVHeads: c.NumHeads, HeadDim: hd,
				NKV: s.patches, Scale: s.scale, Segments: s.segments,
			})
		},
		func() error { return backend.MatMulResidual(be, x, s.h, s.attn, b.Proj, b.ProjBias) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// MLP runs the block's MLP part on x in place.
func (b *VisionBlock) MLP(be backend.Backend, x backend.Tensor, s *visionScratch) error {
	return backend.LayerNormGELUMLP(be, x, s.h, s.ff, b.Norm2W, b.Norm2B, visionEps, b.FC1, b.FC1Bias, b.FC2,
		b.FC2Bias, b.cfg.TanhGELU())
}

// Merger is a patch merger (transformers' Qwen3VLVisionPatchMerger): it
// folds each merge×merge block of patches into one visual token of the
// text hidden size. The main merger normalizes each patch before folding;
// a DeepStack merger (PostShuffleNorm) normalizes the folded row.
type Merger struct {
	cfg             *configs.Qwen3VLVision
	PostShuffleNorm bool

	NormW, NormB backend.Tensor // [hidden], or [unit*hidden] with PostShuffleNorm
	FC1, FC1Bias backend.Tensor // [unit*hidden, unit*hidden], [unit*hidden]
	FC2, FC2Bias backend.Tensor // [outHidden, unit*hidden], [outHidden]
}

func (m *Merger) specs() []models.Spec {
	h := m.cfg.HiddenSize
	u := m.cfg.MergeUnit() * h
	n := h
	if m.PostShuffleNorm {
		n = u
	}
	return []models.Spec{
		{Name: "norm.weight", Shape: []int{n}, Dst: &m.NormW},
		{Name: "norm.bias", Shape: []int{n}, Dst: &m.NormB},
		{Name: "linear_fc1.weight", Shape: []int{u, u}, Dst: &m.FC1},
		{Name: "linear_fc1.bias", Shape: []int{u}, Dst: &m.FC1Bias},
		{Name: "linear_fc2.weight", Shape: []int{m.cfg.OutHiddenSize, u}, Dst: &m.FC2},
		{Name: "linear_fc2.bias", Shape: []int{m.cfg.OutHiddenSize}, Dst: &m.FC2Bias},
	}
}

// Forward merges x [patches, hidden] into dst [patches/unit, outHidden]:
// LayerNorm, fold unit consecutive patch rows into one, linear_fc1, exact
// GELU, linear_fc2.
func (m *Merger) Forward(be backend.Backend, dst, x backend.Tensor, s *visionScratch) error {
	u := m.cfg.MergeUnit() * m.cfg.HiddenSize
	tokens := s.patches / m.cfg.MergeUnit()
	folded, err := be.Reshape(s.h, tokens, u) // s.h holds the normalized patches
	if err != nil {
		return err
	}
	steps := []func() error{
		func() error {
			if !m.PostShuffleNorm {
				return be.LayerNorm(s.h, x, m.NormW, m.NormB, visionEps)
			}
			xf, err := be.Reshape(x, tokens, u)
			if err != nil {
				return err
			}
			return be.LayerNorm(folded, xf, m.NormW, m.NormB, visionEps)
		},
		func() error { return backend.MatMulGELU(be, s.merged, folded, m.FC1, m.FC1Bias, false) },
		func() error { return be.MatMul(dst, s.merged, m.FC2, m.FC2Bias) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
