package synth

import (
	"math"
	"strconv"

	"vlanode/configs"
	"vlanode/tensor"
)

// Module groups tensors for the size breakdown; the names follow
// DESIGN.md's Standard workload.
type Module string

// Modules, in the order Breakdown reports them.
const (
	ModVisionStem Module = "vision stem"        // patch embedding, position table
	ModVision     Module = "vision"             // the ViT blocks
	ModMerger     Module = "merger"             // the final patch merger
	ModDeepstack  Module = "deepstack mergers"  // one merger per DeepStack block
	ModEmbedding  Module = "embedding"          // embed_tokens
	ModVLMLayers  Module = "VLM layers"         // decoder layers and the final norm
	ModLMHead     Module = "LM head"            // lm_head
	ModExpert     Module = "expert"             // expert layers and final norm
	ModAction     Module = "action projections" // action_in_proj, action_out_proj, action_space
)

var moduleOrder = []Module{ModVisionStem, ModVision, ModMerger, ModDeepstack, ModEmbedding,
	ModVLMLayers, ModLMHead, ModExpert, ModAction}

// InitKind says how a tensor's values are drawn.
type InitKind int

const (
	// InitNormal draws N(Mean, Std²) (through a 16-bit inverse-CDF table).
	InitNormal InitKind = iota
	// InitConst holds Values exactly (rounded to the dtype).
	InitConst
)

// Init describes a tensor's values.
type Init struct {
	Kind      InitKind
	Mean, Std float64
	Values    []float32 // InitConst: one per element
}

// Tensor is one tensor of a synthetic checkpoint.
type Tensor struct {
	Name   string
	DType  tensor.DType
	Shape  []int
	Module Module
	Init   Init
}

// Bytes is the size of the tensor's data.
func (t *Tensor) Bytes() int64 {
	return int64(tensor.NumElements(t.Shape)) * int64(t.DType.Size())
}

// Standard deviations of the non-matrix initialisations.
const (
	embeddingStd = 1.0  // token embeddings
	posEmbedStd  = 0.5  // the vision position table
	normStd      = 0.05 // around 1, for norm weights
	biasStd      = 0.02
)

// builder appends tensors under a prefix and module.
type builder struct {
	out    []Tensor
	prefix string
	module Module
}

func (b *builder) add(name string, init Init, shape ...int) {
	b.out = append(b.out, Tensor{Name: b.prefix + name, DType: tensor.BF16, Shape: shape, Module: b.module, Init: init})
}

// linear adds name.weight [out, in] ~ N(0, 1/in), and name.bias when bias.
func (b *builder) linear(name string, out, in int, bias bool) {
	b.add(name+".weight", normal(0, 1/math.Sqrt(float64(in))), out, in)
	if bias {
		b.add(name+".bias", normal(0, biasStd), out)
	}
}

// layerNorm adds name.weight ≈ 1 and name.bias ≈ 0.
func (b *builder) layerNorm(name string, dim int) {
	b.add(name+".weight", normal(1, normStd), dim)
	b.add(name+".bias", normal(0, biasStd), dim)
}

// rmsNorm adds name.weight ≈ 1.
func (b *builder) rmsNorm(name string, dim int) { b.add(name+".weight", normal(1, normStd), dim) }

func normal(mean, std float64) Init { return Init{Kind: InitNormal, Mean: mean, Std: std} }

func constant(v ...float32) Init { return Init{Kind: InitConst, Values: v} }

// visionTensors is Qwen3VLVisionModel under prefix ("model.visual.").
func visionTensors(prefix string, v visionDims) []Tensor {
	b := &builder{prefix: prefix, module: ModVisionStem}
	fanIn := v.inChannels * v.temporal * v.patch * v.patch
	b.add("patch_embed.proj.weight", normal(0, 1/math.Sqrt(float64(fanIn))), v.hidden, v.inChannels, v.temporal, v.patch, v.patch)
	b.add("patch_embed.proj.bias", normal(0, biasStd), v.hidden)
	b.add("pos_embed.weight", normal(0, posEmbedStd), v.numPosEmbeddings, v.hidden)

	b.module = ModVision
	for i := 0; i < v.depth; i++ {
		p := "blocks." + strconv.Itoa(i) + "."
		b.layerNorm(p+"norm1", v.hidden)
		b.layerNorm(p+"norm2", v.hidden)
		b.linear(p+"attn.qkv", 3*v.hidden, v.hidden, true)
		b.linear(p+"attn.proj", v.hidden, v.hidden, true)
		b.linear(p+"mlp.linear_fc1", v.intermediate, v.hidden, true)
		b.linear(p+"mlp.linear_fc2", v.hidden, v.intermediate, true)
	}

	merged := v.hidden * v.merge * v.merge
	merger := func(p string, normDim int) {
		b.layerNorm(p+"norm", normDim)
		b.linear(p+"linear_fc1", merged, merged, true)
		b.linear(p+"linear_fc2", v.outHidden, merged, true)
	}
	b.module = ModMerger
	merger("merger.", v.hidden) // norm before the 2×2 shuffle
	b.module = ModDeepstack
	for i := range v.deepstack {
		merger("deepstack_merger_list."+strconv.Itoa(i)+".", merged) // norm after it
	}
	return b.out
}

