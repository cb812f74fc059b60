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
	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/synth"
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
		"--runs", "1", "--warmup", "0", "--accelerate", fake, "--python", "sh", "--out", out, "--timeline", "--margins")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "every step's top token the reference's")
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
			Margins   *logitMargins `json:"margins"`
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
		// Both plans compute on the one backend, bit for bit.
		require.NotNil(t, r.Margins)
		assert.Positive(t, r.Margins.Steps)
		assert.Zero(t, r.Margins.MaxAbsDiff)
		assert.Empty(t, r.Margins.Flips)
		assert.Positive(t, r.Margins.MinMargin)
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
		{Pass: "decode.1", Unit: placement.ID{Module: placement.VLM, Index: 0}, Slot: 0, CopyAtMs: 11, CopyMs: 4, ExeAtMs: 15, ExeMs: 1,
			CPU: &layering.CPUTask{Unit: placement.ID{Module: placement.VLM, Index: 0}, AtMs: 9, WaitMs: 6, Ms: 2.5}},
	}
	s := summarizeTimeline(turns)
	assert.Equal(t, stageTimeline{SpanMs: 7, CopyMs: 4, ComputeMs: 3, Copies: 1, Computes: 2}, s["prefill"])
	assert.Equal(t, stageTimeline{SpanMs: 12, CopyMs: 8, ComputeMs: 2, Copies: 2, Computes: 2, CPUMs: 2.5, CPUWaitMs: 6, CPUTasks: 1}, s["decode"])
	gaps := copyGaps(turns)
	require.Len(t, gaps, 1)
	assert.Equal(t, copyGap{ms: 3, pass: "decode.1", unit: "vlm.0"}, gaps[0])
	var sb strings.Builder
	printTimeline(&sb, "8G", s, turns)
	assert.Contains(t, sb.String(), "timeline 8G prefill: 7.0 ms from first op to last; copies 4.0 ms busy (1, 57%)")
	assert.Contains(t, sb.String(), "idled 3.0 ms in 1 gaps between copies; longest: 3.00 ms before vlm.0 in decode.1")
	assert.Contains(t, sb.String(), "timeline 8G decode: the CPU computed 2.5 ms in 1 tasks (2.500 ms each) and waited 6.0 ms for their inputs")
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

// TestBenchTextSweep runs `vlanode bench` on a tiny Qwen3 reference
// checkpoint on the CPU: every plan at two prompt lengths, one load each;
// the runs' timing and ids in bench.json, the same ids for every plan,
// and the sweep table (with these tiny units every plan keeps every unit
// resident: no stage has a choice).
func TestBenchTextSweep(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "reference", "qwen3-gqa2-hd64")
	out := filepath.Join(t.TempDir(), "bench")
	code, stdout, stderr := runCLI("bench", "--model", dir, "--device", "cpu", "--budgets", "none,1GiB", "--plan-kinds", "all",
		"--prompt-lens", "16,32", "--new-tokens", "4", "--runs", "2", "--warmup", "0", "--out", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "text workload: synthetic prompts, 4 new tokens")
	assert.Contains(t, stdout, "planner's pick = measured best in 0 of 0 configurations with a choice")
	var rep textBenchReport
	raw, err := os.ReadFile(filepath.Join(out, "bench.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Len(t, rep.Runs, 2*2*4)
	for _, r := range rep.Runs {
		assert.Empty(t, r.Error)
		assert.True(t, r.SameIDs && r.Deterministic, "%+v", r)
		assert.Positive(t, r.Timing.PrefillMs)
		assert.Positive(t, r.Timing.DecodeTokS)
		assert.Equal(t, 3, r.Timing.NewTokens-1)
		assert.Len(t, r.IDsSHA256, 64)
	}
	assert.Equal(t, []string{"auto", "gpu-only", "static", "dynamic"}, []string{rep.Runs[0].PlanKind, rep.Runs[1].PlanKind, rep.Runs[2].PlanKind, rep.Runs[3].PlanKind})
	require.NotNil(t, rep.Sweep)
	assert.Len(t, rep.Sweep.Rows, 2*2*2, "budgets × prompts × stages")

	// Without auto, the picks come from the plan: no run of their own.
	code, stdout, stderr = runCLI("bench", "--model", dir, "--device", "cpu", "--budgets", "none", "--plan-kinds", "gpu-only,static",
		"--prompt-lens", "16", "--new-tokens", "2", "--runs", "1", "--warmup", "0", "--json")
	require.Equal(t, 0, code, stderr)
	var planned textBenchReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &planned))
	require.Len(t, planned.Runs, 2)
	require.NotNil(t, planned.Sweep)
	require.Len(t, planned.Sweep.Rows, 2)
	for _, r := range planned.Sweep.Rows {
		assert.True(t, r.PickPlanned, "%+v", r)
		assert.Equal(t, "gpu-only", r.Pick, "%+v", r)
		assert.NotContains(t, r.MeasuredMs, "auto")
		assert.Contains(t, r.PredictedMs, "auto")
	}

	code, _, stderr = runCLI("bench", "--model", dir, "--device", "cpu", "--plan-kinds", "all", "--exact")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--exact forbids")
	code, _, stderr = runCLI("bench", "--model", dir, "--device", "cpu", "--margins")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--margins and --host-probe measure the standard workload")
	code, _, stderr = runCLI("bench", "--model", dir, "--device", "cpu", "--prompt-lens", "2X")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--prompt-lens")
}

