package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/safetensors"
	"vlanode/tensor"
)

// tinyConfig is a small Qwen3 architecture for command-line tests.
var tinyConfig = map[string]any{
	"model_type": "qwen3", "architectures": []string{"Qwen3ForCausalLM"},
	"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
	"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
	"max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
	"tie_word_embeddings": true,
}

// tinyTensors returns random bf16 weights for tinyConfig.
func tinyTensors() []safetensors.Tensor {
	rng := rand.New(rand.NewPCG(1, 2))
	bf16 := func(name string, shape ...int) safetensors.Tensor {
		v := make([]float32, tensor.NumElements(shape))
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.2)
		}
		data, _ := tensor.FromF32(tensor.BF16, v)
		return safetensors.Tensor{Name: name, DType: tensor.BF16, Shape: shape, Data: data}
	}
	ts := []safetensors.Tensor{bf16("model.embed_tokens.weight", 64, 32), bf16("model.norm.weight", 32)}
	for i := 0; i < 2; i++ {
		p := "model.layers." + string(rune('0'+i)) + "."
		ts = append(ts,
			bf16(p+"input_layernorm.weight", 32), bf16(p+"post_attention_layernorm.weight", 32),
			bf16(p+"self_attn.q_proj.weight", 32, 32), bf16(p+"self_attn.k_proj.weight", 16, 32),
			bf16(p+"self_attn.v_proj.weight", 16, 32), bf16(p+"self_attn.o_proj.weight", 32, 32),
			bf16(p+"self_attn.q_norm.weight", 8), bf16(p+"self_attn.k_norm.weight", 8),
			bf16(p+"mlp.gate_proj.weight", 48, 32), bf16(p+"mlp.up_proj.weight", 48, 32),
			bf16(p+"mlp.down_proj.weight", 32, 48))
	}
	return ts
}

// writeModel writes a checkpoint directory after applying edit to the
// tensors and config.
func writeModel(t *testing.T, edit func([]safetensors.Tensor, map[string]any) []safetensors.Tensor) string {
	t.Helper()
	dir := t.TempDir()
	cfg := map[string]any{}
	for k, v := range tinyConfig {
		cfg[k] = v
	}
	ts := tinyTensors()
	if edit != nil {
		ts = edit(ts, cfg)
	}
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
	require.NoError(t, safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil))
	return dir
}

func writeInputs(t *testing.T, ts ...safetensors.Tensor) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "inputs.safetensors")
	require.NoError(t, safetensors.WriteFile(p, ts, nil))
	return p
}

func goodInputs(t *testing.T) string {
	return writeInputs(t, safetensors.I64Tensor("input_ids", []int{1, 5}, []int64{1, 7, 3, 63, 0}))
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestEvalAndGenerate(t *testing.T) {
	dir := writeModel(t, nil)
	in := goodInputs(t)
	out := filepath.Join(t.TempDir(), "logits.safetensors")
	code, stdout, stderr := runCLI("eval", "--model", dir, "--inputs", in, "--out", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "wrote logits [5, 64]")
	f, err := safetensors.OpenFile(out)
	require.NoError(t, err)
	defer f.Close()
	info, err := f.Expect("logits", tensor.F32, 5, 64)
	require.NoError(t, err)

	// The logits agree with themselves through --expect, and greedy ids
	// written with --out agree through --expect.
	code, stdout, stderr = runCLI("eval", "--model", dir, "--inputs", in, "--out", out+".2", "--expect", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "MATCH")
	_ = info

	ids := filepath.Join(t.TempDir(), "ids.safetensors")
	code, stdout, stderr = runCLI("generate", "--model", dir, "--inputs", in, "--max-new-tokens", "6", "--out", ids)
	require.Equal(t, 0, code, stderr)
	assert.Len(t, strings.Fields(strings.TrimSpace(stdout)), 6)
	code, stdout, stderr = runCLI("generate", "--model", dir, "--inputs", in, "--max-new-tokens", "6", "--expect", ids)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "MATCH: 6 greedy ids")

	// --json: one object on stdout, the lines for people on stderr.
	code, stdout, stderr = runCLI("generate", "--model", dir, "--inputs", in, "--max-new-tokens", "6", "--expect", ids, "--json")
	require.Equal(t, 0, code, stderr)
	var gen struct {
		IDs    []int64    `json:"greedy_ids"`
		Expect expectJSON `json:"expect"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &gen), stdout)
	assert.Len(t, gen.IDs, 6)
	assert.Equal(t, expectJSON{Reference: ids, Match: true}, gen.Expect)
	assert.Contains(t, stderr, "MATCH: 6 greedy ids")
	code, stdout, stderr = runCLI("eval", "--model", dir, "--inputs", in, "--out", out+".3", "--expect", out, "--json")
	require.Equal(t, 0, code, stderr)
	var ev struct {
		Logits []int      `json:"logits"`
		Expect expectJSON `json:"expect"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &ev), stdout)
	assert.Equal(t, []int{5, 64}, ev.Logits)
	assert.True(t, ev.Expect.Match)
}

