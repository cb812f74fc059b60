package layering

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/residency"
	"vlanode/synth"
	"vlanode/weights"
)

// alpamayo10B builds the planner's Alpamayo-R1-10B from synth's configs,
// as `vlanode plan` does from a checkpoint folder.
func alpamayo10B(t *testing.T) *residency.Arch {
	t.Helper()
	l, err := synth.NewLayout(synth.AlpamayoR1_10B)
	require.NoError(t, err)
	files, err := l.ConfigFiles()
	require.NoError(t, err)
	byPath := map[string][]byte{}
	for _, f := range files {
		byPath[f.Path] = f.Data
	}
	alp, err := configs.ParseAlpamayoR1(byPath["config.json"])
	require.NoError(t, err)
	a, err := residency.AlpamayoR1Arch(alp, configs.VLMConfig{Path: "vlm/config.json", Raw: byPath["vlm/config.json"]})
	require.NoError(t, err)
	return a
}

// TestAgreesWithPlan runs every stage of Alpamayo-R1-10B's standard
// workload, as residency plans it at several budgets, on the Fake with the
// planner's own per-unit times (C_EXE from the profile, C_DMA from the
// H2D bandwidth), and checks that the executor's timeline takes exactly
// the latency the plan predicts for each stage. residency's event
// simulation is unexported; its exported prediction, Plan.PredictedMs,
// is compared instead.
func TestAgreesWithPlan(t *testing.T) {
	arch := alpamayo10B(t)
	w := residency.StandardWorkload()
	prof, err := residency.DefaultProfile()
	require.NoError(t, err)
	// The executor runs unit by unit, as the units were timed; the graphs
	// and the stage times as served that a plan streaming nothing takes
	// are the model's, not the executor's (residency.Plan.applyGraphs).
	prof.StageMs, prof.GraphStageMs = nil, nil
	units, err := arch.Units(w)
	require.NoError(t, err)
	prof.Cost(units)

	for _, budget := range []string{"min", "8G", "16G", "none"} {
		t.Run(budget, func(t *testing.T) {
			var bytes int64
			if budget == "min" {
				plan, err := residency.NewPlan(arch, w, prof, 0)
				require.NoError(t, err)
				bytes = plan.MinBudgetBytes
			} else {
				bytes, err = residency.ParseBudget(budget)
				require.NoError(t, err)
			}
			plan, err := residency.NewPlan(arch, w, prof, bytes)
			require.NoError(t, err)
			require.Len(t, plan.Units, len(units))
			streamed := 0
			for _, s := range residency.Stages() {
				ms, ok := plan.PredictedMs[s]
				if !ok {
					continue
				}
				seq, costs, passes := stageUnits(t, prof, units, plan, s)
				for _, u := range seq {
					if u.Place == residency.Streamed {
						streamed++
					}
				}
				f := fakeOf(costs)
				p := run(t, f, Pipelined, seq, Repeat(string(s), seq, passes))
				if s == residency.StageDecode {
					ms -= plan.PromoteCopyMs // the promotion copies start the decode
				}
				assert.InDelta(t, ms, p.TotalMs, 1e-6*ms, "stage %s", s)
			}
			if budget == "none" {
				assert.Zero(t, streamed)
			} else {
				assert.NotZero(t, streamed)
			}
		})
	}
}

// stageUnits returns the units that run in stage s with the plan's
// placements, their costs, and the stage's passes.
func stageUnits(t *testing.T, prof *residency.Profile, units []residency.Unit, plan *residency.Plan, s residency.Stage) ([]*Unit, map[string]cost, int) {
	t.Helper()
	var seq []*Unit
	costs := map[string]cost{}
	passes := 0
	for i, u := range units {
		work, ok := u.WorkIn(s)
		if !ok {
			continue
		}
		pl := plan.Units[i]
		require.Equal(t, u.Module, pl.Module)
		require.Equal(t, u.Index, pl.Index)
		passes = work.Passes
		name := u.String()
		place := pl.Placement
		if pl.Promoted && (s == residency.StageDecode || s == residency.StageDiffusion) {
			place = residency.Resident // promoted after the prefill
		}
		seq = append(seq, &Unit{Name: name, Place: place, Blob: &weights.Blob{Name: name, Data: make([]byte, weights.Align)}})
		costs[name] = cost{dma: prof.DMAMs(u.Bytes), exe: work.ExeMs}
	}
	return seq, costs, passes
}
