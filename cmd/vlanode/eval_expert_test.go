package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/safetensors"
	"vlanode/tensor"
)

// expertCase is a tiny Alpamayo-R1 action side with a VLM cache, and what
// transformers' Qwen3VLTextModel computed over it (scripts/reference).
const expertCase = "../../testdata/reference/alpamayo-expert"

func expertArgs(out string, extra ...string) []string {
	return append([]string{"eval", "--device", "cpu", "--model", expertCase,
		"--vlm", filepath.Join(expertCase, "vlm_config.json"),
		"--inputs", filepath.Join(expertCase, "inputs.safetensors"), "--out", out}, extra...)
}

func TestEvalExpert(t *testing.T) {
	out := filepath.Join(t.TempDir(), "expert.safetensors")
	ref := filepath.Join(expertCase, "expected.safetensors")
	code, stdout, stderr := runCLI(expertArgs(out, "--states", ref, "--expect", ref)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "loaded the action side")
	assert.Contains(t, stdout, "wrote velocity [10, 64, 2]")
	for _, name := range []string{"in_proj", "hidden", "velocity", "new_k", "new_v"} {
		assert.Contains(t, stdout, "MATCH: "+name+" vs ")
	}
	assert.NotContains(t, stdout, "MISMATCH")
	f, err := safetensors.OpenFile(out)
	require.NoError(t, err)
	defer f.Close()
	for _, c := range []struct {
		name  string
		shape []int
	}{{"velocity", []int{10, 64, 2}}, {"hidden", []int{10, 64, 64}}, {"in_proj", []int{10, 64, 64}}, {"new_k", []int{3, 64, 32}}} {
		_, err := f.Expect(c.name, tensor.F32, c.shape...)
		assert.NoError(t, err, c.name)
	}

	// Without --states: the noise at t = 0, the reference's first state.
	code, stdout, stderr = runCLI(expertArgs(out, "--expect", ref)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "wrote velocity [1, 64, 2]")
	assert.NotContains(t, stdout, "MISMATCH")

	// A tolerance below the measured difference fails, naming what differs.
	code, stdout, stderr = runCLI(expertArgs(out, "--states", ref, "--expect", ref, "--atol", "1e-9", "--rtol", "0")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "MISMATCH: velocity vs ")
	assert.Contains(t, stderr, "differ from")

	// Another case's reference: shapes differ.
	other := "../../testdata/reference/alpamayo-expert-mha/expected.safetensors"
	code, _, stderr = runCLI(expertArgs(out, "--states", ref, "--expect", other)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "values, reference has")
}

func TestEvalExpertBadInputs(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.safetensors")
	in, err := safetensors.OpenFile(filepath.Join(expertCase, "inputs.safetensors"))
	require.NoError(t, err)
	defer in.Close()
	// the reference inputs less one tensor, or with one replaced
	inputs := func(drop string, add ...safetensors.Tensor) string {
		var ts []safetensors.Tensor
		for _, name := range in.Names() {
			info, err := in.Tensor(name)
			require.NoError(t, err)
			if name == drop {
				continue
			}
			ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: info.Data})
		}
		return writeInputs(t, append(ts, add...)...)
	}
	with := func(inputs string, extra ...string) []string {
		args := expertArgs(out, extra...)
		args[8] = inputs // after --inputs
		return args
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no kv_k", with(inputs("kv_k")), 1, `tensor "kv_k" not found`},
		{"no kv_v", with(inputs("kv_v")), 1, `tensor "kv_v" not found`},
		{"cache of two layers", with(inputs("kv_k", safetensors.F32Tensor("kv_k", []int{2, 40, 32}, make([]float32, 2*40*32)))), 1, `"kv_k"`},
		{"no cached tokens", with(inputs("prefix", safetensors.I64Tensor("prefix", []int{3}, []int64{0, 0, 0}))), 1, "want at least 1"},
		{"offset past the sequence", with(inputs("prefix", safetensors.I64Tensor("prefix", []int{3}, []int64{40, 45, 0}))), 1, "offset"},
		{"states without x_steps", expertArgs(out, "--states", filepath.Join(expertCase, "inputs.safetensors")), 1, `"x_steps" not found`},
		{"no VLM config", []string{"eval", "--device", "cpu", "--model", expertCase,
			"--inputs", filepath.Join(expertCase, "inputs.safetensors"), "--out", out}, 1, "--vlm"},
		{"states on a qwen3 model", []string{"eval", "--device", "cpu", "--model", "../../testdata/reference/qwen3-gqa4-tied",
			"--inputs", "x", "--out", out, "--states", "y"}, 2, "alpamayo_r1 checkpoints"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI(c.args...)
			assert.Equal(t, c.code, code, stderr)
			assert.Contains(t, stderr, c.want)
		})
	}
}
