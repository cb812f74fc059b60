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
	for s, want := range p.StageMs {
		// Unit times are rounded to 10 ns: 111 units over up to 21 passes.
		assert.InDelta(t, want, plan.PredictedMs[s], 0.05, s)
	}
	assert.InDelta(t, plan.PreloadTotalMs, plan.TotalMs, 1e-6)
}
