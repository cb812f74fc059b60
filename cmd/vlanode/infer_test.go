package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/residency"
	"vlanode/safetensors"
	"vlanode/synth"
)

// tinyAlpamayo writes the alpamayo-r1-tiny checkpoint into a test folder.
func tinyAlpamayo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	l, err := synth.NewLayout(synth.AlpamayoR1Tiny)
	require.NoError(t, err)
	_, err = synth.Write(context.Background(), dir, l, synth.Options{Seed: 3})
	require.NoError(t, err)
	return dir
}

// pngImages writes n small gradient PNGs and returns their paths.
func pngImages(t *testing.T, n int) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i := range n {
		img := image.NewRGBA(image.Rect(0, 0, 192, 108))
		for y := range 108 {
			for x := range 192 {
				img.Set(x, y, color.RGBA{uint8(x + i), uint8(y * 2), uint8(x ^ y), 255})
			}
		}
		p := filepath.Join(dir, fmt.Sprintf("%02d.png", i))
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, png.Encode(f, img))
		require.NoError(t, f.Close())
		paths = append(paths, p)
	}
	return paths
}

func TestInferJSON(t *testing.T) {
	model := tinyAlpamayo(t)
	images := pngImages(t, 16)
	args := append([]string{"infer", "--model", model, "--device", "cpu", "--greedy", "--max-reasoning-tokens", "6", "--json", "--images"}, images...)
	code, stdout, stderr := runCLI(args...)
	require.Equal(t, 0, code, stderr)
	var out struct {
		Reasoning    string       `json:"reasoning"`
		ReasoningIDs []int        `json:"reasoning_ids"`
		Actions      [][2]float64 `json:"actions"`
		Trajectory   struct {
			XYZ [][3]float64 `json:"xyz"`
			Rot [][9]float64 `json:"rot"`
		} `json:"trajectory"`
		TimingMs map[string]int64 `json:"timing_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	assert.Len(t, out.Actions, 64)
	assert.Len(t, out.Trajectory.XYZ, 64)
	assert.Len(t, out.Trajectory.Rot, 64)
	assert.NotEmpty(t, out.ReasoningIDs)
	assert.LessOrEqual(t, len(out.ReasoningIDs), 6)
	assert.Contains(t, out.TimingMs, "prefill")
	assert.Contains(t, stderr, "assuming 16 poses driving straight")

	// --noise fixes the flow's start: the same noise gives the same plan.
	noise := filepath.Join(t.TempDir(), "noise.safetensors")
	vals := make([]float32, 128)
	for i := range vals {
		vals[i] = float32(i%7) / 7
	}
	require.NoError(t, safetensors.WriteFile(noise, []safetensors.Tensor{safetensors.F32Tensor("noise", []int{1, 64, 2}, vals)}, nil))
	withNoise := append([]string{"infer", "--model", model, "--device", "cpu", "--greedy", "--max-reasoning-tokens", "2", "--json", "--noise", noise, "--images"}, images...)
	plan := func() map[string]any {
		code, stdout, stderr := runCLI(withNoise...)
		require.Equal(t, 0, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m))
		delete(m, "timing_ms")
		return m
	}
	assert.Equal(t, plan(), plan())
}

func TestInferBadInputs(t *testing.T) {
	model := tinyAlpamayo(t)
	images := pngImages(t, 16)
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.png")
	require.NoError(t, os.WriteFile(corrupt, []byte("\x89PNG\r\n\x1a\nnot really"), 0o644))
	shortEgo := filepath.Join(dir, "ego.json")
	require.NoError(t, os.WriteFile(shortEgo, []byte(`[{"xyz":[0,0,0],"rot":[1,0,0,0,1,0,0,0,1]}]`), 0o644))
	badNoise := filepath.Join(dir, "noise.safetensors")
	require.NoError(t, safetensors.WriteFile(badNoise, []safetensors.Tensor{safetensors.F32Tensor("noise", []int{1, 32, 2}, make([]float32, 64))}, nil))

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no images", []string{"--model", model}, 2, "--images needs at least one image"},
		{"corrupt image", []string{"--model", model, "--images", corrupt}, 1, "corrupt.png: not a JPEG or PNG image"},
		{"missing image", []string{"--model", model, "--images", filepath.Join(dir, "nope.png")}, 1, "nope.png"},
		{"short ego history", append([]string{"--model", model, "--ego", shortEgo, "--images"}, images...), 1, "want 16 poses"},
		{"noise of the wrong shape", append([]string{"--model", model, "--noise", badNoise, "--images"}, images...), 1, "shape [1 32 2]"},
		{"not an alpamayo checkpoint", append([]string{"--model", filepath.Join("..", "..", "testdata", "reference", "qwen3-mha-untied"), "--images"}, images...), 1, `model_type "qwen3"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI(append([]string{"infer", "--device", "cpu"}, c.args...)...)
			assert.Equal(t, c.code, code, stderr)
			assert.Contains(t, stderr, c.want)
		})
	}
}

