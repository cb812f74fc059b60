package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/placement"
	"vlanode/residency"
	"vlanode/synth"
)

// configOnly writes what `vlanode synth --config-only --arch arch` writes.
func configOnly(t *testing.T, arch synth.Arch) string {
	t.Helper()
	dir := t.TempDir()
	l, err := synth.NewLayout(arch)
	require.NoError(t, err)
	_, err = synth.Write(context.Background(), dir, l, synth.Options{ConfigOnly: true, Overwrite: true})
	require.NoError(t, err)
	return dir
}

// planOut is the part of `plan --json` the tests read.
type planOut struct {
	BudgetBytes    int64              `json:"budget_bytes"`
	Unlimited      bool               `json:"unlimited"`
	MinBudgetBytes int64              `json:"min_budget_bytes"`
	Bytes          map[string]int64   `json:"bytes"`
	PredictedMs    map[string]float64 `json:"predicted_ms"`
	Units          []struct {
		Module  string `json:"module"`
		Index   int    `json:"index"`
		Part    string `json:"part"`
		Bytes   int64  `json:"bytes"`
		Weights string `json:"weights"`
	} `json:"units"`
	Stages []struct {
		Stage string `json:"stage"`
		Kind  string `json:"kind"`
	} `json:"stages"`
}

func planJSONOf(t *testing.T, args ...string) planOut {
	t.Helper()
	code, stdout, stderr := runCmd(append([]string{"plan", "--json"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var out planOut
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	return out
}

// TestPlanAlpamayo10B plans the 10B from its config files alone at the
// standard budgets: more budget, more resident VLM parts, never slower;
// every byte of a budget accounted for.
func TestPlanAlpamayo10B(t *testing.T) {
	dir := configOnly(t, synth.AlpamayoR1_10B)
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors*"))
	require.Empty(t, matches, "no weights: the plan needs config.json only")

	prevVLM, prevMs := -1, 0.0
	for _, tc := range []struct {
		budget string
		bytes  int64
	}{{"4G", 4e9}, {"8G", 8e9}, {"16G", 16e9}, {"none", 0}} {
		t.Run(tc.budget, func(t *testing.T) {
			out := planJSONOf(t, "--model", dir, "--budget", tc.budget)
			assert.Equal(t, tc.bytes, out.BudgetBytes)
			assert.Equal(t, tc.bytes == 0, out.Unlimited)
			assert.InDelta(t, 2.75e9, float64(out.MinBudgetBytes), 0.01e9)
			for _, k := range []string{"vision", "prefill", "decode", "diffusion", "total"} {
				assert.Positive(t, out.PredictedMs[k], k)
			}
			for _, k := range []string{"weights-resident", "dfb-slots", "kv-cache", "activations", "workspaces", "context"} {
				assert.Contains(t, out.Bytes, k)
			}
			var sum int64
			for _, n := range out.Bytes {
				sum += n
			}
			if tc.bytes > 0 {
				assert.Equal(t, tc.bytes, sum)
			}
			require.Len(t, out.Units, 211) // 1 + 2·27 + 3 + 1 + 1 + 2·36 + 5 + 1 + 2·36 + 1
			require.Len(t, out.Stages, 4)
			vlm := 0
			for _, u := range out.Units {
				assert.Contains(t, []string{"resident", "streamed", "host"}, u.Weights)
				assert.Positive(t, u.Bytes)
				if u.Module == "vlm" && u.Weights == "resident" {
					vlm++
				}
			}
			assert.GreaterOrEqual(t, vlm, prevVLM)
			if prevMs > 0 {
				assert.LessOrEqual(t, out.PredictedMs["total"], prevMs)
			}
			prevVLM, prevMs = vlm, out.PredictedMs["total"]
		})
	}
	assert.Equal(t, 72, prevVLM)
	p, err := residency.DefaultProfile()
	require.NoError(t, err)
	measured := 0.0
	for s, ms := range p.StageMs {
		if g, ok := p.GraphStageMs[s]; ok && (s == placement.StageDecode || s == placement.StageDiffusion) {
			ms = min(ms, g)
		}
		measured += ms
	}
	assert.InDelta(t, measured, prevMs, 0.1, "none: the default profile's measured stage times (decode and diffusion with graphs)")
}

// TestPlanText checks the human-readable report.
func TestPlanText(t *testing.T) {
	dir := configOnly(t, synth.AlpamayoR1_10B)
	code, stdout, stderr := runCmd("plan", "--model", dir, "--budget", "8GiB")
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{
		"model alpamayo_r1", "workload standard: 16 images × 720 patches",
		"budget 8,589,934,592 bytes (8.59 GB)", "minimum 2,",
		"  vlm          72", "home in some stages", "CPU shares", "split (≤", "rows gathered on the host", "GB streamed/pass", "GB on CPU/pass", "gpu-only", "dynamic",
		"weights-resident", "dfb-slots", "kv-cache", "= budget", "8,589,934,592",
		"predicted ms", "decode", "total",
	} {
		assert.Contains(t, stdout, want)
	}
}

// TestPlanErrors: a budget below the minimum exits 1 naming it; command
// line mistakes exit 2.
func TestPlanErrors(t *testing.T) {
	dir := configOnly(t, synth.AlpamayoR1_10B)
	minimum := planJSONOf(t, "--model", dir).MinBudgetBytes
	require.InDelta(t, 2.75e9, float64(minimum), 0.01e9)
	code, _, stderr := runCmd("plan", "--model", dir, "--budget", "2G")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "below the minimum of "+residency.FormatBytes(minimum))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--budget", "8G"}, "--model is required"},
		{[]string{"plan", "--model", dir, "--budget", "8X"}, `unknown unit "x"`},
		{[]string{"plan", "--model", dir, "--budget", "-4G"}, "negative"},
		{[]string{"plan", "--model", dir, "--workload", "huge"}, `unknown --workload "huge"`},
	} {
		code, _, stderr := runCmd(tc.args...)
		assert.Equal(t, 2, code, tc.args)
		assert.Contains(t, stderr, tc.want)
	}

	code, _, stderr = runCmd("plan", "--model", t.TempDir())
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "config.json")
	code, _, stderr = runCmd("plan", "--model", dir, "--profile", filepath.Join(dir, "config.json"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "profile")
}

// TestPlanProfileFlag: any profile works; a slower link predicts a slower
// plan at the same budget: by the link's ratio nearly for a GPU-only plan
// (--exact), by less where the CPU takes more of the work.
func TestPlanProfileFlag(t *testing.T) {
	dir := configOnly(t, synth.AlpamayoR1_10B)
	p, err := residency.DefaultProfile()
	require.NoError(t, err)
	p.H2DGBps /= 10
	p.Source = "test: the default profile at a tenth of its bandwidth"
	raw, err := p.Marshal()
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "slow.json")
	require.NoError(t, os.WriteFile(file, raw, 0o644))
	fast := planJSONOf(t, "--model", dir, "--budget", "8G", "--exact")
	slow := planJSONOf(t, "--model", dir, "--budget", "8G", "--exact", "--profile", file)
	assert.Greater(t, slow.PredictedMs["total"], 5*fast.PredictedMs["total"])
	co := planJSONOf(t, "--model", dir, "--budget", "8G")
	coSlow := planJSONOf(t, "--model", dir, "--budget", "8G", "--profile", file)
	assert.Greater(t, coSlow.PredictedMs["total"], co.PredictedMs["total"])
	assert.Less(t, coSlow.PredictedMs["total"], slow.PredictedMs["total"], "the CPU takes what the link cannot")
}

