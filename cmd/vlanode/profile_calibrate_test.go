package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/layering"
	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
)

// TestCalibrateSample sums a hand-made decode of two passes and sets the
// CPU section from it: the rate from the compute less the cost per call,
// the copy rate from the copy stream's busy time, other stages ignored.
func TestCalibrateSample(t *testing.T) {
	plan := &residency.Plan{Stages: []residency.StagePlan{
		{Stage: placement.StagePrefill, Rows: 3042, Passes: 1, StreamedBytes: 5e9},
		{Stage: placement.StageDecode, Rows: 1, Passes: 21, StreamedBytes: 4e9, CPUBytes: 3e9, EnterBytes: 1e9},
	}}
	vlm := func(i int) placement.ID { return placement.ID{Module: placement.VLM, Index: i} }
	turns := []layering.Turn{
		{Pass: "prefill", Unit: vlm(0), Slot: 0, CopyMs: 100, ExeMs: 3},
		{Pass: "decode.0", Unit: vlm(0), Slot: 1, CopyMs: 50, ExeMs: 30, CPU: &layering.CPUTask{Unit: vlm(0), Ms: 30, WaitMs: 2}},
		{Pass: "decode.0", Unit: vlm(1), Slot: layering.NoSlot, ExeMs: 1},
		{Pass: "decode.1", Unit: vlm(0), Slot: 0, CopyMs: 40, ExeMs: 30, CPU: &layering.CPUTask{Unit: vlm(0), Ms: 30, WaitMs: 9}},
	}
	s, err := sampleStage(plan, placement.StageDecode, turns, 2)
	require.NoError(t, err)
	assert.Equal(t, coexecSample{Stage: placement.StageDecode, Rows: 1, Tasks: 2, CPUMs: 60, CPUBytes: 6e9, CopyMs: 90, CopyBytes: 9e9}, s)

	cpu := &residency.CPUProfile{Rates: []residency.CPURate{{Rows: 1, GBps: 50, TFLOPs: 1, CallMs: 0.5}, {Rows: 64, GBps: 40, TFLOPs: 2}}, H2DBusyGBps: 52}
	note, err := s.apply(cpu)
	require.NoError(t, err)
	assert.InDelta(t, 6e9/59e6, cpu.Rates[0].GBps, 1e-9, "6 GB in 60 ms less two calls of 0.5 ms")
	assert.InDelta(t, 6e9/59e6/50, cpu.Rates[0].TFLOPs, 1e-9, "the compute roof scaled with the rate")
	assert.InDelta(t, 100, cpu.H2DBusyGBps, 1e-9, "9 GB in 90 ms")
	assert.Equal(t, 40.0, cpu.Rates[1].GBps, "the other tier is left as measured")
	assert.Contains(t, note, "1-row rate 50.0 → 101.7 GB/s")

	_, err = sampleStage(plan, placement.StagePrefill, turns, 1)
	assert.ErrorContains(t, err, "the CPU computed nothing in stage prefill")
	_, err = s.apply(nil)
	assert.ErrorContains(t, err, "no CPU section")
	fast := s
	fast.CPUMs = 0.9
	_, err = fast.apply(&residency.CPUProfile{Rates: []residency.CPURate{{Rows: 1, GBps: 50, TFLOPs: 1, CallMs: 0.5}}})
	assert.ErrorContains(t, err, "less than their cost per call")
}

// TestCalibrateUntimed takes the CPU's compute from the unprofiled
// inference when the decode alone has CPU shares, and keeps the profiled
// run's when another stage has some (or the inference ran none).
func TestCalibrateUntimed(t *testing.T) {
	vlm := func(i int) placement.ID { return placement.ID{Module: placement.VLM, Index: i} }
	plain := &alpamayo.Result{PromptTokens: 100, CachedTokens: 103, Layers: &layering.Profile{CPUTasks: []layering.CPUTask{
		{Unit: vlm(0), Ms: 20, WaitMs: 4}, {Unit: vlm(0), Ms: 21}, {Unit: vlm(0), Ms: 19},
	}}}
	profiled := coexecSample{Stage: placement.StageDecode, Rows: 1, Tasks: 2, CPUMs: 60, CPUBytes: 6e9, CopyMs: 90, CopyBytes: 9e9}
	decodeOnly := &residency.Plan{Stages: []residency.StagePlan{
		{Stage: placement.StagePrefill, Rows: 3042, Passes: 1, StreamedBytes: 5e9},
		{Stage: placement.StageDecode, Rows: 1, Passes: 21, StreamedBytes: 4e9, CPUBytes: 3e9},
	}}
	s := profiled
	s.untimed(decodeOnly, plain)
	assert.Equal(t, coexecSample{Stage: placement.StageDecode, Rows: 1, Tasks: 3, CPUMs: 60, CPUBytes: 9e9, CopyMs: 90, CopyBytes: 9e9}, s,
		"three passes' tasks and bytes; the copies still from the profiled run")

	both := &residency.Plan{Stages: []residency.StagePlan{
		{Stage: placement.StagePrefill, Rows: 3042, Passes: 1, StreamedBytes: 5e9, CPUBytes: 1e9},
		{Stage: placement.StageDecode, Rows: 1, Passes: 21, StreamedBytes: 4e9, CPUBytes: 3e9},
	}}
	s = profiled
	s.untimed(both, plain)
	assert.Equal(t, profiled, s, "the prefill's tasks would be counted at the decode's tier")
	s.untimed(decodeOnly, &alpamayo.Result{})
	assert.Equal(t, profiled, s, "no tasks in the unprofiled run")
}