// TestBenchSweepPlannedPick runs a standard-workload sweep of two forced
// plans without auto on the CPU: the planner's pick per stage comes from
// its plan (bench.json's sweep rows say so), and the table counts it.
func TestBenchSweepPlannedPick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the standard workload twice on the CPU")
	}
	model := tinyAlpamayo(t)
	code, stdout, stderr := runCLI("bench", "--model", model, "--device", "cpu", "--budgets", fmt.Sprint(tinyMinBudget(t, model)),
		"--plan-kinds", "gpu-only,dynamic", "--runs", "1", "--warmup", "0", "--json")
	require.Equal(t, 0, code, stderr)
	var rep benchReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Runs, 2)
	assert.Equal(t, []string{"gpu-only", "dynamic"}, []string{rep.Runs[0].PlanKind, rep.Runs[1].PlanKind})
	require.NotNil(t, rep.Sweep)
	require.NotEmpty(t, rep.Sweep.Rows)
	for _, r := range rep.Sweep.Rows {
		assert.True(t, r.PickPlanned, "%+v", r)
		assert.NotEmpty(t, r.Pick)
		assert.NotContains(t, r.MeasuredMs, "auto")
		assert.Positive(t, r.PredictedMs["auto"], "%+v", r)
		assert.Contains(t, r.MeasuredMs, "gpu-only")
	}
}

// TestSweepTally checks the sweep's comparison on hand-made runs: a stage
// the forced plans place alike has no choice; where they differ, the
// pick matches the measured best, or is within 2% of it, or is not.
func TestSweepTally(t *testing.T) {
	run := func(budget int64, kind string, kinds map[string]string, ms map[string]float64) sweepRun {
		return sweepRun{Workload: "w", Budget: budget, Kind: kind, StageKinds: kinds, MeasuredMs: ms, PredictedMs: ms}
	}
	g := map[string]string{"prefill": "gpu-only", "decode": "gpu-only"}
	sw := newSweep([]sweepRun{
		run(1, "auto", map[string]string{"prefill": "gpu-only", "decode": "dynamic"}, map[string]float64{"prefill": 10, "decode": 50}),
		run(1, "gpu-only", g, map[string]float64{"prefill": 10, "decode": 100}),
		run(1, "static", map[string]string{"prefill": "gpu-only", "decode": "static"}, map[string]float64{"prefill": 11, "decode": 70}),
		run(1, "dynamic", map[string]string{"prefill": "gpu-only", "decode": "dynamic"}, map[string]float64{"prefill": 10.5, "decode": 50}),
		run(2, "auto", map[string]string{"prefill": "dynamic", "decode": "static"}, map[string]float64{"prefill": 10, "decode": 60}),
		run(2, "gpu-only", g, map[string]float64{"prefill": 10, "decode": 100}),
		run(2, "static", map[string]string{"prefill": "static", "decode": "static"}, map[string]float64{"prefill": 30, "decode": 60.5}),
		run(2, "dynamic", map[string]string{"prefill": "dynamic", "decode": "dynamic"}, map[string]float64{"prefill": 10.1, "decode": 60}),
		{Workload: "w", Budget: 3, Kind: "auto", Error: "out of memory"},
	})
	require.Len(t, sw.Rows, 4)
	type got struct {
		stage, pick, best string
		choice, match     bool
		within            bool
	}
	var rows []got
	for _, r := range sw.Rows {
		rows = append(rows, got{r.Stage, r.Pick, r.Best, r.Choice, r.Match, r.Within2Pct})
	}
	assert.Equal(t, []got{
		{"prefill", "gpu-only", "gpu-only", false, true, true},
		{"decode", "dynamic", "dynamic", true, true, true},
		{"prefill", "dynamic", "gpu-only", true, false, true},
		{"decode", "static", "dynamic", true, false, true},
	}, rows)
	assert.Equal(t, 3, sw.Configurations)
	assert.Equal(t, 1, sw.Matches)
	assert.Equal(t, 3, sw.Within2Pct)
	var b strings.Builder
	sw.print(&b)
	assert.Contains(t, b.String(), "planner's pick = measured best in 1 of 3 configurations with a choice (33%); within 2% of the best in 3 (100%)")
	assert.Contains(t, b.String(), "no choice")
	assert.Contains(t, b.String(), "within 2%")
	assert.NotContains(t, b.String(), "picks planned")

	// An auto run planned, not loaded (--plan-kinds without auto): its
	// pick counts, with no measured auto time.
	planned := run(4, "auto", map[string]string{"prefill": "gpu-only", "decode": "static"}, nil)
	planned.PredictedMs, planned.Planned = map[string]float64{"prefill": 10, "decode": 65}, true
	sw = newSweep([]sweepRun{
		run(4, "gpu-only", g, map[string]float64{"prefill": 10, "decode": 100}),
		run(4, "static", map[string]string{"prefill": "static", "decode": "static"}, map[string]float64{"prefill": 30, "decode": 60}),
		planned,
	})
	require.Len(t, sw.Rows, 2)
	assert.True(t, sw.Rows[1].PickPlanned)
	assert.Equal(t, "static", sw.Rows[1].Best)
	assert.True(t, sw.Rows[1].Match)
	assert.NotContains(t, sw.Rows[1].MeasuredMs, "auto")
	assert.Equal(t, 65.0, sw.Rows[1].PredictedMs["auto"])
	assert.Equal(t, 2, sw.Configurations)
	assert.Equal(t, 2, sw.Matches, "prefill: gpu-only picked and best (static ran it on the CPU); decode: static")
	b.Reset()
	sw.print(&b)
	assert.Contains(t, b.String(), "picks planned, not run")

	assert.Equal(t, "auto: vis gpu-only, dec dynamic, diff gpu-only",
		kindsText("", map[string]string{"vision": "gpu-only", "decode": "dynamic", "diffusion": "gpu-only"}))
	assert.Equal(t, "static: pre gpu-only", kindsText("static", map[string]string{"prefill": "gpu-only", "decode": "static"}))
	assert.Equal(t, "dynamic", kindsText("dynamic", map[string]string{"decode": "dynamic"}))
}

