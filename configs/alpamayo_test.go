package configs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

// releaseLike is an Alpamayo-R1-10B config.json as ALPAMAYO.md §1 reads the
// release (ids from the extended tokenizer, sub-configs from the sources).
const releaseLike = `{
  "model_type": "alpamayo_r1", "architectures": ["AlpamayoR1"],
  "vlm_name_or_path": "Qwen/Qwen3-VL-8B-Instruct",
  "vocab_size": 155697, "traj_vocab_size": 4000,
  "tokens_per_history_traj": 48, "tokens_per_future_traj": 128,
  "min_pixels": 163840, "max_pixels": 196608, "add_special_tokens": true,
  "traj_token_start_idx": 151669,
  "traj_token_ids": {"history": 155684, "future": 155685, "history_start": 155674,
    "future_start": 155681, "history_end": 155676, "future_end": 155683},
  "expert_cfg": {"head_dim": 128, "hidden_size": 2048, "intermediate_size": 8256, "num_attention_heads": 16},
  "action_space_cfg": {"_target_": "alpamayo_r1.action_space.UnicycleAccelCurvatureActionSpace",
    "accel_mean": 0.02902694707164455, "accel_std": 0.6810426736454882,
    "curvature_mean": 0.0002692167976330542, "curvature_std": 0.026148280660833106,
    "curvature_bounds": [-0.33, 0.33]},
  "action_in_proj_cfg": {"_target_": "alpamayo_r1.models.action_in_proj.PerWaypointActionInProjV2",
    "num_enc_layers": 2, "hidden_size": 512, "num_fourier_feats": 20, "max_freq": 100.0},
  "action_out_proj_cfg": {"_target_": "torch.nn.Linear"},
  "diffusion_cfg": {"_target_": "alpamayo_r1.diffusion.flow_matching.FlowMatching", "num_inference_steps": 10},
  "traj_tokenizer_cfg": {"_target_": "alpamayo_r1.action_space.discrete_action_space.DiscreteTrajectoryTokenizer",
    "_recursive_": false, "action_space_cfg": {"_target_": "alpamayo_r1.action_space.UnicycleAccelCurvatureActionSpace"},
    "dims_min": [-10, -10], "dims_max": [10, 10], "num_bins": 3000},
  "hist_traj_tokenizer_cfg": {"_target_": "alpamayo_r1.models.delta_tokenizer.DeltaTrajectoryTokenizer"}
}`

