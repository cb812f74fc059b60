package synth

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

// TestAlpamayo10BSizes checks the computed layout against DESIGN.md's
// Standard workload: vision 0.82, merger 0.08, VLM layers 13.89 (36 × 386
// MB), embedding 1.28, LM head 1.28, expert 4.56 (36 × 127 MB), in 10^9
// bytes, each within 1%.
func TestAlpamayo10BSizes(t *testing.T) {
	l, err := NewLayout(AlpamayoR1_10B)
	require.NoError(t, err)
	got := map[Module]int64{}
	for _, m := range l.Breakdown() {
		got[m.Module] = m.Bytes
	}
	design := []struct {
		m  Module
		gb float64
	}{
		{ModVision, 0.82}, {ModMerger, 0.08}, {ModVLMLayers, 13.89}, {ModEmbedding, 1.28},
		{ModLMHead, 1.28}, {ModExpert, 4.56},
	}
	var listed int64
	for _, d := range design {
		gb := float64(got[d.m]) / 1e9
		assert.InDelta(t, d.gb, gb, d.gb*0.01, "%s: %.3f GB, DESIGN.md says %.2f", d.m, gb, d.gb)
		listed += got[d.m]
	}
	// Per layer: 386 MB and 127 MB.
	assert.InDelta(t, 386e6, float64(got[ModVLMLayers])/36, 386e6*0.01)
	assert.InDelta(t, 127e6, float64(got[ModExpert])/36, 127e6*0.01)

	// DESIGN.md's 21.9 GB leaves out the DeepStack mergers (3 × 80 MB),
	// the vision stem and the action projections.
	assert.InDelta(t, 21.9, float64(listed)/1e9, 21.9*0.01)
	rest := l.Bytes() - listed
	assert.Equal(t, got[ModDeepstack]+got[ModVisionStem]+got[ModAction], rest)
	assert.InDelta(t, 0.241, float64(got[ModDeepstack])/1e9, 0.001)
	assert.InDelta(t, 22.16, float64(l.Bytes())/1e9, 0.01)
}

// TestAlpamayoTensorNames checks names, shapes and counts against
// ALPAMAYO.md §1.
func TestAlpamayoTensorNames(t *testing.T) {
	l, err := NewLayout(AlpamayoR1_10B)
	require.NoError(t, err)
	shapes := map[string][]int{}
	nonVLM := 0
	for _, ts := range l.Tensors {
		_, dup := shapes[ts.Name]
		require.False(t, dup, "duplicate %s", ts.Name)
		shapes[ts.Name] = ts.Shape
		assert.Equal(t, tensor.BF16, ts.DType)
		if !strings.HasPrefix(ts.Name, "vlm.") {
			nonVLM++
		}
	}
	assert.Equal(t, 416, nonVLM, "ALPAMAYO.md §1: 416 non-VLM tensors")
	V := 155697
	for name, want := range map[string][]int{
		"vlm.model.visual.patch_embed.proj.weight":                   {1152, 3, 2, 16, 16},
		"vlm.model.visual.patch_embed.proj.bias":                     {1152},
		"vlm.model.visual.pos_embed.weight":                          {2304, 1152},
		"vlm.model.visual.blocks.26.attn.qkv.weight":                 {3456, 1152},
		"vlm.model.visual.blocks.0.mlp.linear_fc1.weight":            {4304, 1152},
		"vlm.model.visual.blocks.0.mlp.linear_fc2.bias":              {1152},
		"vlm.model.visual.merger.norm.weight":                        {1152},
		"vlm.model.visual.merger.linear_fc1.weight":                  {4608, 4608},
		"vlm.model.visual.merger.linear_fc2.weight":                  {4096, 4608},
		"vlm.model.visual.deepstack_merger_list.2.norm.bias":         {4608},
		"vlm.model.language_model.embed_tokens.weight":               {V, 4096},
		"vlm.model.language_model.layers.35.self_attn.q_proj.weight": {4096, 4096},
		"vlm.model.language_model.layers.0.self_attn.k_proj.weight":  {1024, 4096},
		"vlm.model.language_model.layers.0.self_attn.q_norm.weight":  {128},
		"vlm.model.language_model.layers.0.mlp.down_proj.weight":     {4096, 12288},
		"vlm.model.language_model.norm.weight":                       {4096},
		"vlm.lm_head.weight":                                         {V, 4096},
		"expert.layers.0.self_attn.q_proj.weight":                    {2048, 2048},
		"expert.layers.35.self_attn.v_proj.weight":                   {1024, 2048},
		"expert.layers.0.self_attn.k_norm.weight":                    {128},
		"expert.layers.0.mlp.gate_proj.weight":                       {8256, 2048},
		"expert.layers.0.mlp.down_proj.weight":                       {2048, 8256},
		"expert.norm.weight":                                         {2048},
		"action_in_proj.sinus.1.freqs":                               {1, 10},
		"action_in_proj.timestep_fourier_encoder.freqs":              {1, 10},
		"action_in_proj.encoder.trunk.0.weight":                      {512, 60},
		"action_in_proj.encoder.trunk.2.weight":                      {512},
		"action_in_proj.encoder.trunk.3.bias":                        {512},
		"action_in_proj.encoder.trunk.5.weight":                      {512},
		"action_in_proj.encoder.trunk.6.weight":                      {2048, 512},
		"action_in_proj.norm.bias":                                   {2048},
		"action_out_proj.weight":                                     {2, 2048},
		"action_out_proj.bias":                                       {2},
		"action_space.curvature_std":                                 {},
	} {
		got, ok := shapes[name]
		if assert.True(t, ok, "missing %s", name) {
			assert.Equal(t, want, append([]int{}, got...), name)
		}
	}
	for _, absent := range []string{"expert.embed_tokens.weight", "vlm.model.visual.merger.ln_q.weight",
		"vlm.model.language_model.layers.0.self_attn.q_proj.bias"} {
		assert.NotContains(t, shapes, absent)
	}
}

