package residency_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/placement"
	"vlanode/residency"
)

func shipped(t *testing.T) *residency.Profile {
	t.Helper()
	p, err := residency.DefaultProfile()
	require.NoError(t, err)
	return p
}

// TestDefaultProfileIsMeasured: the shipped profile is the output of
// `vlanode profile --cpu` on the GPU machine (bench/results/budgets.md has
// the command): every module of Alpamayo-R1-10B in every stage it runs in
// is timed ("profile", none from the roofline), the fixed costs are what a
// CUDA backend charged there, the CPU engine's rates were measured with
// copies in flight, and with every unit resident its prediction is its own
// measured stage times.
func TestDefaultProfileIsMeasured(t *testing.T) {
	p := shipped(t)
	assert.True(t, strings.HasPrefix(p.Source, "vlanode profile, "), p.Source)
	assert.Positive(t, p.Fixed.ContextBytes)
	assert.Positive(t, p.Fixed.CUBLASBytes)
	require.NotNil(t, p.CPU, "the shipped profile has the CPU engine's figures")
	assert.True(t, strings.HasPrefix(p.CPU.Source, "vlanode profile, "), p.CPU.Source)
	assert.Positive(t, p.CPU.Threads)
	assert.Positive(t, p.CPU.HandoffMs)
	assert.Positive(t, p.CPU.H2DBusyGBps)
	assert.Less(t, p.CPU.H2DBusyGBps, p.H2DGBps*1.05, "copies are no faster with the CPU busy")
	require.NotEmpty(t, p.CPU.Rates)
	for _, r := range p.CPU.Rates {
		assert.Positive(t, r.GBps, "%d rows", r.Rows)
		assert.Positive(t, r.TFLOPs, "%d rows", r.Rows)
	}

	a := alpamayo10B(t)
	pl := plan(t, a, p, 0, residency.Options{})
	assert.Empty(t, pl.Roofline, "every module is profiled")
	assert.Zero(t, pl.Timing["roofline"])
	require.Len(t, p.StageMs, 4)
	require.Len(t, p.GraphStageMs, 4)
	for s, want := range p.StageMs {
		// Nothing streamed: the stages as measured, decode and diffusion
		// replayed from graphs (where that was faster).
		if s == placement.StageDecode || s == placement.StageDiffusion {
			want = min(want, p.GraphStageMs[s])
		}
		assert.InDelta(t, want, pl.PredictedMs[s], 0.05, s)
	}
	assert.InDelta(t, pl.PreloadTotalMs, pl.TotalMs, 1e-6)

	// Without the graph times, the op-by-op stages; a GPU-only plan that
	// streams sums its units, timed one by one, which add up to at least
	// those (unit times are rounded to 10 ns).
	op := *p
	op.GraphStageMs = nil
	pl = plan(t, a, &op, 0, residency.Options{})
	streamed := plan(t, a, &op, 8e9, residency.Options{Exact: true})
	for s, want := range p.StageMs {
		assert.InDelta(t, want, pl.PredictedMs[s], 0.05, s)
		assert.GreaterOrEqual(t, streamed.PredictedMs[s], want-0.05, "%s: a streaming plan sums its units", s)
	}
}

// TestGraphStageTimes: the graph speed-up applies to a plan that streams
// nothing and to every plan's preload times, not to a streaming plan's
// prediction (the executor computes unit by unit, as the units were
// timed).
func TestGraphStageTimes(t *testing.T) {
	p := shipped(t)
	op := *p
	op.GraphStageMs = nil
	a := alpamayo10B(t)
	for _, budget := range []int64{0, 8e9} {
		opts := residency.Options{Exact: true}
		with := plan(t, a, p, budget, opts)
		without := plan(t, a, &op, budget, opts)
		for _, s := range []placement.Stage{placement.StageDecode, placement.StageDiffusion} {
			g := min(p.GraphStageMs[s], p.StageMs[s])
			assert.InDelta(t, g, with.PreloadMs[s], 0.05, "%s preload at %d", s, budget)
			assert.InDelta(t, p.StageMs[s], without.PreloadMs[s], 0.05, "%s preload without graphs at %d", s, budget)
			want := without.PredictedMs[s]
			if budget == 0 {
				want = g
			}
			assert.InDelta(t, want, with.PredictedMs[s], 0.05, "%s at %d", s, budget)
		}
		sum := 0.0
		for _, ms := range with.PredictedMs {
			sum += ms
		}
		assert.InDelta(t, sum, with.TotalMs, 1e-9)
		assert.GreaterOrEqual(t, with.TotalMs, with.PreloadTotalMs-1e-9, "no GPU-only plan predicts less than preload")
		for _, s := range []placement.Stage{placement.StageVision, placement.StagePrefill} {
			assert.Equal(t, without.PredictedMs[s], with.PredictedMs[s], "%s runs no graph", s)
		}
	}
	bad := *p
	bad.GraphStageMs = map[placement.Stage]float64{placement.StageDecode: -1}
	assert.ErrorContains(t, bad.Validate(), "graph_stage_ms[decode]")
}

// TestShippedProfileCoExecutes: with the measured CPU figures the planner
// puts CPU shards in the 8 GiB plan and predicts less than the GPU-only
// plan there; --exact keeps every unit on the GPU.
func TestShippedProfileCoExecutes(t *testing.T) {
	p := shipped(t)
	a := alpamayo10B(t)
	co := plan(t, a, p, 8<<30, residency.Options{})
	gpu := plan(t, a, p, 8<<30, residency.Options{Exact: true})
	assert.Less(t, co.TotalMs, gpu.TotalMs)
	cpu := 0
	for _, st := range co.Stages {
		if st.Kind != residency.GPUOnly {
			cpu++
		}
	}
	assert.Positive(t, cpu, "some stage has CPU shards")
	for _, st := range gpu.Stages {
		assert.Equal(t, residency.GPUOnly, st.Kind, st.Stage)
		assert.Zero(t, st.CPUBytes, st.Stage)
	}
}

// TestCheapTierKeepsHomes: a cheaper CPU tier for a stage whose plan stays
// GPU-only (the Euler steps' 64-row tier: 45.7 GB/s and 1.52 ms a call in
// the profile's loop, 69.0 GB/s and 0.83 ms as the executor measured it,
// bench/results/budgets.md run 41) leaves the 10B's auto plans at 5–14 GiB
// as they were: the co-executing fill weighs only the stages that share.
// Before, the fill gave the expert's MLPs fewer diffusion homes for a CPU
// alternative the plan then did not take (8 GiB: 1672.4 ms predicted
// against 1663.7).
func TestCheapTierKeepsHomes(t *testing.T) {
	cheap := shipped(t)
	a := alpamayo10B(t)
	require.Greater(t, cheap.CPU.Tier(64).GBps, 60.0, "the shipped tier is the executor's")
	loop, err := cheap.WithCPURate(64, 45.7)
	require.NoError(t, err)
	loop.CPU.Tier(64).CallMs = 1.5173
	for _, gib := range []int64{5, 8, 11, 14} {
		base := plan(t, a, loop, gib<<30, residency.Options{})
		got := plan(t, a, cheap, gib<<30, residency.Options{})
		for i, st := range got.Stages {
			assert.Equal(t, base.Stages[i].Kind, st.Kind, "%d GiB %s", gib, st.Stage)
		}
		assert.InDelta(t, base.TotalMs, got.TotalMs, 1e-6, "%d GiB", gib)
	}
}
