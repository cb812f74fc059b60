package main

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGenerateBudget runs generate on a tiny reference checkpoint through
// the planner and the layering executor (--budget), forced plans and a
// chunked prefill: transformers' greedy ids (--expect), the plan and the
// timing in --json, the same ids as without a budget for a synthetic
// prompt; and the flags' mistakes.
func TestGenerateBudget(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "reference", "qwen3-gqa2-hd64")
	in, want := filepath.Join(dir, "inputs.safetensors"), filepath.Join(dir, "expected.safetensors")
	for _, extra := range [][]string{nil, {"--plan-kind", "dynamic"}, {"--exact", "--prefill-chunk", "3"}} {
		args := append([]string{"generate", "--model", dir, "--device", "cpu", "--inputs", in, "--max-new-tokens", "12",
			"--budget", "1GiB", "--expect", want}, extra...)
		code, stdout, stderr := runCLI(args...)
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stdout, "MATCH: 12 greedy ids", extra)
		assert.Regexp(t, `prefill of \d+ tokens in \d+ pass\(es\): [0-9.]+ ms, \d+ tokens/s; decode of 11 tokens`, stderr)
	}

	code, stdout, stderr := runCLI("generate", "--model", dir, "--device", "cpu", "--prompt-len", "40", "--max-new-tokens", "5",
		"--budget", "none", "--prefill-chunk", "16", "--json")
	require.Equal(t, 0, code, stderr)
	var out struct {
		IDs    []int64 `json:"greedy_ids"`
		Timing struct {
			Prompt   int     `json:"prompt_tokens"`
			Passes   int     `json:"prefill_passes"`
			Chunk    int     `json:"prefill_chunk"`
			DecodeMs float64 `json:"decode_ms"`
			TokS     float64 `json:"decode_tokens_per_s"`
		} `json:"timing"`
		Plan struct {
			Kinds map[string]string `json:"kinds"`
		} `json:"plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	assert.Len(t, out.IDs, 5)
	assert.Equal(t, 40, out.Timing.Prompt)
	assert.Equal(t, 3, out.Timing.Passes)
	assert.Equal(t, 16, out.Timing.Chunk)
	assert.Positive(t, out.Timing.TokS)
	assert.Equal(t, map[string]string{"prefill": "gpu-only", "decode": "gpu-only"}, out.Plan.Kinds)
	code, stdout, stderr = runCLI("generate", "--model", dir, "--device", "cpu", "--prompt-len", "40", "--max-new-tokens", "5")
	require.Equal(t, 0, code, stderr)
	ids := strings.Fields(strings.TrimSpace(stdout))
	require.Len(t, ids, 5)
	for i, id := range out.IDs {
		assert.Equal(t, ids[i], strconv.FormatInt(id, 10), "id %d: the budgeted path against the resident one", i)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--inputs", in, "--prompt-len", "4"}, "one of --inputs and --prompt-len"},
		{nil, "one of --inputs and --prompt-len"},
		{[]string{"--prompt-len", "4", "--exact"}, "give --budget"},
		{[]string{"--prompt-len", "4", "--budget", "1GiB", "--plan-kind", "fast"}, "unknown plan kind"},
		{[]string{"--prompt-len", "4", "--budget", "1GiB", "--exact", "--plan-kind", "static"}, "--exact forbids"},
		{[]string{"--prompt-len", "-1"}, "must not be negative"},
	} {
		code, _, stderr := runCLI(append([]string{"generate", "--model", dir, "--device", "cpu"}, tc.args...)...)
		assert.Equal(t, 2, code, tc.args)
		assert.Contains(t, stderr, tc.want, tc.args)
	}
	code, _, stderr = runCLI("generate", "--model", dir, "--device", "cpu", "--prompt-len", "4", "--budget", "1K")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "below the minimum")
}