// TestPlanQwen3VL plans plain Qwen3-VL-8B: no diffusion stage.
func TestPlanQwen3VL(t *testing.T) {
	out := planJSONOf(t, "--model", configOnly(t, synth.Qwen3VL8B), "--budget", "8G")
	assert.NotContains(t, out.PredictedMs, "diffusion")
	assert.Positive(t, out.PredictedMs["decode"])
}

// TestPlanAlpamayo15_10B plans Alpamayo 1.5 from its config files: the
// architecture of R1's, so the same units, bytes and predictions within
// the bytes of the buffers 1.5 does not save.
func TestPlanAlpamayo15_10B(t *testing.T) {
	r1 := configOnly(t, synth.AlpamayoR1_10B)
	v15 := configOnly(t, synth.Alpamayo15_10B)
	for _, budget := range []string{"8G", "none"} {
		a := planJSONOf(t, "--model", r1, "--budget", budget)
		b := planJSONOf(t, "--model", v15, "--budget", budget)
		require.Len(t, b.Units, len(a.Units))
		assert.InDelta(t, float64(a.MinBudgetBytes), float64(b.MinBudgetBytes), 1e6)
		assert.InDelta(t, a.PredictedMs["total"], b.PredictedMs["total"], 0.5)
	}
}

// TestPlanBatch: plan --batch and --samples plan the batch, state the
// largest batch that fits and the predicted plans/s; a batch that does
// not fit exits 1 naming the largest that does; bad values are usage
// errors.
func TestPlanBatch(t *testing.T) {
	dir := configOnly(t, synth.AlpamayoR1_10B)
	var out struct {
		MinBudgetBytes int64   `json:"min_budget_bytes"`
		LargestBatch   int     `json:"largest_batch"`
		PlansPerS      float64 `json:"plans_per_s"`
		Workload       struct {
			Batch   int `json:"batch"`
			Samples int `json:"samples"`
		} `json:"workload"`
		Stages []struct {
			Stage    string  `json:"stage"`
			Rows     int     `json:"rows"`
			CPUShare float64 `json:"cpu_share"`
		} `json:"stages"`
	}
	code, stdout, stderr := runCmd("plan", "--json", "--model", dir, "--budget", "8GiB", "--batch", "4", "--samples", "2")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	assert.Equal(t, 4, out.Workload.Batch)
	assert.Equal(t, 2, out.Workload.Samples)
	assert.GreaterOrEqual(t, out.LargestBatch, 4)
	assert.Positive(t, out.PlansPerS)
	for _, s := range out.Stages {
		assert.Zero(t, s.CPUShare, "a batch plans no CPU share (%s)", s.Stage)
		if s.Stage == "diffusion" {
			assert.Equal(t, 2*64, s.Rows, "a request's samples' action tokens in one product")
		}
	}
	one := planJSONOf(t, "--model", dir, "--budget", "8GiB")
	assert.Greater(t, out.MinBudgetBytes, one.MinBudgetBytes)

	code, stdout, stderr = runCmd("plan", "--model", dir, "--budget", "8GiB", "--batch", "8")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "batch 8 requests × 1 trajectory samples (largest batch that fits the budget: ")

	code, _, stderr = runCmd("plan", "--model", dir, "--budget", "8GiB", "--batch", "64")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "a batch of 64 requests of 1 trajectory samples does not fit")
	assert.Contains(t, stderr, "the largest that fits is")
	for _, bad := range [][]string{{"--batch", "0"}, {"--samples", "17"}} {
		code, _, _ = runCmd(append([]string{"plan", "--model", dir}, bad...)...)
		assert.Equal(t, 2, code, "%v", bad)
	}
}

