package residency

import (
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/synth"
)

// configFiles returns the config files synth writes for arch, by path.
func configFiles(t *testing.T, arch synth.Arch) map[string][]byte {
	t.Helper()
	l, err := synth.NewLayout(arch)
	require.NoError(t, err)
	files, err := l.ConfigFiles()
	require.NoError(t, err)
	out := map[string][]byte{}
	for _, f := range files {
		out[f.Path] = f.Data
	}
	return out
}

// archOf builds the planner's architecture from synth's configs of arch,
// as `vlanode plan` does from a checkpoint folder.
func archOf(t *testing.T, arch synth.Arch) *Arch {
	t.Helper()
	files := configFiles(t, arch)
	mt := configs.AlpamayoR1ModelType
	if arch == synth.Qwen3VL8B {
		mt = "qwen3_vl"
	}
	switch mt {
	case configs.AlpamayoR1ModelType:
		alp, err := configs.ParseAlpamayoR1(files["config.json"])
		require.NoError(t, err)
		a, err := AlpamayoR1Arch(alp, configs.VLMConfig{Path: "vlm/config.json", Raw: files["vlm/config.json"]})
		require.NoError(t, err)
		return a
	default:
		vl, err := configs.ParseQwen3VL(files["config.json"])
		require.NoError(t, err)
		return Qwen3VLArch(vl)
	}
}

// alpamayo10B is Alpamayo-R1-10B's architecture.
func alpamayo10B(t *testing.T) *Arch { return archOf(t, synth.AlpamayoR1_10B) }

// defaultProfile is the shipped H200 profile.
func defaultProfile(t *testing.T) *Profile {
	t.Helper()
	p, err := DefaultProfile()
	require.NoError(t, err)
	return p
}

// modulesOf returns the modules of units in order of first appearance.
func modulesOf(units []Unit) []Module {
	var out []Module
	seen := map[Module]bool{}
	for i := range units {
		if m := units[i].Module; !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}
