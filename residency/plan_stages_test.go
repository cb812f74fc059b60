package residency_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
)

// TestPlanCompressedStages: the decode kernel takes the compute engine's
// time (simulate3), so at 16 GiB, where the GPU-only plan's vision,
// prefill and decode are compute-bound, compressing their units would
// lose: NewPlan streams the units those stages compute raw
// (Options.RawStages) and the copy-bound diffusion's compressed, and the
// plan predicts less than the raw one. RawStages given by the caller keep
// the units of those stages raw.
func TestPlanCompressedStages(t *testing.T) {
	a := alpamayo10B(t)
	w := placement.StandardWorkload()
	units := map[placement.ID]placement.Unit{}
	for _, u := range alpamayo.PlanUnits(a, w) {
		units[u.ID] = u
	}
	// computedIn says whether a compressed unit of p is computed in one
	// of stages.
	computedIn := func(p *residency.Plan, stages []placement.Stage) []placement.ID {
		var out []placement.ID
		for _, u := range p.Units {
			for _, s := range stages {
				if wk, ok := units[u.ID].WorkIn(s); ok && wk.Passes > 0 && u.Compressed {
					out = append(out, u.ID)
				}
			}
		}
		return out
	}
	raw := plan(t, a, withCPU(t), 16<<30, residency.Options{Exact: true})
	z := plan(t, a, withCPU(t), 16<<30, residency.Options{Exact: true, Compress: true})
	t.Logf("raw %.1f ms, compressed %.1f ms, raw stages %v, note %q", raw.TotalMs, z.TotalMs, z.Options.RawStages, z.CompressNote)
	require.True(t, z.Compressed, z.CompressNote)
	assert.Contains(t, z.Options.RawStages, placement.StageDecode)
	assert.NotContains(t, z.Options.RawStages, placement.StageDiffusion)
	assert.Empty(t, computedIn(z, z.Options.RawStages))
	assert.NotEmpty(t, computedIn(z, []placement.Stage{placement.StageDiffusion}))
	assert.Less(t, z.TotalMs, raw.TotalMs)
	checkAccounts(t, z)

	given := []placement.Stage{placement.StageVision}
	g := plan(t, a, withCPU(t), 5<<30, residency.Options{Exact: true, Compress: true, RawStages: given})
	require.True(t, g.Compressed, g.CompressNote)
	assert.Empty(t, computedIn(g, given))
	checkAccounts(t, g)
}