// TestPlanCompress plans the 10B GPU-only at 8GiB with compressed
// streaming (the default) and without: the JSON says which units are
// compressed, their stored bytes and the staging buffers, host memory
// shrinks, the text shows the compression per module, and compression
// predicts less.
func TestPlanCompress(t *testing.T) {
	dir := configOnly(t, synth.AlpamayoR1_10B)
	type zOut struct {
		HostBytes    int64              `json:"host_bytes"`
		HostRawBytes int64              `json:"host_raw_bytes"`
		Compress     bool               `json:"compress"`
		Compressed   bool               `json:"compressed"`
		StagingBytes int64              `json:"staging_bytes"`
		CompressNote string             `json:"compress_note"`
		Bytes        map[string]int64   `json:"bytes"`
		PredictedMs  map[string]float64 `json:"predicted_ms"`
		Units        []struct {
			Compressed  bool  `json:"compressed"`
			Bytes       int64 `json:"bytes"`
			StoredBytes int64 `json:"stored_bytes"`
		} `json:"units"`
	}
	get := func(args ...string) zOut {
		code, stdout, stderr := runCmd(append([]string{"plan", "--json", "--model", dir, "--budget", "8GiB", "--exact"}, args...)...)
		require.Equal(t, 0, code, stderr)
		var out zOut
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		return out
	}
	z, raw := get(), get("--compress=false")
	require.True(t, z.Compress)
	require.True(t, z.Compressed)
	assert.False(t, raw.Compress)
	assert.False(t, raw.Compressed)
	assert.Less(t, z.PredictedMs["total"], raw.PredictedMs["total"])
	assert.Less(t, z.HostBytes, raw.HostBytes)
	assert.Equal(t, raw.HostBytes, z.HostRawBytes)
	assert.Positive(t, z.StagingBytes)
	assert.Equal(t, 2*((z.StagingBytes+2<<20-1)/(2<<20)*(2<<20)), z.Bytes["z-staging"])
	assert.NotContains(t, raw.Bytes, "z-staging")
	n := 0
	for _, u := range z.Units {
		if u.Compressed {
			n++
			assert.Less(t, u.StoredBytes, u.Bytes)
			assert.LessOrEqual(t, u.StoredBytes, z.StagingBytes)
		}
	}
	assert.Positive(t, n)

	code, stdout, stderr := runCmd("plan", "--model", dir, "--budget", "8GiB", "--exact")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "compression: bf16z, sizes estimated at 0.665")
	assert.Contains(t, stdout, "z-staging")
	assert.Regexp(t, `\s+vlm\s+\d+\s+[\d.]+\s+[\d.]+\s+0\.66\d\d`, stdout)
	code, stdout, _ = runCmd("plan", "--model", dir, "--budget", "8GiB", "--compress=false")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "compression: off (--compress=false)")
	code, _, _ = runCmd("plan", "--model", dir, "--z-ratio", "1.5")
	assert.Equal(t, 2, code, "a ratio above 1 is a usage error")
}

