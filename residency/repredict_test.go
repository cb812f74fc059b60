package residency_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
)

// TestRepredictSameProfile: under the profile it was made with, a plan
// re-simulated with its own homes, shares and coded units predicts what
// it predicted, stage by stage, for the planner's picks, forced kinds,
// --exact and raw streaming, and with the shipped profile.
func TestRepredictSameProfile(t *testing.T) {
	a := alpamayo10B(t)
	w := placement.StandardWorkload()
	units := alpamayo.PlanUnits(a, w)
	shipped, err := residency.DefaultProfile()
	require.NoError(t, err)
	for _, p := range []*residency.Profile{withCPU(t), shipped} {
		for _, budget := range []int64{4 << 30, 8 << 30, 11 << 30, 16 << 30} {
			for _, opts := range []residency.Options{{Compress: true}, {}, {Kind: residency.Dynamic}, {Kind: residency.Static}, {Exact: true, Compress: true}} {
				plan, err := residency.NewPlan(a, units, w, p, budget, opts)
				require.NoError(t, err)
				again, err := residency.Repredict(a, units, plan, p)
				require.NoError(t, err, "%d %+v", budget, opts)
				for s, ms := range plan.PredictedMs {
					assert.InDelta(t, ms, again.PredictedMs[s], 1e-6, "budget %d, %+v, stage %s", budget, opts, s)
				}
				assert.InDelta(t, plan.TotalMs, again.TotalMs, 1e-6)
			}
		}
	}
}

// TestRepredictCPURate: a slower CPU slows the stages that share units
// with it, by no more than their CPU time grows, and leaves the others
// alone; the plan keeps its shares (WithCPURate changes the one tier).
func TestRepredictCPURate(t *testing.T) {
	a := alpamayo10B(t)
	w := placement.StandardWorkload()
	units := alpamayo.PlanUnits(a, w)
	p, err := residency.DefaultProfile()
	require.NoError(t, err)
	plan, err := residency.NewPlan(a, units, w, p, 8<<30, residency.Options{Compress: true})
	require.NoError(t, err)
	dec, ok := plan.Stage(placement.StageDecode)
	require.True(t, ok)
	require.Equal(t, residency.Dynamic, dec.Kind)
	rate := p.CPU.Rates[0].GBps
	slow, err := p.WithCPURate(1, rate*0.75)
	require.NoError(t, err)
	assert.Equal(t, rate, p.CPU.Rates[0].GBps, "the profile itself unchanged")
	assert.InDelta(t, rate*0.75, slow.CPU.Rates[0].GBps, 1e-9)
	again, err := residency.Repredict(a, units, plan, slow)
	require.NoError(t, err)
	d2, _ := again.Stage(placement.StageDecode)
	assert.Equal(t, dec.CPUShare, d2.CPUShare)
	assert.Greater(t, d2.PredictedMs, dec.PredictedMs+100, "the CPU bounds the decode")
	assert.LessOrEqual(t, d2.PredictedMs, dec.PredictedMs+dec.CPUMs/0.75-dec.CPUMs+1)
	for _, s := range []placement.Stage{placement.StageVision, placement.StagePrefill, placement.StageDiffusion} {
		assert.InDelta(t, plan.PredictedMs[s], again.PredictedMs[s], 1e-6, "stage %s has no CPU share", s)
	}
	_, err = p.WithCPURate(1, 0)
	require.Error(t, err)
}