func TestSplitList(t *testing.T) {
	rest, vals := splitList([]string{"--model", "m", "--images", "a", "b", "--json", "--images=c"}, "images")
	assert.Equal(t, []string{"--model", "m", "--json"}, rest)
	assert.Equal(t, []string{"a", "b", "c"}, vals)
}

// TestInferBudget runs infer within budgets that stream every unit
// (pipelined and sequential) and checks the plan is the one of the
// unlimited run, bit for bit; a budget below the plan's minimum and
// preload within it are refused with the reason.
func TestInferBudget(t *testing.T) {
	model := tinyAlpamayo(t)
	images := pngImages(t, 16)
	base := append([]string{"infer", "--model", model, "--device", "cpu", "--max-reasoning-tokens", "4", "--seed", "9", "--json", "--images"}, images...)
	plan := func(extra ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := runCLI(append(append([]string{}, base...), extra...)...)
		require.Equal(t, 0, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m))
		delete(m, "timing_ms")
		return m
	}
	// The tiny model's minimum budget: ask the planner.
	code, stdout, stderr := runCLI("plan", "--model", model, "--budget", "none", "--json")
	require.Equal(t, 0, code, stderr)
	var p struct {
		Min int64 `json:"min_budget_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &p))
	min := fmt.Sprint(p.Min)

	want := plan()
	assert.Equal(t, want, plan("--budget", min), "pipelined, every unit streamed")
	assert.Equal(t, want, plan("--budget", min, "--mode", "sequential"))

	code, _, stderr = runCLI(append(append([]string{}, base...), "--budget", fmt.Sprint(p.Min-1))...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "minimum")
	code, _, stderr = runCLI(append(append([]string{}, base...), "--budget", min, "--mode", "preload")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--mode preload: the budget")
}

// TestBenchCPU runs `vlanode bench` on the tiny checkpoint on the CPU, at
// no budget and at the plan's minimum (every unit streamed through the
// host executor), with a stand-in for the Accelerate script that writes
// the results.json shape the real one writes: the table shows both runs,
// bit-identical, and the speedup over the stand-in's latency.
func TestBenchCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the standard workload twice on the CPU")
	}
	model := tinyAlpamayo(t)
	code, stdout, stderr := runCLI("plan", "--model", model, "--budget", "none", "--json")
	require.Equal(t, 0, code, stderr)
	var p struct {
		Min int64 `json:"min_budget_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &p))
	dir := t.TempDir()
	fake := filepath.Join(dir, "accelerate.sh")
	require.NoError(t, os.WriteFile(fake, []byte(`out=; budgets=
while [ $# -gt 0 ]; do case $1 in --out) out=$2; shift;; --budgets) budgets=$2; shift;; esac; shift; done
mkdir -p "$out"; printf '{"acc_%s": {"latency_s": 1000.0, "peak_alloc_B": 123}}' "$budgets" > "$out/results.json"
`), 0o644))
	out := filepath.Join(dir, "bench")
	code, stdout, stderr = runCLI("bench", "--model", model, "--device", "cpu", "--budgets", fmt.Sprintf("none,%d", p.Min),
		"--runs", "1", "--warmup", "0", "--accelerate", fake, "--python", "sh", "--out", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "preload")
	assert.Contains(t, stdout, "pipelined")
	var rep struct {
		Runs []struct {
			Streamed  int    `json:"streamed_units"`
			Identical bool   `json:"identical"`
			SHA       string `json:"result_sha256"`
		} `json:"runs"`
		Accelerate map[string]struct {
			LatencyS float64 `json:"latency_s"`
		} `json:"accelerate"`
	}
	raw, err := os.ReadFile(filepath.Join(out, "bench.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Len(t, rep.Runs, 2)
	assert.Zero(t, rep.Runs[0].Streamed)
	assert.Positive(t, rep.Runs[1].Streamed)
	assert.True(t, rep.Runs[1].Identical)
	assert.Equal(t, rep.Runs[0].SHA, rep.Runs[1].SHA)
	require.Len(t, rep.Accelerate, 1)
	for _, a := range rep.Accelerate {
		assert.Equal(t, 1000.0, a.LatencyS)
	}
	assert.Regexp(t, `1000\.00 +[0-9.]+×`, stdout, "the speedup column")
}

// TestBenchBound checks the streaming bound against a hand computation:
// per stage the larger of the unlimited run's compute and the copies of
// the streamed bytes, the promoted bytes copied once in the decode.
func TestBenchBound(t *testing.T) {
	rep := &benchReport{H2DGBps: 50} // 50 MB per ms
	rep.Runs = []benchRun{
		{Budget: 0, DecodeSteps: 20, EulerSteps: 10, stageMs: map[string]float64{"vision": 100, "prefill": 110, "decode": 200, "diffusion": 60}},
		{Budget: 8e9, Streamed: 3, DecodeSteps: 20, EulerSteps: 10, PromotedBytes: 500e6,
			StreamedBytes: map[string]int64{"vision": 1e9, "prefill": 10e9, "decode": 9e9, "diffusion": 100e6}},
	}
	rep.fillBounds()
	b := rep.Runs[1].BoundMs
	assert.InDelta(t, 100, b["vision"], 1e-9, "compute-bound: 20 ms of copies hide under 100 ms")
	assert.InDelta(t, 200, b["prefill"], 1e-9, "10 GB at 50 GB/s")
	assert.InDelta(t, 20*180+10, b["decode"], 1e-9, "9 GB a step, and 0.5 GB promoted once")
	assert.InDelta(t, 10*6, b["diffusion"], 1e-9, "6 ms of compute a step over 2 ms of copies")
	assert.InDelta(t, 100+200+3610+60, b["total"], 1e-9)
	assert.InDelta(t, 200, rep.Runs[0].BoundMs["decode"], 1e-9, "the unlimited run's bound is its compute")

	streamed, promoted := streamedPerPass(&residency.Plan{Units: []residency.Placement{
		{Module: residency.Vision, Bytes: 30, Placement: residency.Streamed},
		{Module: residency.VLM, Bytes: 400, Placement: residency.Streamed},
		{Module: residency.VLM, Bytes: 400, Placement: residency.Streamed, Promoted: true},
		{Module: residency.VLM, Bytes: 400, Placement: residency.Resident},
		{Module: residency.Expert, Bytes: 100, Placement: residency.Streamed, Promoted: true},
		{Module: residency.Embedding, Bytes: 1000, Placement: residency.Host},
	}})
	assert.Equal(t, map[string]int64{"vision": 30, "prefill": 800, "decode": 400}, streamed)
	assert.Equal(t, int64(500), promoted)
}