// TestPlanQwen3Text plans Qwen3-8B's text workload from its config files:
// the default for a qwen3 model, per-tier stages (the prefill one pass
// of the prompt's tier, the decode 15 passes of tier 1, shared with the
// CPU at 4 GiB), a forced chunk, --exact, the text report, and the
// workload refused for a VLA.
func TestPlanQwen3Text(t *testing.T) {
	dir := configOnly(t, synth.Qwen3_8B)
	type stage struct {
		Stage  string `json:"stage"`
		Rows   int    `json:"rows"`
		Tier   int    `json:"tier"`
		Passes int    `json:"passes"`
		Kind   string `json:"kind"`
	}
	stages := func(args ...string) []stage {
		code, stdout, stderr := runCmd(append([]string{"plan", "--json", "--model", dir}, args...)...)
		require.Equal(t, 0, code, stderr)
		var out struct {
			Stages   []stage            `json:"stages"`
			Workload placement.Workload `json:"workload"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out))
		assert.Equal(t, placement.TextWorkloadName, out.Workload.Name)
		return out.Stages
	}
	assert.Equal(t, []stage{{"prefill", 512, 512, 1, "gpu-only"}, {"decode", 1, 1, 15, "dynamic"}}, stages("--budget", "4GiB"), "the default prompt")
	assert.Equal(t, []stage{{"prefill", 4096, 4096, 1, "gpu-only"}, {"decode", 1, 1, 15, "dynamic"}}, stages("--budget", "4GiB", "--prompt-len", "4096"))
	assert.Equal(t, []stage{{"prefill", 1024, 1024, 4, "gpu-only"}, {"decode", 1, 1, 31, "gpu-only"}},
		stages("--budget", "4GiB", "--prompt-len", "4096", "--prefill-chunk", "1024", "--new-tokens", "32", "--exact"))

	code, stdout, stderr := runCmd("plan", "--model", dir, "--budget", "4GiB", "--prompt-len", "4096")
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"model qwen3", "workload text: 4096 prompt tokens prefilled in 1 pass(es) of up to 4096 (tier 4096), 16 new tokens (15 decode passes, tier 1)",
		"decode: 4 split", "dynamic", "gpu-only", "kv-cache"} {
		assert.Contains(t, stdout, want)
	}

	code, _, stderr = runCmd("plan", "--model", configOnly(t, synth.AlpamayoR1_10B), "--prompt-len", "512")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "the text workload plans Qwen3 text models")
	code, _, stderr = runCmd("plan", "--model", dir, "--workload", "standard", "--prompt-len", "512")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "shape the text workload")
}

// TestPlanAtCPURate: --at-cpu-rate predicts the plan again at another
// one-row CPU rate, its placement and shares as planned: at the profile's
// own rate the same figures, slower where the decode shares units with a
// slower CPU, the other stages alike; refused for the text workload and
// at no rate.
func TestPlanAtCPURate(t *testing.T) {
	dir := configOnly(t, synth.AlpamayoR1_10B)
	prof, err := residency.DefaultProfile()
	require.NoError(t, err)
	type atOut struct {
		PredictedMs map[string]float64 `json:"predicted_ms"`
		AtCPUGBps   float64            `json:"at_cpu_gbps"`
		AtMs        map[string]float64 `json:"predicted_at_cpu_ms"`
	}
	at := func(rate float64) atOut {
		code, stdout, stderr := runCmd("plan", "--json", "--model", dir, "--budget", "8GiB", "--at-cpu-rate", fmt.Sprint(rate))
		require.Equal(t, 0, code, stderr)
		var out atOut
		require.NoError(t, json.Unmarshal([]byte(stdout), &out))
		return out
	}
	same := at(prof.CPU.Rates[0].GBps)
	for k, ms := range same.PredictedMs {
		assert.InDelta(t, ms, same.AtMs[k], 1e-3, k)
	}
	slow := at(prof.CPU.Rates[0].GBps / 2)
	assert.Equal(t, prof.CPU.Rates[0].GBps/2, slow.AtCPUGBps)
	assert.Greater(t, slow.AtMs["decode"], slow.PredictedMs["decode"]+200)
	assert.InDelta(t, slow.PredictedMs["prefill"], slow.AtMs["prefill"], 1e-3)

	code, stdout, _ := runCmd("plan", "--model", dir, "--budget", "8GiB", "--at-cpu-rate", "60")
	require.Equal(t, 0, code)
	assert.Regexp(t, `predicted ms +this plan +all resident +CPU 60\.0 GB/s`, stdout)
	code, _, stderr := runCmd("plan", "--model", dir, "--budget", "8GiB", "--at-cpu-rate", "-1")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--at-cpu-rate")
	code, _, stderr = runCmd("plan", "--model", configOnly(t, synth.Qwen3_8B), "--budget", "4GiB", "--at-cpu-rate", "60")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "not the text workload")
}
