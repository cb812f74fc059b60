package diffusion

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/diffusion/actionspace"
)

// releaseConfig is the action side of Alpamayo-R1-10B's config.json as
// ALPAMAYO.md §1 reconstructs it.
const releaseConfig = `{
  "model_type": "alpamayo_r1",
  "vlm_name_or_path": "Qwen/Qwen3-VL-8B-Instruct",
  "expert_cfg": {"head_dim": 128, "hidden_size": 2048, "intermediate_size": 8256, "num_attention_heads": 16},
  "action_in_proj_cfg": {"_target_": "alpamayo_r1.models.action_in_proj.PerWaypointActionInProjV2",
    "num_enc_layers": 2, "hidden_size": 512, "num_fourier_feats": 20, "max_freq": 100},
  "action_out_proj_cfg": {"_target_": "torch.nn.Linear"},
  "action_space_cfg": {"_target_": "alpamayo_r1.action_space.UnicycleAccelCurvatureActionSpace",
    "accel_mean": 0.02902694707164455, "accel_std": 0.6810426736454882,
    "curvature_mean": 0.0002692167976330542, "curvature_std": 0.026148280660833106,
    "curvature_bounds": [-0.33, 0.33]},
  "diffusion_cfg": {"_target_": "alpamayo_r1.diffusion.flow_matching.FlowMatching", "int_method": "euler", "num_inference_steps": 10},
  "hist_traj_tokenizer_cfg": {"_target_": "alpamayo_r1.models.delta_tokenizer.DeltaTrajectoryTokenizer"},
  "expert_non_causal_attention": true,
  "keep_same_dtype": true
}`

// qwen3VL8B is the text part of Qwen3-VL-8B-Instruct's config.json as
// transformers 4.57 writes it (rope_theta beside an M-RoPE rope_scaling).
const qwen3VL8B = `{
  "model_type": "qwen3_vl",
  "text_config": {
    "model_type": "qwen3_vl_text", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-06,
    "hidden_act": "silu", "attention_bias": false, "rope_theta": 5000000,
    "rope_scaling": {"mrope_interleaved": true, "mrope_section": [24, 20, 20], "rope_type": "default"},
    "vocab_size": 151936
  },
  "vision_config": {"depth": 27}
}`

func TestParseReleaseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(releaseConfig), []byte(qwen3VL8B))
	require.NoError(t, err)
	assert.Equal(t, ExpertConfig{
		HiddenSize: 2048, IntermediateSize: 8256, NumHiddenLayers: 36, NumAttentionHeads: 16,
		NumKeyValueHeads: 8, HeadDim: 128, RMSNormEps: 1e-6, HiddenAct: "silu", RopeTheta: 5e6,
		RopeScaling: &RopeConfig{RopeType: "default", MropeSection: []int{24, 20, 20}},
	}, c.Expert, "expert_cfg over the VLM's text config; layers, KV heads, eps and theta inherited")
	assert.Equal(t, InProjConfig{NumEncLayers: 2, HiddenSize: 512, NumFourierFeats: 20, MaxFreq: 100}, c.InProj)
	assert.Equal(t, 10, c.Steps)
	assert.True(t, c.NonCausal)
	assert.Equal(t, actionspace.DefaultDeltaTokenizer(), c.History)
	// the normalisation as the bf16 model holds it (ALPAMAYO.md §6)
	assert.Equal(t, float32(0.029052734375), c.Space.AccelMean)
	assert.Equal(t, float32(0.6796875), c.Space.AccelStd)
	assert.Equal(t, float32(0.0002689361572265625), c.Space.CurvatureMean)
	assert.Equal(t, float32(0.026123046875), c.Space.CurvatureStd)
	assert.Equal(t, 64, c.Space.Waypoints)
	assert.Equal(t, 0.1, c.Space.DT)
}

