package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/layering"
	"vlanode/placement"
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
		"--runs", "1", "--warmup", "0", "--accelerate", fake, "--python", "sh", "--out", out, "--timeline")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `timeline .*decode: [0-9.]+ ms from first op to last; copies [0-9.]+ ms busy`, stderr)
	assert.Contains(t, stdout, "preload")
	assert.Contains(t, stdout, "pipelined")
	var rep struct {
		Runs []struct {
			Streamed  int    `json:"streamed_units"`
			Identical bool   `json:"identical"`
			SHA       string `json:"result_sha256"`
			Budget    int64  `json:"budget_bytes"`
			Mode      string `json:"mode"`
			Compress  bool   `json:"compress"`
			Timeline  map[string]stageTimeline
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
	for _, r := range rep.Runs {
		for _, st := range []string{"vision", "prefill", "decode", "diffusion"} {
			assert.Positive(t, r.Timeline[st].Computes, "%s: timed computes", st)
		}
		var turns []layering.Turn
		raw, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("timeline-%d-%s-%s.json", r.Budget, r.Mode, variantName(r.Compress))))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &turns))
		copies := 0
		for _, tr := range turns {
			if tr.Slot != layering.NoSlot {
				copies++
			}
		}
		assert.Equal(t, r.Streamed > 0, copies > 0, "copies in the timeline of %d streamed units", r.Streamed)
	}
	require.Len(t, rep.Accelerate, 1)
	for _, a := range rep.Accelerate {
		assert.Equal(t, 1000.0, a.LatencyS)
	}
	assert.Regexp(t, `1000\.00 +[0-9.]+×`, stdout, "the speedup column")
	// within, identical, same ids, max action diff, accelerate s, speedup
	// the streamed run against the first.
	assert.Regexp(t, `- +yes +yes +0 +1000\.00 +[0-9.]+×`, stdout, "the columns after the peaks (within: no device memory on the CPU)")
}

// TestTimelineSummary sums a hand-made timeline: stage spans, busy
// times and the copy stream's gaps.
func TestTimelineSummary(t *testing.T) {
	turns := []layering.Turn{
		{Pass: "prefill", Unit: placement.ID{Module: placement.VLM, Index: 0}, Slot: 0, CopyAtMs: 0, CopyMs: 4, ExeAtMs: 4, ExeMs: 1},
		{Pass: "prefill", Unit: placement.ID{Module: placement.VLM, Index: 1}, Slot: layering.NoSlot, ExeAtMs: 5, ExeMs: 2},
		{Pass: "decode.0", Unit: placement.ID{Module: placement.VLM, Index: 0}, Slot: 1, CopyAtMs: 4, CopyMs: 4, ExeAtMs: 8, ExeMs: 1},
		{Pass: "decode.1", Unit: placement.ID{Module: placement.VLM, Index: 0}, Slot: 0, CopyAtMs: 11, CopyMs: 4, ExeAtMs: 15, ExeMs: 1},
	}
	s := summarizeTimeline(turns)
	assert.Equal(t, stageTimeline{SpanMs: 7, CopyMs: 4, ComputeMs: 3, Copies: 1, Computes: 2}, s["prefill"])
	assert.Equal(t, stageTimeline{SpanMs: 12, CopyMs: 8, ComputeMs: 2, Copies: 2, Computes: 2}, s["decode"])
	gaps := copyGaps(turns)
	require.Len(t, gaps, 1)
	assert.Equal(t, copyGap{ms: 3, pass: "decode.1", unit: "vlm.0"}, gaps[0])
	var sb strings.Builder
	printTimeline(&sb, "8G", s, turns)
	assert.Contains(t, sb.String(), "timeline 8G prefill: 7.0 ms from first op to last; copies 4.0 ms busy (1, 57%)")
	assert.Contains(t, sb.String(), "idled 3.0 ms in 1 gaps between copies; longest: 3.00 ms before vlm.0 in decode.1")
}

// TestBenchBound checks the streaming bound against a hand computation:
// per stage the larger of the unlimited run's compute and the copies of
// the streamed bytes, the promoted bytes copied once in the decode.
func TestBenchBound(t *testing.T) {
	rep := &benchReport{H2DGBps: 50} // 50 MB per ms
	rep.Runs = []benchRun{
		{Budget: 0, DecodeSteps: 20, EulerSteps: 10, stageMs: map[string]float64{"vision": 100, "prefill": 110, "decode": 200, "diffusion": 60}},
		{Budget: 8e9, Streamed: 3, DecodeSteps: 20, EulerSteps: 10, EnterBytes: map[string]int64{"decode": 500e6},
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

	// The bytes the copy engine moves: compressed where units stream
	// compressed (CopiedBytes ≤ StreamedBytes), raw otherwise.
	streamed, enter := streamedPerPass(&residency.Plan{Stages: []residency.StagePlan{
		{Stage: placement.StageVision, StreamedBytes: 30, CopiedBytes: 30},
		{Stage: placement.StagePrefill, StreamedBytes: 800, CopiedBytes: 530, EnterBytes: 400, EnterCopiedBytes: 266},
		{Stage: placement.StageDecode, StreamedBytes: 300, CopiedBytes: 200, CPUBytes: 100, EnterBytes: 400, EnterCopiedBytes: 400},
		{Stage: placement.StageDiffusion},
	}})
	assert.Equal(t, map[string]int64{"vision": 30, "prefill": 530, "decode": 300, "diffusion": 0}, streamed)
	assert.Equal(t, map[string]int64{"prefill": 266, "decode": 400}, enter)
}
