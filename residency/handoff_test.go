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