func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI("version")
	require.Equal(t, 0, code)
	assert.Regexp(t, `^vlanode 0\.1\.0 \(.*go1\.\d+.*\)\n$`, stdout)
	code, stdout, _ = runCLI("version", "--json")
	require.Equal(t, 0, code)
	var v struct{ Release, Go string }
	require.NoError(t, json.Unmarshal([]byte(stdout), &v))
	assert.Equal(t, "0.1.0", v.Release)
}

// TestHelpTexts: every command's -h names each flag's argument plainly (Go's
// flag package turns a backquoted word of a usage string into the
// argument's name), and infer's lists --images.
func TestHelpTexts(t *testing.T) {
	argName := regexp.MustCompile(`(?m)^  -[a-z0-9-]+ (.+)$`)
	for name := range commands() {
		code, _, stderr := runCLI(name, "-h")
		require.Equal(t, 0, code, name)
		for _, m := range argName.FindAllStringSubmatch(stderr, -1) {
			assert.Regexp(t, `^(string|int|uint|float|duration|value|FILE\.\.\.)$`, m[1], "vlanode %s -h: %q", name, m[0])
		}
	}
	_, _, stderr := runCLI("infer", "-h")
	assert.Contains(t, stderr, "  -images FILE...")
}

func TestExpectMismatch(t *testing.T) {
	dir := writeModel(t, nil)
	in := goodInputs(t)
	wrong := writeInputs(t,
		safetensors.F32Tensor("logits", []int{5, 64}, make([]float32, 5*64)),
		safetensors.I64Tensor("greedy_ids", []int{3}, []int64{1, 2, 3}))
	code, stdout, _ := runCLI("eval", "--model", dir, "--inputs", in, "--out", filepath.Join(t.TempDir(), "l"), "--expect", wrong)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "MISMATCH")
	code, _, stderr := runCLI("generate", "--model", dir, "--inputs", in, "--max-new-tokens", "4", "--expect", wrong)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "greedy ids differ")
}

func TestBadCheckpoints(t *testing.T) {
	drop := func(name string) func([]safetensors.Tensor, map[string]any) []safetensors.Tensor {
		return func(ts []safetensors.Tensor, _ map[string]any) []safetensors.Tensor {
			out := ts[:0]
			for _, x := range ts {
				if x.Name != name {
					out = append(out, x)
				}
			}
			return out
		}
	}
	replace := func(name string, nt safetensors.Tensor) func([]safetensors.Tensor, map[string]any) []safetensors.Tensor {
		return func(ts []safetensors.Tensor, _ map[string]any) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == name {
					nt.Name = name
					ts[i] = nt
				}
			}
			return ts
		}
	}
	cases := []struct {
		name string
		dir  func(t *testing.T) string
		want string
	}{
		{"missing tensor", func(t *testing.T) string {
			return writeModel(t, drop("model.layers.1.mlp.up_proj.weight"))
		}, `"model.layers.1.mlp.up_proj.weight" not found`},
		{"wrong shape", func(t *testing.T) string {
			return writeModel(t, replace("model.layers.0.self_attn.k_proj.weight",
				safetensors.F32Tensor("", []int{8, 32}, make([]float32, 256))))
		}, "shape [8 32], want [16 32]"},
		{"wrong dtype", func(t *testing.T) string {
			return writeModel(t, replace("model.norm.weight",
				safetensors.I64Tensor("", []int{32}, make([]int64, 32))))
		}, "dtype I64"},
		{"unknown architecture", func(t *testing.T) string {
			return writeModel(t, func(ts []safetensors.Tensor, cfg map[string]any) []safetensors.Tensor {
				cfg["model_type"] = "mamba"
				return ts
			})
		}, "unknown architecture"},
		{"truncated file", func(t *testing.T) string {
			dir := writeModel(t, nil)
			p := filepath.Join(dir, "model.safetensors")
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(p, st.Size()-100))
			return dir
		}, "truncated"},
		{"corrupt header", func(t *testing.T) string {
			dir := writeModel(t, nil)
			p := filepath.Join(dir, "model.safetensors")
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			copy(raw[8:], "}}}garbage")
			require.NoError(t, os.WriteFile(p, raw, 0o644))
			return dir
		}, "model.safetensors"},
		{"no weights", func(t *testing.T) string {
			dir := writeModel(t, nil)
			require.NoError(t, os.Remove(filepath.Join(dir, "model.safetensors")))
			return dir
		}, "no model.safetensors"},
		{"no config", func(t *testing.T) string { return t.TempDir() }, "config.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI("eval", "--model", c.dir(t), "--inputs", goodInputs(t), "--out", filepath.Join(t.TempDir(), "o"))
			assert.Equal(t, 1, code)
			assert.Contains(t, stderr, c.want)
			assert.Equal(t, 1, strings.Count(stderr, "vlanode eval:"), "one error line: %s", stderr)
		})
	}
}

