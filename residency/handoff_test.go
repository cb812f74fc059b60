package residency_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
)

// TestHop checks a hand-off's closed form: HandoffMs for the first row,
// HandoffRowMs (or, unmeasured, HandoffMs) for each further row of 4096
// values, in proportion to the row's width.
func TestHop(t *testing.T) {
	c := &residency.CPUProfile{HandoffMs: 0.03, HandoffRowMs: 0.01}
	assert.InDelta(t, 0.03, c.Hop(1, 4096), 1e-12)
	assert.InDelta(t, 0.03+0.01*512, c.Hop(513, 4096), 1e-12)
	assert.InDelta(t, 0.03+0.01*512/4, c.Hop(513, 1024), 1e-12)
	assert.InDelta(t, 0.03, c.Hop(0, 4096), 1e-12)
	unmeasured := &residency.CPUProfile{HandoffMs: 0.03}
	assert.InDelta(t, 0.03+2*0.03, unmeasured.Hop(3, 4096), 1e-12)
}

// TestHandoffWidth is the hidden size for a split MLP (gate's input) and
// 0 for a unit that does not split.
func TestHandoffWidth(t *testing.T) {
	a := alpamayo10B(t)
	units := alpamayo.PlanUnits(a, placement.StandardWorkload())
	var mlp, attn bool
	for _, u := range units {
		switch {
		case u.ID.Module == placement.VLM && u.ID.Part == placement.MLP:
			assert.Equal(t, a.Text.HiddenSize, u.HandoffWidth(), u.ID)
			mlp = true
		case u.ID.Module == placement.VLM && u.ID.Part == placement.Attn:
			assert.Zero(t, u.HandoffWidth(), u.ID)
			attn = true
		}
	}
	require.True(t, mlp && attn, "the plan has the VLM's MLP and attention units")
}

// TestHandoffRowsCost: the rows of a multi-row stage cross to the CPU and
// back for every unit it shares, so a Dynamic prefill costs more when
// each row does (TestHop has the one-row case: HandoffMs alone).
func TestHandoffRowsCost(t *testing.T) {
	a := alpamayo10B(t)
	predicted := func(rowMs float64) map[placement.Stage]float64 {
		p := withCPU(t)
		p.CPU.HandoffRowMs = rowMs
		pl := plan(t, a, p, 8<<30, residency.Options{Kind: residency.Dynamic})
		return pl.PredictedMs
	}
	cheap, dear := predicted(1e-6), predicted(0.0111)
	assert.Greater(t, dear[placement.StagePrefill], cheap[placement.StagePrefill]+100, "3,042 rows cross for every shared unit")
}

// TestHandoffScratchAccounted: a stage that shares units with the CPU
// holds the exchange's device scratch, a float32 row of the hidden state
// for each of its rows (cuda.Backend.NewExchange), in its activations and
// within the budget; a forced CPU kind that cannot hold it is refused
// rather than planned over the budget (a forced Dynamic 8K-token prefill
// of Qwen3-8B at 6 GiB ran out of memory allocating it on the H200).
func TestHandoffScratchAccounted(t *testing.T) {
	a := alpamayo10B(t)
	p := withCPU(t)
	const budget = 4 << 30
	gpu := plan(t, a, p, budget, residency.Options{Kind: residency.GPUOnly})
	dyn := plan(t, a, p, budget, residency.Options{Kind: residency.Dynamic})
	pre, ok := dyn.Stage(placement.StagePrefill)
	require.True(t, ok)
	require.Equal(t, residency.Dynamic, pre.Kind)
	gpre, _ := gpu.Stage(placement.StagePrefill)
	scratch := int64(pre.Rows) * int64(a.Text.HiddenSize) * 4
	assert.Equal(t, (scratch+2<<20-1)/(2<<20)*(2<<20), pre.Bytes[residency.PurposeActivations]-gpre.Bytes[residency.PurposeActivations],
		"the prefill's hand-off: %d rows of %d floats, in whole pages", pre.Rows, a.Text.HiddenSize)
	for _, pl := range []*residency.Plan{gpu, dyn, plan(t, a, p, budget, residency.Options{})} {
		for _, sp := range pl.Stages {
			var used int64
			for k, n := range sp.Bytes {
				if k != residency.PurposeFree {
					used += n
				}
			}
			assert.LessOrEqual(t, used, int64(budget), "stage %s of the %s plan", sp.Stage, sp.Kind)
			assert.GreaterOrEqual(t, sp.Bytes[residency.PurposeFree], int64(0), "stage %s", sp.Stage)
		}
	}
	// At the GPU-only plan's minimum there is no room for the prefill's
	// hand-off: the forced kind is refused, the planner's own pick runs.
	w := placement.StandardWorkload()
	_, err := residency.NewPlan(a, alpamayo.PlanUnits(a, w), w, p, gpu.MinBudgetBytes, residency.Options{Kind: residency.Dynamic})
	require.Error(t, err)
	assert.ErrorIs(t, err, residency.ErrBudgetTooSmall)
	assert.Contains(t, err.Error(), "the hand-off to the CPU that the dynamic plan needs")
	auto := plan(t, a, p, gpu.MinBudgetBytes, residency.Options{})
	for _, sp := range auto.Stages {
		assert.GreaterOrEqual(t, sp.Bytes[residency.PurposeFree], int64(0), "stage %s", sp.Stage)
	}
}