// decoderLayers appends Qwen3-VL text decoder layers (also the expert's)
// under prefix: attention with q/k norms, SwiGLU MLP, two RMSNorms.
func decoderLayers(b *builder, layers, hidden, intermediate, heads, kvHeads, headDim int) {
	for i := 0; i < layers; i++ {
		p := "layers." + strconv.Itoa(i) + "."
		b.linear(p+"self_attn.q_proj", heads*headDim, hidden, false)
		b.linear(p+"self_attn.k_proj", kvHeads*headDim, hidden, false)
		b.linear(p+"self_attn.v_proj", kvHeads*headDim, hidden, false)
		b.linear(p+"self_attn.o_proj", hidden, heads*headDim, false)
		b.rmsNorm(p+"self_attn.q_norm", headDim)
		b.rmsNorm(p+"self_attn.k_norm", headDim)
		b.linear(p+"mlp.gate_proj", intermediate, hidden, false)
		b.linear(p+"mlp.up_proj", intermediate, hidden, false)
		b.linear(p+"mlp.down_proj", hidden, intermediate, false)
		b.rmsNorm(p+"input_layernorm", hidden)
		b.rmsNorm(p+"post_attention_layernorm", hidden)
	}
	b.rmsNorm("norm", hidden)
}

// qwen3VLTensors is Qwen3VLForConditionalGeneration under prefix ("" or
// "vlm."): model.visual, model.language_model, lm_head (untied).
func qwen3VLTensors(prefix string, s *spec) []Tensor {
	t := s.text
	out := visionTensors(prefix+"model.visual.", s.vision)
	b := &builder{prefix: prefix + "model.language_model.", module: ModEmbedding}
	b.add("embed_tokens.weight", normal(0, embeddingStd), t.vocab, t.hidden)
	b.module = ModVLMLayers
	decoderLayers(b, t.layers, t.hidden, t.intermediate, t.heads, t.kvHeads, t.headDim)
	out = append(out, b.out...)
	b = &builder{prefix: prefix, module: ModLMHead}
	b.linear("lm_head", t.vocab, t.hidden, false)
	return append(out, b.out...)
}

// qwen3Tensors is Qwen3ForCausalLM: model.embed_tokens, model.layers,
// model.norm and lm_head (untied), in the order the model registers them.
func qwen3Tensors(s *spec) []Tensor {
	t := s.text
	b := &builder{prefix: "model.", module: ModEmbedding}
	b.add("embed_tokens.weight", normal(0, embeddingStd), t.vocab, t.hidden)
	b.module = ModVLMLayers
	decoderLayers(b, t.layers, t.hidden, t.intermediate, t.heads, t.kvHeads, t.headDim)
	out := b.out
	b = &builder{module: ModLMHead}
	b.linear("lm_head", t.vocab, t.hidden, false)
	return append(out, b.out...)
}

// alpamayoTensors is AlpamayoR1: the VLM under "vlm.", then the expert,
// the action space buffers and the action projections, in the order the
// model registers them.
func alpamayoTensors(s *spec) []Tensor {
	out := qwen3VLTensors("vlm.", s)
	h, t := s.alpamayo, s.text
	e := h.expert

	b := &builder{prefix: "expert.", module: ModExpert}
	decoderLayers(b, t.layers, e.hidden, e.intermediate, e.heads, t.kvHeads, e.headDim)

	b.prefix, b.module = "action_space.", ModAction
	cfg := s.alpamayoConfig().ActionInProjCfg
	if !h.v15 { // Alpamayo 1.5's buffers are non-persistent: not saved
		b.add("accel_mean", constant(float32(h.accelMean)))
		b.add("accel_std", constant(float32(h.accelStd)))
		b.add("curvature_mean", constant(float32(h.curvMean)))
		b.add("curvature_std", constant(float32(h.curvStd)))
	}
	b.prefix = "action_in_proj."
	if !h.v15 {
		freqs := constant(cfg.Freqs()...)
		for i := 0; i < configs.ActionDims; i++ { // one Fourier encoder per control
			b.add("sinus."+strconv.Itoa(i)+".freqs", freqs, 1, len(freqs.Values))
		}
		b.add("timestep_fourier_encoder.freqs", freqs, 1, len(freqs.Values))
	}
	// MLPEncoder.trunk: Linear, SiLU, then per layer RMSNorm, Linear (, SiLU).
	b.linear("encoder.trunk.0", cfg.HiddenSize, cfg.InputFeatures(), true)
	idx := 2
	for l := 0; l < cfg.NumEncLayers; l++ {
		b.rmsNorm("encoder.trunk."+strconv.Itoa(idx), cfg.HiddenSize)
		outDim := cfg.HiddenSize
		if l == cfg.NumEncLayers-1 {
			outDim = e.hidden
		}
		b.linear("encoder.trunk."+strconv.Itoa(idx+1), outDim, cfg.HiddenSize, true)
		idx += 3
	}
	b.layerNorm("norm", e.hidden)

	b.prefix = ""
	b.linear("action_out_proj", configs.ActionDims, e.hidden, true)
	return append(out, b.out...)
}
