package synth

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
)

// TestQwen3_8BLayout checks Qwen/Qwen3-8B's layout without writing it:
// 8,190,735,360 parameters (Qwen's "8.2B"), their names and shapes, and a
// config.json that vlanode's loader reads back as Qwen3-8B's values.
func TestQwen3_8BLayout(t *testing.T) {
	l, err := NewLayout(Qwen3_8B)
	require.NoError(t, err)
	// Per layer: q and o 4096², k and v 1024×4096, gate/up/down
	// 3×4096×12288, four norms (two of 128, two of 4096).
	perLayer := int64(2*4096*4096 + 2*1024*4096 + 3*4096*12288 + 2*128 + 2*4096)
	params := 36*perLayer + 4096 + 2*151936*4096
	assert.Equal(t, int64(8_190_735_360), params)
	assert.Equal(t, 2*params, l.Bytes(), "bf16")
	assert.Len(t, l.Tensors, 36*11+3)
	shapes := map[string][]int{}
	for _, ts := range l.Tensors {
		shapes[ts.Name] = ts.Shape
	}
	for name, shape := range map[string][]int{
		"model.embed_tokens.weight":                      {151936, 4096},
		"model.layers.0.self_attn.q_proj.weight":         {4096, 4096},
		"model.layers.35.self_attn.k_proj.weight":        {1024, 4096},
		"model.layers.7.self_attn.q_norm.weight":         {128},
		"model.layers.7.mlp.down_proj.weight":            {4096, 12288},
		"model.layers.7.post_attention_layernorm.weight": {4096},
		"model.norm.weight":                              {4096},
		"lm_head.weight":                                 {151936, 4096},
	} {
		assert.Equal(t, shape, shapes[name], name)
	}
	got := map[Module]int64{}
	for _, m := range l.Breakdown() {
		got[m.Module] = m.Bytes
	}
	assert.Equal(t, int64(2*151936*4096), got[ModLMHead])
	assert.Equal(t, got[ModLMHead], got[ModEmbedding])

	files, err := l.ConfigFiles()
	require.NoError(t, err)
	require.Len(t, files, 2)
	assert.Equal(t, "config.json", files[0].Path)
	assert.Equal(t, "tokenizer.json", files[1].Path)
	c, err := configs.ParseQwen3(files[0].Data)
	require.NoError(t, err)
	assert.Equal(t, configs.Qwen3{
		ModelType: "qwen3", VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 12288, NumHiddenLayers: 36,
		NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 40960, RMSNormEps: 1e-6,
		RopeTheta: 1e6, HiddenAct: "silu", EOSTokenID: float64(151645),
	}, *c)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(files[0].Data, &raw))
	assert.Equal(t, []any{"Qwen3ForCausalLM"}, raw["architectures"])
	assert.Equal(t, false, raw["tie_word_embeddings"])
	assert.Nil(t, raw["rope_scaling"])
	assert.Equal(t, "bfloat16", raw["torch_dtype"])
}