// edit returns releaseLike with its top-level keys changed (nil deletes).
func edit(t *testing.T, changes map[string]any) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(releaseLike), &m))
	for k, v := range changes {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func TestParseAlpamayoR1Release(t *testing.T) {
	c, err := ParseAlpamayoR1([]byte(releaseLike))
	require.NoError(t, err)

	// Values present in the file.
	assert.Equal(t, 155697, c.VocabSize)
	assert.Equal(t, 155681, c.TrajTokenIDs.FutureStart)
	assert.Equal(t, [2]float64{-0.33, 0.33}, c.ActionSpaceCfg.CurvatureBounds)
	assert.Equal(t, 2, c.ActionInProjCfg.NumEncLayers)
	assert.Equal(t, 60, c.ActionInProjCfg.InputFeatures())

	// Defaults of the classes for absent keys.
	assert.Equal(t, "qwenvl3", c.VLMBackend)
	assert.True(t, c.KeepSameDType)
	assert.True(t, c.ExpertNonCausalAttention)
	assert.Equal(t, 64, c.ActionSpaceCfg.NWaypoints)
	assert.Equal(t, 0.1, c.ActionSpaceCfg.DT)
	assert.Equal(t, [2]float64{-9.8, 9.8}, c.ActionSpaceCfg.AccelBounds)
	assert.Equal(t, "euler", c.DiffusionCfg.IntMethod)
	assert.Equal(t, 1000, c.HistTrajTokenizerCfg.NumBins)
	assert.Equal(t, [3]float64{-4, -4, -10}, c.HistTrajTokenizerCfg.EgoXYZMin)
	assert.Equal(t, 64, c.TrajTokenizerCfg.ActionSpaceCfg.NWaypoints)

	// History bins follow the 3000 future bins (ALPAMAYO.md §1).
	assert.Equal(t, 154669, c.HistTokenStartIdx())
}

// TestBufferValuesInBF16 checks the derived buffers against the bf16
// values ALPAMAYO.md §6 measured on the reference.
func TestBufferValuesInBF16(t *testing.T) {
	c, err := ParseAlpamayoR1([]byte(releaseLike))
	require.NoError(t, err)
	want := []float32{1, 1.671875, 2.78125, 4.65625, 7.75, 12.9375, 21.5, 36, 60, 100}
	freqs := c.ActionInProjCfg.Freqs()
	require.Len(t, freqs, len(want))
	for i, f := range freqs {
		assert.Equal(t, want[i], tensor.BF16ToF32(tensor.F32ToBF16(f)), "freq %d", i)
	}
	as := c.ActionSpaceCfg
	for _, b := range []struct {
		v    float64
		want float32
	}{
		{as.AccelStd, 0.6796875}, {as.AccelMean, 0.029052734375},
		{as.CurvatureStd, 0.026123046875}, {as.CurvatureMean, 0.0002689361572265625},
	} {
		assert.Equal(t, b.want, tensor.BF16ToF32(tensor.F32ToBF16(float32(b.v))))
	}
}

func TestParseAlpamayoR1Defaults(t *testing.T) {
	// Only what has no default: the model has no weights without these.
	c, err := ParseAlpamayoR1([]byte(`{"model_type":"alpamayo_r1","vocab_size":152437,"traj_token_start_idx":151669,
	"traj_token_ids":{"history":152436,"future":152435,"history_start":152431,"future_start":152432,"history_end":152433,"future_end":152434},
	"action_space_cfg":{"_target_":"alpamayo_r1.action_space.UnicycleAccelCurvatureActionSpace"},
	"action_in_proj_cfg":{"_target_":"alpamayo_r1.models.action_in_proj.PerWaypointActionInProjV2"},
	"action_out_proj_cfg":{"_target_":"torch.nn.Linear"},
	"diffusion_cfg":{"_target_":"alpamayo_r1.diffusion.flow_matching.FlowMatching"}}`))
	require.NoError(t, err)
	assert.Equal(t, DefaultVLMNameOrPath, c.VLMNameOrPath)
	assert.Equal(t, 768, c.TrajVocabSize)
	assert.Equal(t, 16, c.TokensPerHistoryTraj)
	assert.Equal(t, 64, c.TokensPerFutureTraj)
	assert.Equal(t, "flash_attention_2", c.AttnImplementation)
	assert.Nil(t, c.MinPixels)
	assert.Equal(t, 4, c.ActionInProjCfg.NumEncLayers)
	assert.Equal(t, 1024, c.ActionInProjCfg.HiddenSize)
	assert.Equal(t, 10, c.DiffusionCfg.NumInferenceSteps)
	assert.Equal(t, 1.0, c.ActionSpaceCfg.AccelStd)
	assert.Equal(t, 151669, c.HistTokenStartIdx(), "one tokenizer for history and future")
}

func TestParseAlpamayoR1Errors(t *testing.T) {
	cases := []struct {
		name    string
		changes map[string]any
		wantErr string
	}{
		{"no action space", map[string]any{"action_space_cfg": nil}, "action_space_cfg is missing"},
		{"no diffusion", map[string]any{"diffusion_cfg": nil}, "diffusion_cfg is missing"},
		{"other backend", map[string]any{"vlm_backend": "paligemma"}, `vlm_backend "paligemma"`},
		{"traj tokens past vocab", map[string]any{"vocab_size": 152000}, "do not fit in vocab_size"},
		{"id outside vocab", map[string]any{"traj_token_ids": map[string]int{"history": 1, "future": 2,
			"history_start": 3, "future_start": 999999, "history_end": 5, "future_end": 6}}, "traj_token_ids.future_start"},
		{"bins exceed traj vocab", map[string]any{"traj_vocab_size": 3500}, "3500"},
		{"other solver", map[string]any{"diffusion_cfg": map[string]any{
			"_target_": TargetFlowMatching, "int_method": "rk4"}}, `int_method "rk4"`},
		{"odd fourier", map[string]any{"action_in_proj_cfg": map[string]any{
			"_target_": TargetActionInProjV2, "num_fourier_feats": 7}}, "num_fourier_feats 7"},
		{"other action space", map[string]any{"action_space_cfg": map[string]any{"_target_": "x.Y"}}, `action_space_cfg._target_ "x.Y"`},
		{"pixels reversed", map[string]any{"min_pixels": 10, "max_pixels": 5}, "min_pixels 10"},
		{"wrong type", map[string]any{"vocab_size": "many"}, "vocab_size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseAlpamayoR1(edit(t, c.changes))
			assert.ErrorContains(t, err, c.wantErr)
		})
	}
}

func TestLoadAlpamayoR1(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(releaseLike), 0o644))
	c, err := LoadAlpamayoR1(dir)
	require.NoError(t, err)
	assert.Equal(t, AlpamayoR1ModelType, c.ModelType)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"),
		[]byte(strings.Replace(releaseLike, `"alpamayo_r1"`, `"alpamayo_reasoning_vla"`, 1)), 0o644))
	_, err = LoadAlpamayoR1(dir)
	assert.ErrorIs(t, err, ErrUnknownArchitecture)

	_, err = LoadAlpamayoR1(t.TempDir())
	assert.ErrorContains(t, err, "config.json")
}

// TestAlpamayoR1RoundTrip checks that a marshalled config parses back to
// the same value (synth writes configs this way).
func TestAlpamayoR1RoundTrip(t *testing.T) {
	c, err := ParseAlpamayoR1([]byte(releaseLike))
	require.NoError(t, err)
	b, err := json.Marshal(c)
	require.NoError(t, err)
	c2, err := ParseAlpamayoR1(b)
	require.NoError(t, err)
	assert.Equal(t, c, c2)
}
