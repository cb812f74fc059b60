package configs

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withTarget returns releaseLike with the _target_ of the sub-config at key
// (a top-level key, or "traj_tokenizer_cfg.action_space_cfg") set to v.
func withTarget(t *testing.T, key, v string) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(releaseLike), &m))
	sub := m
	for _, k := range splitKey(key) {
		next, ok := sub[k].(map[string]any)
		require.True(t, ok, "releaseLike has no %s", key)
		sub = next
	}
	sub["_target_"] = v
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func splitKey(key string) []string {
	if key == "traj_tokenizer_cfg.action_space_cfg" {
		return []string{"traj_tokenizer_cfg", "action_space_cfg"}
	}
	return []string{key}
}

// The spellings NVIDIA's code writes or resolves, class by class: the
// published R1 config's short paths, the full module paths of training and
// converted configs, Alpamayo 1.5's alpamayo1_5.* names, and those that
// only resolve through TARGET_REMAP.
var targetCases = []struct {
	key       string
	class     Class
	spellings []string
}{
	{"action_space_cfg", ClassUnicycleActionSpace, []string{
		"alpamayo_r1.action_space.UnicycleAccelCurvatureActionSpace",
		"alpamayo_r1.action_space.unicycle_accel_curvature.UnicycleAccelCurvatureActionSpace",
		"alpamayo1_5.action_space.UnicycleAccelCurvatureActionSpace",
		"alpamayo1_5.action_space.unicycle_accel_curvature.UnicycleAccelCurvatureActionSpace",
	}},
	{"traj_tokenizer_cfg.action_space_cfg", ClassUnicycleActionSpace, []string{
		"alpamayo_r1.action_space.unicycle_accel_curvature.UnicycleAccelCurvatureActionSpace",
		"alpamayo1_5.action_space.UnicycleAccelCurvatureActionSpace",
	}},
	{"action_in_proj_cfg", ClassActionInProjV2, []string{
		"alpamayo_r1.models.action_in_proj.PerWaypointActionInProjV2",
		"alpamayo1_5.models.action_in_proj.PerWaypointActionInProjV2",
	}},
	{"action_out_proj_cfg", ClassLinear, []string{"torch.nn.Linear", "torch.nn.modules.linear.Linear"}},
	{"diffusion_cfg", ClassFlowMatching, []string{
		"alpamayo_r1.diffusion.flow_matching.FlowMatching",
		"alpamayo1_5.diffusion.flow_matching.FlowMatching",
	}},
	{"traj_tokenizer_cfg", ClassDiscreteTokenizer, []string{
		"alpamayo_r1.action_space.discrete_action_space.DiscreteTrajectoryTokenizer",
		"alpamayo_r1.action_space.DiscreteTrajectoryTokenizer",
		"alpamayo1_5.action_space.discrete_action_space.DiscreteTrajectoryTokenizer",
		// alpamayo1_5.action_space does not re-export it; TARGET_REMAP
		// maps the name to alpamayo_r1.action_space's, which does
		"alpamayo1_5.action_space.DiscreteTrajectoryTokenizer",
	}},
	{"hist_traj_tokenizer_cfg", ClassDeltaTokenizer, []string{
		"alpamayo_r1.models.delta_tokenizer.DeltaTrajectoryTokenizer",
		"alpamayo1_5.models.delta_tokenizer.DeltaTrajectoryTokenizer",
	}},
}

func TestTargetSpellingsLoad(t *testing.T) {
	for _, tc := range targetCases {
		for _, s := range tc.spellings {
			t.Run(tc.key+"="+s, func(t *testing.T) {
				assert.True(t, tc.class.Accepts(s))
				c, err := ParseAlpamayoR1(withTarget(t, tc.key, s))
				require.NoError(t, err)
				_, err = DecodeAlpamayoR1(withTarget(t, tc.key, s))
				require.NoError(t, err)
				assert.Equal(t, 4000, c.TrajVocabSize)
			})
		}
	}
}

// TestTargetSpellingsComplete checks that each class accepts exactly the
// spellings listed above (no more: a list that grew by accident would let a
// wrong class through).
func TestTargetSpellingsComplete(t *testing.T) {
	seen := map[string]map[string]bool{}
	for _, tc := range targetCases {
		if seen[tc.class.Name] == nil {
			seen[tc.class.Name] = map[string]bool{}
		}
		for _, s := range tc.spellings {
			seen[tc.class.Name][s] = true
		}
	}
	for _, c := range []Class{ClassUnicycleActionSpace, ClassActionInProjV2, ClassLinear, ClassFlowMatching, ClassDiscreteTokenizer, ClassDeltaTokenizer} {
		got := map[string]bool{}
		for _, s := range c.Spellings {
			got[s] = true
		}
		assert.Equal(t, seen[c.Name], got, c.Name)
	}
}

func TestTargetRefused(t *testing.T) {
	for _, tc := range []struct{ key, value, class string }{
		{"action_space_cfg", "alpamayo_r1.action_space.unicycle_accel_curvature.UnicycleAccelCurvature", "UnicycleAccelCurvatureActionSpace"},
		{"action_space_cfg", "alpamayo2.action_space.UnicycleAccelCurvatureActionSpace", "UnicycleAccelCurvatureActionSpace"},
		{"action_in_proj_cfg", "alpamayo_r1.models.action_in_proj.PerWaypointActionInProj", "PerWaypointActionInProjV2"},
		{"action_out_proj_cfg", "torch.nn.Bilinear", "Linear"},
		{"diffusion_cfg", "alpamayo_r1.diffusion.FlowMatching", "FlowMatching"},
		{"hist_traj_tokenizer_cfg", "alpamayo_r1.action_space.DeltaTrajectoryTokenizer", "DeltaTrajectoryTokenizer"},
		{"traj_tokenizer_cfg.action_space_cfg", "x.Y", "UnicycleAccelCurvatureActionSpace"},
	} {
		_, err := ParseAlpamayoR1(withTarget(t, tc.key, tc.value))
		require.Error(t, err, tc.value)
		msg := err.Error()
		assert.Contains(t, msg, tc.key+`._target_ "`+tc.value+`" is not supported`, "names the key and the value")
		assert.Contains(t, msg, "vlanode runs "+tc.class, "names the class")
		for _, c := range []Class{ClassUnicycleActionSpace, ClassActionInProjV2, ClassLinear, ClassFlowMatching, ClassDeltaTokenizer} {
			if c.Name == tc.class {
				for _, s := range c.Spellings {
					assert.Contains(t, msg, s, "lists the accepted names")
				}
			}
		}
	}
}
