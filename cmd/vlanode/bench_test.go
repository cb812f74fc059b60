package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/residency"
)

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
	minBudget := tinyMinBudget(t, model)
	dir := t.TempDir()
	fake := filepath.Join(dir, "accelerate.sh")
	require.NoError(t, os.WriteFile(fake, []byte(`out=; budgets=
while [ $# -gt 0 ]; do case $1 in --out) out=$2; shift;; --budgets) budgets=$2; shift;; esac; shift; done
mkdir -p "$out"; printf '{"acc_%s": {"latency_s": 1000.0, "peak_alloc_B": 123}}' "$budgets" > "$out/results.json"
`), 0o644))
	out := filepath.Join(dir, "bench")
	code, stdout, stderr := runCLI("bench", "--model", model, "--device", "cpu", "--budgets", fmt.Sprintf("none,%d", minBudget),
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
