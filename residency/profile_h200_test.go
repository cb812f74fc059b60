package residency

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDefaultProfileIsMeasured: the shipped profile is the output of
// `vlanode profile` on the GPU machine (bench/results/budgets.md has the
// command): every module of Alpamayo-R1-10B in every stage it runs in is
// timed ("profile", none from the roofline), the fixed costs are what a
// CUDA backend charged there, and with every unit resident its prediction
// is its own measured stage times.
func TestDefaultProfileIsMeasured(t *testing.T) {
	p := defaultProfile(t)
	assert.True(t, strings.HasPrefix(p.Source, "vlanode profile, "), p.Source)
	assert.Positive(t, p.Fixed.ContextBytes)
	assert.Positive(t, p.Fixed.CUBLASBytes)
	plan, err := NewPlan(alpamayo10B(t), StandardWorkload(), p, 0)
	require.NoError(t, err)
	assert.Empty(t, plan.Roofline, "every module is profiled")
	assert.Zero(t, plan.Timing["roofline"])
	require.Len(t, p.StageMs, 4)
	require.Len(t, p.GraphStageMs, 4)
	for s, want := range p.StageMs {
		// Nothing streamed: the stages as measured, decode and diffusion
		// replayed from graphs (where that was faster).
		if s == StageDecode || s == StageDiffusion {
			want = min(want, p.GraphStageMs[s])
		}
		assert.InDelta(t, want, plan.PredictedMs[s], 0.05, s)
	}
	assert.InDelta(t, plan.PreloadTotalMs, plan.TotalMs, 1e-6)

	// Without the graph times, the op-by-op stages; a plan that streams
	// sums its units, timed one by one, which add up to at least those
	// (unit times are rounded to 10 ns: 111 units over up to 21 passes).
	op := *p
	op.GraphStageMs = nil
	plan, err = NewPlan(alpamayo10B(t), StandardWorkload(), &op, 0)
	require.NoError(t, err)
	streamed, err := NewPlan(alpamayo10B(t), StandardWorkload(), &op, 8e9)
	require.NoError(t, err)
	for s, want := range p.StageMs {
		assert.InDelta(t, want, plan.PredictedMs[s], 0.05, s)
		assert.GreaterOrEqual(t, streamed.PredictedMs[s], want-0.05, "%s: a streaming plan sums its units", s)
	}
}

// TestGraphStageTimes: the graph speed-up applies to a plan that streams
// nothing and to every plan's preload times, not to a streaming plan's
// prediction (the executor computes unit by unit, as the units were
// timed).
func TestGraphStageTimes(t *testing.T) {
	p := defaultProfile(t)
	op := *p
	op.GraphStageMs = nil
	for _, budget := range []int64{0, 8e9} {
		with, err := NewPlan(alpamayo10B(t), StandardWorkload(), p, budget)
		require.NoError(t, err)
		without, err := NewPlan(alpamayo10B(t), StandardWorkload(), &op, budget)
		require.NoError(t, err)
		for _, s := range []Stage{StageDecode, StageDiffusion} {
			g := min(p.GraphStageMs[s], p.StageMs[s])
			// Unit times are rounded to 10 ns (111 units over up to 21
			// passes): a stage's units may fall short of it by that much.
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
		assert.GreaterOrEqual(t, with.TotalMs, with.PreloadTotalMs-1e-9, "no plan predicts less than preload")
		for _, s := range []Stage{StageVision, StagePrefill} {
			assert.Equal(t, without.PredictedMs[s], with.PredictedMs[s], "%s runs no graph", s)
		}
	}
	bad := *p
	bad.GraphStageMs = map[Stage]float64{StageDecode: -1}
	assert.ErrorContains(t, bad.Validate(), "graph_stage_ms[decode]")
}