// TestCalibrateEntries adds measured-minus-predicted to the entry costs
// of the stages the GPU computes alone that copy something, and leaves
// the co-executed stage and the one that copies nothing alone.
func TestCalibrateEntries(t *testing.T) {
	plan := &residency.Plan{Stages: []residency.StagePlan{
		{Stage: placement.StageVision, Kind: residency.GPUOnly, PredictedMs: 40},
		{Stage: placement.StagePrefill, Kind: residency.GPUOnly, PredictedMs: 230, StreamedBytes: 1},
		{Stage: placement.StageDecode, Kind: residency.Dynamic, PredictedMs: 1700, StreamedBytes: 1, CPUBytes: 1},
		{Stage: placement.StageDiffusion, Kind: residency.GPUOnly, PredictedMs: 130, EnterBytes: 1},
	}}
	p := &residency.Profile{StageEntryMs: map[placement.Stage]float64{placement.StageDiffusion: 10}}
	note := calibrateEntries(p, plan, alpamayo.Timing{Vision: 41 * time.Millisecond, Prefill: 234 * time.Millisecond,
		Decode: 1750 * time.Millisecond, Diffusion: 136 * time.Millisecond})
	assert.Equal(t, map[placement.Stage]float64{placement.StagePrefill: 4, placement.StageDiffusion: 16}, p.StageEntryMs)
	assert.Equal(t, "prefill +4.0 → 4.0 ms, diffusion +6.0 → 16.0 ms", note)
}

// TestFitTier fits a tier's cost per call and rate through two plans'
// tasks: the line through their mean shares and times; a line with a
// negative intercept keeps no cost per call; alike shares are refused.
func TestFitTier(t *testing.T) {
	// 1 ms a call and 50 GB/s: 100 MB in 3 ms, 10 MB in 1.2 ms.
	static := coexecSample{Stage: placement.StageDiffusion, Rows: 64, Tasks: 20, CPUBytes: 20 * 100e6, CPUMs: 20 * 3}
	dynamic := coexecSample{Stage: placement.StageDiffusion, Rows: 64, Tasks: 30, CPUBytes: 30 * 10e6, CPUMs: 30 * 1.2}
	f, err := fitTier(static, dynamic)
	require.NoError(t, err)
	assert.InDelta(t, 1, f.CallMs, 1e-9)
	assert.InDelta(t, 50, f.GBps, 1e-9)

	cpu := &residency.CPUProfile{Rates: []residency.CPURate{{Rows: 1, GBps: 80, TFLOPs: 0.08}, {Rows: 64, GBps: 40, TFLOPs: 2.56, CallMs: 1.5}}}
	note, err := f.apply(cpu, 64, static, dynamic)
	require.NoError(t, err)
	assert.Equal(t, residency.CPURate{Rows: 64, GBps: 50, TFLOPs: 3.2, CallMs: 1}, cpu.Rates[1], "the roof scaled with the rate")
	assert.Equal(t, 80.0, cpu.Rates[0].GBps, "the other tier is left as it was")
	assert.Contains(t, note, "64-row tier from the diffusion stage's tasks of two plans")
	assert.Contains(t, note, "rate 40.0 → 50.0 GB/s, cost per call 1.5000 → 1.0000 ms")

	// No cost per call, the samples' bytes over their time, where the
	// smaller share took longer than the larger (3.5 ms a task) or the
	// intercept falls below zero (the larger share slower per byte: 0.2).
	for _, ms := range []float64{3.5, 0.2} {
		other := dynamic
		other.CPUMs = 30 * ms
		f, err = fitTier(static, other)
		require.NoError(t, err)
		assert.Zero(t, f.CallMs, ms)
		assert.InDelta(t, (2000e6+300e6)/((60+30*ms)*1e6), f.GBps, 1e-9, ms)
	}

	alike := dynamic
	alike.CPUBytes = 30 * 90e6
	_, err = fitTier(static, alike)
	assert.ErrorContains(t, err, "alike")
	_, err = fitTier(static, coexecSample{})
	assert.ErrorContains(t, err, "no CPU tasks")
	_, err = f.apply(nil, 64, static, dynamic)
	assert.ErrorContains(t, err, "no CPU section")
}