func TestQwen3VL8BLayout(t *testing.T) {
	l, err := NewLayout(Qwen3VL8B)
	require.NoError(t, err)
	names := map[string][]int{}
	for _, ts := range l.Tensors {
		names[ts.Name] = ts.Shape
		assert.False(t, strings.HasPrefix(ts.Name, "vlm.") || strings.HasPrefix(ts.Name, "expert."), ts.Name)
	}
	assert.Equal(t, []int{151936, 4096}, names["model.language_model.embed_tokens.weight"])
	assert.Equal(t, []int{151936, 4096}, names["lm_head.weight"])
	assert.Contains(t, names, "model.visual.blocks.26.norm2.weight")
	assert.InDelta(t, 17.53, float64(l.Bytes())/1e9, 0.01)
	shards := l.shards(DefaultMaxShardBytes)
	assert.Len(t, shards, 4)
	for _, s := range shards {
		assert.LessOrEqual(t, s.bytes, int64(DefaultMaxShardBytes))
	}
}

func TestTinyLayout(t *testing.T) {
	l, err := NewLayout(AlpamayoR1Tiny)
	require.NoError(t, err)
	assert.Less(t, l.Bytes(), int64(100e6), "tiny stays small")
	shards := l.shards(DefaultMaxShardBytes)
	require.Len(t, shards, 1)
	assert.Equal(t, "model.safetensors", shards[0].file)
	names := map[string][]int{}
	for _, ts := range l.Tensors {
		names[ts.Name] = ts.Shape
	}
	// Expert layer i attends to the VLM's layer-i cache: same KV heads and head_dim.
	assert.Equal(t, names["vlm.model.language_model.layers.0.self_attn.k_proj.weight"][0],
		names["expert.layers.0.self_attn.k_proj.weight"][0])
	assert.Equal(t, []int{128, 64}, names["expert.layers.3.self_attn.q_proj.weight"])
	assert.Equal(t, []int{64, 60}, names["action_in_proj.encoder.trunk.0.weight"])
	assert.Equal(t, []int{64, 64}, names["action_in_proj.encoder.trunk.6.weight"])
	assert.Equal(t, []int{155697, 128}, names["vlm.lm_head.weight"])
}

func TestShards(t *testing.T) {
	l := &Layout{}
	for i, mb := range []int{3, 3, 3, 7, 1} {
		l.Tensors = append(l.Tensors, Tensor{Name: fmt.Sprint(i), DType: tensor.BF16, Shape: []int{mb << 19}})
	}
	cases := []struct {
		max  int64
		want []int // tensors per shard
	}{
		{100 << 20, []int{5}},
		{6 << 20, []int{2, 1, 1, 1}},
		{7 << 20, []int{2, 1, 1, 1}},
		{8 << 20, []int{2, 1, 2}},
		{1 << 20, []int{1, 1, 1, 1, 1}},
	}
	for _, c := range cases {
		var got []int
		for _, s := range l.shards(c.max) {
			got = append(got, s.end-s.first)
		}
		assert.Equal(t, c.want, got, "max %d MiB", c.max>>20)
	}
	names := l.shards(8 << 20)
	assert.Equal(t, "model-00001-of-00003.safetensors", names[0].file)
	assert.Equal(t, "model-00003-of-00003.safetensors", names[2].file)
}

func TestNormalTable(t *testing.T) {
	tab := normalTable(0, 0.25)
	var sum, sq float64
	for _, b := range tab {
		v := float64(tensor.BF16ToF32(b))
		sum += v
		sq += v * v
	}
	n := float64(len(tab))
	assert.InDelta(t, 0, sum/n, 1e-4)
	assert.InDelta(t, 0.25, math.Sqrt(sq/n), 0.25*0.01)
	assert.Less(t, tensor.BF16ToF32(tab[0]), float32(-4*0.25), "tails reach past 4σ")
}
