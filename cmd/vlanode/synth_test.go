package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/safetensors"
	"vlanode/synth"
	"vlanode/tensor"
)

// runCmd runs the binary's command line and returns its exit status and
// output.
func runCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func sum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

func TestSynthTiny(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	code, stdout, stderr := runCmd("synth", "--arch", "alpamayo-r1-tiny", "--out", dir, "--seed", "5")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "VLM layers")                // the breakdown
	assert.Contains(t, stdout, "186 tensors, 0.08 GB")      // the summary
	assert.Contains(t, stderr, "100%")                      // the progress bar
	assert.Contains(t, stdout, "model.safetensors to "+dir) // the files

	layout, err := synth.NewLayout(synth.AlpamayoR1Tiny)
	require.NoError(t, err)
	ck, err := safetensors.Open(dir)
	require.NoError(t, err)
	assert.Len(t, ck.Names(), len(layout.Tensors))
	for _, want := range layout.Tensors {
		_, err := ck.Expect(want.Name, tensor.BF16, want.Shape...)
		assert.NoError(t, err)
	}
	require.NoError(t, ck.Close())
	weights := filepath.Join(dir, "model.safetensors")
	first := sum(t, weights)

	// A non-empty folder needs --force; the same seed writes the same bytes.
	code, _, stderr = runCmd("synth", "--arch", "alpamayo-r1-tiny", "--out", dir, "--seed", "5")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "not empty; use --force")
	code, _, stderr = runCmd("synth", "--arch", "alpamayo-r1-tiny", "--out", dir, "--seed", "5", "--force")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, first, sum(t, weights))
	code, _, stderr = runCmd("synth", "--arch", "alpamayo-r1-tiny", "--out", dir, "--seed", "6", "--force")
	require.Equal(t, 0, code, stderr)
	assert.NotEqual(t, first, sum(t, weights))
}

func TestSynthConfigOnly10B(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCmd("synth", "--arch", "alpamayo-r1-10b", "--out", dir, "--config-only", "--force")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "configs only")
	assert.Empty(t, stderr, "no progress bar without weights")
	for _, f := range []string{"config.json", "tokenizer.json", "vlm/config.json", "vlm/tokenizer.json"} {
		assert.FileExists(t, filepath.Join(dir, f))
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors*"))
	assert.Empty(t, matches)

	cfg, err := configs.LoadAlpamayoR1(dir)
	require.NoError(t, err)
	assert.Equal(t, 155697, cfg.VocabSize)
	assert.Equal(t, 2048, int(cfg.ExpertCfg["hidden_size"].(float64)))
	vlm, err := cfg.LocateVLM(dir, configs.VLMLocator{})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "vlm", "config.json"), vlm.Path)
}

func TestSynthUsage(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"synth"}, 2, "--arch and --out are required"},
		{[]string{"synth", "--arch", "alpamayo-r1-tiny"}, 2, "--arch and --out are required"},
		{[]string{"synth", "--arch", "llama", "--out", "x"}, 2, `unknown architecture "llama" (known: alpamayo-r1-10b, alpamayo-r1-tiny, alpamayo-1.5-10b, alpamayo-1.5-tiny, qwen3-vl-8b, qwen3-8b, qwen3-tiny)`},
		{[]string{"synth", "--arch", "qwen3-vl-8b", "--out", "x", "extra"}, 2, "unexpected arguments"},
		{[]string{"synth", "--seed", "-1"}, 2, "invalid value"},
	}
	for _, c := range cases {
		code, _, stderr := runCmd(c.args...)
		assert.Equal(t, c.code, code, "%v", c.args)
		assert.Contains(t, stderr, c.want, "%v", c.args)
	}
}