// TestCPURateNote names a CPU rate more than 10% off the profile's
// one-row tier, and stays quiet within it or without that tier.
func TestCPURateNote(t *testing.T) {
	c := &residency.CPUProfile{Rates: []residency.CPURate{{Rows: 1, GBps: 86.5}, {Rows: 64, GBps: 45}}}
	assert.Empty(t, cpuRateNote(90, c))
	assert.Empty(t, cpuRateNote(80, c))
	note := cpuRateNote(55.2, c)
	assert.Contains(t, note, "55.2 GB/s, the profile plans with 86.5 GB/s (-36%)")
	assert.Contains(t, cpuRateNote(100, c), "(+16%)")
	assert.Empty(t, cpuRateNote(10, &residency.CPUProfile{Rates: []residency.CPURate{{Rows: 64, GBps: 45}}}))

	// The note and the re-prediction read the measured rate as the
	// one-row tier's: only where the decode alone has CPU shares.
	stages := func(cpu ...int64) *residency.Plan {
		p := &residency.Plan{}
		for i, st := range []placement.Stage{placement.StagePrefill, placement.StageDecode, placement.StageDiffusion} {
			p.Stages = append(p.Stages, residency.StagePlan{Stage: st, CPUBytes: cpu[i]})
		}
		return p
	}
	assert.True(t, decodeOnlyCPU(stages(0, 5, 0)))
	assert.False(t, decodeOnlyCPU(stages(0, 0, 0)), "no CPU shares")
	assert.False(t, decodeOnlyCPU(stages(1, 5, 0)), "the prefill's tier too")
	assert.False(t, decodeOnlyCPU(stages(0, 5, 2)), "the Euler steps' tier too")
}

// TestCPUBytesOf: each stage's CPU bytes a pass times its passes, the
// decode's as many as the inference ran (it may stop early).
func TestCPUBytesOf(t *testing.T) {
	plan := &residency.Plan{Stages: []residency.StagePlan{
		{Stage: placement.StagePrefill, Passes: 1, CPUBytes: 5},
		{Stage: placement.StageDecode, Passes: 21, CPUBytes: 10},
		{Stage: placement.StageDiffusion, Passes: 10, CPUBytes: 0},
	}}
	res := &alpamayo.Result{PromptTokens: 100, CachedTokens: 110}
	assert.Equal(t, int64(5+10*10), cpuBytesOf(plan, res))
	_, ok := cpuRunOf(plan, res)
	assert.False(t, ok, "no executor timing: no CPU run")
}

// TestRepredictAt: the runs' CPU rate is their bytes over their compute
// time together; at the profile's own rate the loaded plan predicts what
// it planned, at half of it a slower decode.
func TestRepredictAt(t *testing.T) {
	assert.InDelta(t, 87.5, measuredCPURate([]cpuRun{{BusyMs: 100, GBps: 50}, {BusyMs: 300, GBps: 100}}), 1e-9)
	assert.Zero(t, measuredCPURate(nil))

	spec := budgetSpec{dir: configOnly(t, synth.AlpamayoR1_10B), budget: 8 << 30, layers: layerFlags{mode: "auto", planOpts: planOpts{compress: true}}}
	plan, _, err := planBudgeted(spec)
	require.NoError(t, err)
	prof, err := residency.DefaultProfile()
	require.NoError(t, err)
	same, err := repredictAt(spec, plan, prof.CPU.Rates[0].GBps)
	require.NoError(t, err)
	assert.InDelta(t, plan.TotalMs, same["total"], 1e-6)
	slow, err := repredictAt(spec, plan, prof.CPU.Rates[0].GBps/2)
	require.NoError(t, err)
	assert.Greater(t, slow["decode"], plan.PredictedMs[placement.StageDecode]+200)
}