func TestParseConfigTextConfigDirectly(t *testing.T) {
	// a bare text config (transformers 5 spelling) works as the VLM config
	text := `{"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
	  "num_key_value_heads": 2, "head_dim": 16, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}`
	c, err := ParseConfig([]byte(bareModules), []byte(text))
	require.NoError(t, err)
	assert.Equal(t, 1e6, c.Expert.RopeTheta)
	assert.Equal(t, 64, c.Expert.HiddenSize)
	// absent keys take the constructors' defaults
	assert.Equal(t, InProjConfig{NumEncLayers: 4, HiddenSize: 1024, NumFourierFeats: 20, MaxFreq: 100}, c.InProj)
	assert.Equal(t, float32(1), c.Space.AccelStd)
	assert.Equal(t, 10, c.Steps)
	assert.Equal(t, actionspace.DefaultDeltaTokenizer(), c.History)
}

// bareModules names each module's class and nothing else.
const bareModules = `{
  "action_in_proj_cfg": {"_target_": "alpamayo_r1.models.action_in_proj.PerWaypointActionInProjV2"},
  "action_out_proj_cfg": {"_target_": "torch.nn.Linear"},
  "action_space_cfg": {"_target_": "alpamayo_r1.action_space.UnicycleAccelCurvatureActionSpace"},
  "diffusion_cfg": {"_target_": "alpamayo_r1.diffusion.flow_matching.FlowMatching"}
}`

// with returns bareModules with the keys of extra (a JSON object's
// members) set over it.
func with(t *testing.T, extra string) string {
	t.Helper()
	var m, e map[string]any
	require.NoError(t, json.Unmarshal([]byte(bareModules), &m))
	require.NoError(t, json.Unmarshal([]byte(extra), &e))
	for k, v := range e {
		if sub, ok := v.(map[string]any); ok {
			if base, ok := m[k].(map[string]any); ok {
				for sk, sv := range sub {
					base[sk] = sv
				}
				continue
			}
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, alp, vlm, want string }{
		{"in proj class", with(t, `{"action_in_proj_cfg": {"_target_": "x.PerWaypointActionInProj"}}`), qwen3VL8B, "PerWaypointActionInProjV2"},
		{"integrator", with(t, `{"diffusion_cfg": {"int_method": "heun"}}`), qwen3VL8B, "int_method"},
		{"yaw tokens", with(t, `{"hist_traj_tokenizer_cfg": {"_target_": "alpamayo_r1.models.delta_tokenizer.DeltaTrajectoryTokenizer", "predict_yaw": true}}`), qwen3VL8B, "predict_yaw"},
		{"out proj", with(t, `{"action_out_proj_cfg": {"_target_": "my.MLP"}}`), qwen3VL8B, "torch.nn.Linear"},
		{"heads", with(t, `{"expert_cfg": {"num_attention_heads": 12}}`), strings.Replace(qwen3VL8B, `"num_key_value_heads": 8`, `"num_key_value_heads": 5`, 1), "multiple"},
		{"rope", bareModules, strings.Replace(qwen3VL8B, `"rope_type": "default"`, `"rope_type": "yarn"`, 1), "rope type"},
		{"activation", with(t, `{"expert_cfg": {"hidden_act": "gelu"}}`), qwen3VL8B, "hidden_act"},
		{"steps", with(t, `{"diffusion_cfg": {"num_inference_steps": 0}}`), qwen3VL8B, "num_inference_steps"},
		{"odd features", with(t, `{"action_in_proj_cfg": {"num_fourier_feats": 21}}`), qwen3VL8B, "even"},
		{"std", with(t, `{"action_space_cfg": {"accel_std": 0}}`), qwen3VL8B, "accel_std"},
		{"missing module", `{}`, qwen3VL8B, "action_space_cfg is missing"},
		{"json", `{`, qwen3VL8B, "diffusion config"},
	} {
		_, err := ParseConfig([]byte(tc.alp), []byte(tc.vlm))
		assert.ErrorContains(t, err, tc.want, tc.name)
	}
}