func TestBadInputs(t *testing.T) {
	dir := writeModel(t, nil)
	cases := []struct {
		name   string
		inputs func(t *testing.T) string
		want   string
	}{
		{"missing input_ids", func(t *testing.T) string {
			return writeInputs(t, safetensors.I64Tensor("ids", []int{1, 2}, []int64{1, 2}))
		}, `"input_ids" not found`},
		{"float ids", func(t *testing.T) string {
			return writeInputs(t, safetensors.F32Tensor("input_ids", []int{1, 2}, []float32{1, 2}))
		}, "input_ids has dtype F32"},
		{"batch of two", func(t *testing.T) string {
			return writeInputs(t, safetensors.I64Tensor("input_ids", []int{2, 1}, []int64{1, 2}))
		}, "want [1, T]"},
		{"id past vocab", func(t *testing.T) string {
			return writeInputs(t, safetensors.I64Tensor("input_ids", []int{1, 2}, []int64{1, 64}))
		}, "outside the vocabulary of 64"},
		{"negative id", func(t *testing.T) string {
			return writeInputs(t, safetensors.I64Tensor("input_ids", []int{1, 2}, []int64{-1, 2}))
		}, "is not a token id"},
		{"not a safetensors file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "in.safetensors")
			require.NoError(t, os.WriteFile(p, []byte("hello"), 0o644))
			return p
		}, "in.safetensors"},
		{"missing file", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope.safetensors") }, "nope.safetensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI("eval", "--model", dir, "--inputs", c.inputs(t), "--out", filepath.Join(t.TempDir(), "o"))
			assert.Equal(t, 1, code)
			assert.Contains(t, stderr, c.want)
		})
	}
}

func TestUsageErrors(t *testing.T) {
	code, _, stderr := runCLI("eval")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--model is required")
	code, _, stderr = runCLI("frobnicate")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `unknown command "frobnicate"`)
	code, _, stderr = runCLI("generate", "--model", "x", "--inputs", "y", "--max-new-tokens", "0")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--max-new-tokens must be positive")
	code, _, stderr = runCLI("eval", "--model", "x", "--device", "tpu", "--inputs", "a", "--out", "b")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `unknown --device "tpu"`)
	code, _, stderr = runCLI("profile", "--cpu-only")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--cpu-only or --decode-only, and --from, go together")
	code, _, stderr = runCLI("profile", "--calibrate", "8GiB", "--model", "x")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--calibrate needs --model and --from")
	code, _, stderr = runCLI("profile", "--calibrate", "lots", "--model", "x", "--from", "p.json")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--calibrate: a budget such as 8GiB, got "lots"`)
	code, _, stderr = runCLI("profile", "--calibrate", "4GiB", "--calibrate-stage", "vision", "--model", "x", "--from", "p.json")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--calibrate-stage: decode or diffusion, got "vision"`)
	code, _, stderr = runCLI("profile", "--calibrate-stage", "diffusion", "--model", "x")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--calibrate-stage goes with --calibrate")
	code, _, stderr = runCLI("bench", "--model", "x", "--plan-kind", "sideways")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "sideways")
	code, stdout, _ := runCLI("help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "generate")
}
