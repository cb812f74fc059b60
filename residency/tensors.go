package residency

import (
	"fmt"

	"vlanode/configs"
	"vlanode/models/qwen3"
	"vlanode/tensor"
	"vlanode/weights"
)

// weightDType is the dtype of every weight (vlanode runs bf16 checkpoints).
const weightDType = tensor.BF16

// tensorSpec is one tensor of a unit. A matrix is multiplied by every row
// that passes through the unit; a vector or table is not.
type tensorSpec struct {
	name     string
	shape    []int
	multiply bool
}

func mat(name string, out, in int) tensorSpec {
	return tensorSpec{name: name, shape: []int{out, in}, multiply: true}
}
func vec(name string, n int) tensorSpec      { return tensorSpec{name: name, shape: []int{n}} }
func table(name string, r, c int) tensorSpec { return tensorSpec{name: name, shape: []int{r, c}} }
func withBias(name string, out, in int) tensors {
	return tensors{mat(name+".weight", out, in), vec(name+".bias", out)}
}

// tensors is the content of one unit: the tensors its loader packs into
// one blob (the tables in models/qwen3, models/qwen3vl and diffusion, in
// their order, under unit-local names).
type tensors []tensorSpec

// bytes is the blob size weights.Layout gives the tensors.
func (t tensors) bytes() int64 {
	specs := make([]weights.Spec, len(t))
	for i, s := range t {
		specs[i] = weights.Spec{Name: s.name, DType: weightDType, Shape: s.shape}
	}
	_, n := weights.Layout(specs)
	return n
}

// matFLOPs is 2·rows·out·in summed over the multiplied matrices.
func (t tensors) matFLOPs(rows int) float64 {
	var f float64
	for _, s := range t {
		if s.multiply {
			f += 2 * float64(rows) * float64(s.shape[0]) * float64(s.shape[1])
		}
	}
	return f
}

// patchEmbed is the vision stem ("vision.embed" in models/qwen3vl): the
// Conv3d as a [hidden, patch_dim] matrix, its bias, the position table.
func patchEmbed(v *configs.Qwen3VLVision) tensors {
	h := v.HiddenSize
	return tensors{
		mat("patch_embed.proj.weight", h, v.PatchDim()),
		vec("patch_embed.proj.bias", h),
		table("pos_embed.weight", v.NumPositionEmbeddings, h),
	}
}

// visionBlock is one ViT block: LayerNorms, fused qkv, proj, GELU MLP.
func visionBlock(v *configs.Qwen3VLVision) tensors {
	h, ff := v.HiddenSize, v.IntermediateSize
	t := tensors{vec("norm1.weight", h), vec("norm1.bias", h)}
	t = append(t, withBias("attn.qkv", 3*h, h)...)
	t = append(t, withBias("attn.proj", h, h)...)
	t = append(t, vec("norm2.weight", h), vec("norm2.bias", h))
	t = append(t, withBias("mlp.linear_fc1", ff, h)...)
	return append(t, withBias("mlp.linear_fc2", h, ff)...)
}

// merger is the patch merger or, postShuffle, a DeepStack merger (whose
// LayerNorm runs after the 2×2 fold, over merge_unit·hidden).
func merger(v *configs.Qwen3VLVision, postShuffle bool) tensors {
	u := v.MergeUnit() * v.HiddenSize
	n := v.HiddenSize
	if postShuffle {
		n = u
	}
	t := tensors{vec("norm.weight", n), vec("norm.bias", n)}
	t = append(t, withBias("linear_fc1", u, u)...)
	return append(t, withBias("linear_fc2", v.OutHiddenSize, u)...)
}

// decoderLayer is a Qwen3 decoder layer (the VLM's and the expert's): the
// loader's own table (qwen3.Layer.Specs), 2-D weights multiplied by every
// row.
func decoderLayer(c *configs.Qwen3) tensors {
	specs := qwen3.NewLayer(c).Specs()
	t := make(tensors, len(specs))
	for i, s := range specs {
		t[i] = tensorSpec{name: s.Name, shape: s.Shape, multiply: len(s.Shape) == 2}
	}
	return t
}

// lmHeadBlocks cuts the final norm and the LM head ([vocab, hidden]; the
// embedding matrix when tied) into the fewest blocks of rows whose blobs
// are at most limit bytes, the norm in the first. One block when limit is
// not positive or the head fits.
func lmHeadBlocks(c *configs.Qwen3, limit int64) []tensors {
	v, h := c.VocabSize, c.HiddenSize
	whole := tensors{vec("norm.weight", h), mat("lm_head.weight", v, h)}
	n := 1
	if limit > 0 && whole.bytes() > limit {
		n = int((whole.bytes() + limit - 1) / limit)
	}
	for ; n < v; n++ { // padding may push a block over; then one more
		out := splitRows(v, h, n)
		if limit <= 0 || out[0].bytes() <= limit {
			return out
		}
	}
	return splitRows(v, h, v)
}

// splitRows cuts a [v, h] head into n blocks of ⌈v/n⌉ rows (the last
// smaller), the final norm in the first.
func splitRows(v, h, n int) []tensors {
	if n == 1 {
		return []tensors{{vec("norm.weight", h), mat("lm_head.weight", v, h)}}
	}
	per := (v + n - 1) / n
	out := make([]tensors, 0, n)
	for lo := 0; lo < v; lo += per {
		rows := min(per, v-lo)
		t := tensors{mat(fmt.Sprintf("lm_head.weight[%d:%d]", lo, lo+rows), rows, h)}
		if lo == 0 {
			t = append(tensors{vec("norm.weight", h)}, t...)
		}
		out = append(out, t)
	}
	return out
}

// actionIn is PerWaypointActionInProjV2's MLP (diffusion.ActionInProj):
// Linear(features → H), then per layer RMSNorm and Linear (the last to the
// expert's hidden size), then a LayerNorm. Its Fourier frequencies are read
// on the host and are not in the blob.
func actionIn(c *configs.ActionInProjConfig, out int) tensors {
	h, n := c.HiddenSize, c.NumEncLayers
	var t tensors
	for i := 0; i <= n; i++ {
		in, o := h, h
		if i == 0 {
			in = c.InputFeatures()
		}
		if i == n {
			o = out
		}
		t = append(t, withBias(fmt.Sprintf("encoder.trunk.%d", 3*i), o, in)...)
		if i < n {
			t = append(t, vec(fmt.Sprintf("encoder.trunk.%d.weight", 3*i+2), h))
		}
	}
	return append(t, vec("norm.weight", out), vec("norm.bias", out))
}

// actionOut is the expert's final norm with action_out_proj
// ("expert.head" in diffusion).
func actionOut(hidden int) tensors {
	return append(tensors{vec("expert.norm.weight", hidden)}, withBias("action_out_proj", configs.ActionDims, hidden)...)
}
