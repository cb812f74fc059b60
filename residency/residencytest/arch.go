// Package residencytest gives tests the planner's architectures of the
// models synth knows, built from the config files synth writes, as
// `vlanode plan` builds them from a checkpoint folder.
package residencytest

import (
	"testing"

	"vlanode/configs"
	"vlanode/residency"
	"vlanode/synth"
)

// Arch is the planner's architecture of synth's arch; it fails the test
// when synth's configs do not parse.
func Arch(tb testing.TB, arch synth.Arch) *residency.Arch {
	tb.Helper()
	l, err := synth.NewLayout(arch)
	if err != nil {
		tb.Fatalf("residencytest: %v", err)
	}
	files, err := l.ConfigFiles()
	if err != nil {
		tb.Fatalf("residencytest: %s's configs: %v", arch, err)
	}
	byPath := map[string][]byte{}
	for _, f := range files {
		byPath[f.Path] = f.Data
	}
	if arch == synth.Qwen3_8B || arch == synth.Qwen3Tiny {
		c, err := configs.ParseQwen3(byPath["config.json"])
		if err != nil {
			tb.Fatalf("residencytest: %s: %v", arch, err)
		}
		return residency.Qwen3Arch(c)
	}
	if arch == synth.Qwen3VL8B {
		vl, err := configs.ParseQwen3VL(byPath["config.json"])
		if err != nil {
			tb.Fatalf("residencytest: %s: %v", arch, err)
		}
		return residency.Qwen3VLArch(vl)
	}
	alp, err := configs.ParseAlpamayoR1(byPath["config.json"])
	if err != nil {
		tb.Fatalf("residencytest: %s: %v", arch, err)
	}
	a, err := residency.AlpamayoR1Arch(alp, configs.VLMConfig{Path: "vlm/config.json", Raw: byPath["vlm/config.json"]})
	if err != nil {
		tb.Fatalf("residencytest: %s: %v", arch, err)
	}
	return a
}
