package layering_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/layering"
	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/residency/residencytest"
	"vlanode/synth"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// alpamayo10B is the planner's Alpamayo-R1-10B, from synth's configs.
func alpamayo10B(t *testing.T) *residency.Arch { return residencytest.Arch(t, synth.AlpamayoR1_10B) }

// TestAgreesWithPlan runs every stage of Alpamayo-R1-10B's standard
// workload, as residency plans it at several budgets, on the GPU alone and
// with CPU shards, through the executor on the Fake with the planner's own
// per-unit times (GPU compute from the profile, copies at the pinned
// bandwidth, or the bandwidth under CPU load where the stage computes on
// the CPU, CPU shares at the profile's CPU rates, one hand-off each way),
// each stage entered with the homes the stage before it keeps, and checks
// that the executor's three-engine timeline takes exactly the latency the
// plan predicts for the stage. residency's event simulation is
// unexported; its exported prediction, Plan.Stages, is compared instead.
// With compression, the units the plan compresses copy their stored
// bytes into the staging buffers and a decode engine expands them at the
// profile's decode rate.
func TestAgreesWithPlan(t *testing.T) {
	arch := alpamayo10B(t)
	w := placement.StandardWorkload()
	prof, err := residency.DefaultProfile()
	require.NoError(t, err)
	// The executor runs unit by unit, as the units were timed; the graphs
	// and the stage times as served that a plan streaming nothing takes
	// are the model's, not the executor's (residency.Plan.applyGraphs).
	prof.StageMs, prof.GraphStageMs = nil, nil
	// The calibrated stage entry costs are the host's work around the
	// executor's, which the Fake does not run.
	prof.StageEntryMs = nil
	prof.CPU = &residency.CPUProfile{Source: "test", Threads: 16, H2DBusyGBps: 50, HandoffMs: 0.03,
		Rates: []residency.CPURate{{Rows: 1, GBps: 45, TFLOPs: 0.5, CallMs: 0.2}, {Rows: 64, GBps: 45, TFLOPs: 1.9, CallMs: 0.3}}}
	units := alpamayo.PlanUnits(arch, w)
	prof.Cost(units)
	byID := map[placement.ID]placement.Unit{}
	for _, u := range units {
		byID[u.ID] = u
	}
	for _, opts := range []residency.Options{{Exact: true}, {}, {Exact: true, Compress: true}, {Compress: true}} {
		for _, budget := range []int64{-1, 5 << 30, 8 << 30, 16 << 30, 0} {
			t.Run(fmt.Sprintf("%d exact %v compress %v", budget, opts.Exact, opts.Compress), func(t *testing.T) {
				if budget < 0 {
					plan, err := residency.NewPlan(arch, units, w, prof, 0, opts)
					require.NoError(t, err)
					budget = plan.MinBudgetBytes
				}
				plan, err := residency.NewPlan(arch, units, w, prof, budget, opts)
				require.NoError(t, err)
				coexec := false
				for k, sp := range plan.Stages {
					prev := plan.Stages[(k+len(plan.Stages)-1)%len(plan.Stages)].Stage
					got := runStage(t, plan, byID, prof, prev, sp)
					assert.InDelta(t, sp.PredictedMs, got, 1e-6*sp.PredictedMs, "stage %s", sp.Stage)
					coexec = coexec || sp.CPUMs > 0
				}
				if !opts.Exact && !opts.Compress && budget > 0 && budget <= 8<<30 {
					assert.True(t, coexec, "the CPU computes shares")
				}
				if opts.Compress && opts.Exact && budget >= 5<<30 && budget <= 8<<30 {
					assert.True(t, plan.Compressed, "GPU-only plans stream compressed at %d", budget)
				}
				if opts.Compress && budget == plan.MinBudgetBytes {
					// The raw minimum holds no staging buffers: planned raw.
					assert.False(t, plan.Compressed)
					assert.Contains(t, plan.CompressNote, "staging")
				}
			})
		}
	}
}

// runStage runs stage sp of plan on a Fake, after a pass of stage prev
// that leaves the homes prev keeps, and returns the stage's time.
func runStage(t *testing.T, plan *residency.Plan, byID map[placement.ID]placement.Unit, prof *residency.Profile,
	prev placement.Stage, sp residency.StagePlan) float64 {
	t.Helper()
	rate := prof.H2DGBps
	if sp.CPUMs > 0 {
		rate = prof.CPU.H2DBusyGBps
	}
	copyMs := func(bytes int64) float64 { return float64(bytes) / (rate * 1e9) * 1e3 }
	// Blobs stand in at a 4096th of their size (the Fake reads only sizes),
	// copies take their real bytes' time by name: the whole blob's, or
	// its GPU share's.
	exe, cpu, full := map[string]float64{}, map[string]float64{}, map[string]float64{}
	// Copy times by blob name and bytes moved (whole raw, the raw share's
	// rectangles, the compressed forms), decode times by name and raw
	// bytes decoded.
	times, dec := map[string]map[int64]float64{}, map[string]map[int64]float64{}
	timed := func(m map[string]map[int64]float64, name string, n int64, ms float64) int64 {
		if m[name] == nil {
			m[name] = map[int64]float64{}
		}
		for _, ok := m[name][n]; ok; _, ok = m[name][n] {
			n += weights.Align // stand-ins of different forms differ in size
		}
		m[name][n] = ms
		return n
	}
	var all []*layering.Unit
	stageUnits := func(s placement.Stage) ([]*layering.Unit, []placement.Placement) {
		var us []*layering.Unit
		var pls []placement.Placement
		for _, up := range plan.Units {
			pl, ok := up.Place[s]
			if !ok {
				continue
			}
			for _, u := range all {
				if u.ID == up.ID {
					us, pls = append(us, u), append(pls, pl)
				}
			}
		}
		return us, pls
	}
	for _, up := range plan.Units {
		pu := byID[up.ID]
		home := up.Weights // the embedding's rows are gathered on the host: its time is the host's share of a pass
		name := up.ID.String()
		u := &layering.Unit{ID: up.ID, Weights: home, Blob: &weights.Blob{Name: name, Data: make([]byte, scaled(up.Bytes))}}
		full[name] = copyMs(up.Bytes)
		timed(times, name, int64(len(u.Blob.Data)), copyMs(up.Bytes))
		if up.Compressed {
			// A stand-in compressed form: its stored bytes' copy time, the
			// decode of its raw bytes.
			n := timed(times, name, scaled(up.ZBytes), copyMs(up.ZBytes))
			u.Z = &bf16z.Unit{Name: name, Data: make([]byte, n), RawSize: scaled(up.Bytes)}
			timed(dec, name, u.Z.RawSize, prof.DecodeMs(up.Bytes))
		}
		shareOf := func(c int) (n, m int64) {
			n = int64(math.Round(float64(up.Bytes) * (1 - float64(c)/float64(pu.SplitDim))))
			return n, scaled(n) / 2 // less than the blob: a share
		}
		if pu.SplitDim > 0 {
			u.Share = func(c int) ([]weights.Rect, int64, error) {
				n, m := shareOf(c)
				timed(times, name, m, copyMs(n))
				return []weights.Rect{{Width: m, Height: 1, SrcPitch: m, DstPitch: m}}, m, nil
			}
		}
		for c, stored := range up.CompressedShares {
			// The GPU's share compressed: its stored bytes' copy, the
			// decode of the share's raw bytes.
			_, m := shareOf(c)
			raw := up.Bytes - int64(float64(c)/float64(pu.SplitDim)*float64(pu.MatrixBytes()))
			n := timed(times, name, scaled(stored), copyMs(stored))
			zs := &bf16z.Unit{Name: name, Data: make([]byte, n)}
			zs.RawSize = timed(dec, name, (m+weights.Align-1)/weights.Align*weights.Align, prof.DecodeMs(raw))
			if u.ZShares == nil {
				u.ZShares = map[int]*bf16z.Unit{}
			}
			u.ZShares[c] = zs
		}
		if w, ok := pu.WorkIn(sp.Stage); ok {
			pl := up.Place[sp.Stage]
			share := 0.0
			if pu.SplitDim > 0 {
				share = float64(pl.CPUSplit) / float64(pu.SplitDim)
				if pl.Engine == placement.CPU {
					share = 1
				}
			}
			exe[up.ID.String()] = w.ExeMs * (1 - share)
			if share > 0 {
				cpu[up.ID.String()] = prof.CPU.Ms(int64(share*float64(pu.MatrixBytes())), share*pu.MatrixFLOPs(w.Rows), w.Rows)
			}
			u.Run = func(sh layering.Shard) error {
				if sh.CPU == 0 {
					return nil
				}
				if err := sh.Offload(func(func()) error { return nil }); err != nil {
					return err
				}
				if err := sh.Ready(); err != nil {
					return err
				}
				return sh.Join(func() error { return nil })
			}
		}
		all = append(all, u)
	}
	f := layering.NewFake(func(name string, bytes int64) float64 {
		ms, ok := times[name][bytes]
		if !ok {
			t.Errorf("a copy of %d bytes of %s, which no form of it has", bytes, name)
		}
		return ms
	}, func(unit string) float64 { return exe[unit] })
	f.CPU = func(unit string) float64 { return cpu[unit] }
	f.Hop = prof.CPU.HandoffMs
	f.Dec = func(unit string, raw int64) float64 {
		ms, ok := dec[unit][raw]
		if !ok {
			t.Errorf("a decode of %d bytes of %s, which no form of it has", raw, unit)
		}
		return ms
	}
	e, err := layering.New(f, layering.Config{Mode: layering.Pipelined, Profile: true, SlotBytes: scaled(plan.SlotBytes)}, all)
	require.NoError(t, err)
	defer e.Close()
	if pu, pls := stageUnits(prev); len(pu) > 0 {
		// The stage before leaves its homes; its CPU shares and times do
		// not matter here.
		for i := range pls {
			if pls[i].Weights != placement.Resident && pls[i].Weights != placement.Host {
				pls[i] = placement.StreamGPU
			}
		}
		if plan.SlotBytes == 0 {
			for i := range pls {
				if pls[i].Weights != placement.Host {
					pls[i] = placement.OnGPU
				}
			}
		}
		_, err := e.Run([]layering.Pass{{Name: string(prev), Stage: string(prev), Units: pu, Place: pls}})
		require.NoError(t, err)
	}
	us, pls := stageUnits(sp.Stage)
	var passes []layering.Pass
	for i := range sp.Passes {
		passes = append(passes, layering.Pass{Name: fmt.Sprintf("%s.%d", sp.Stage, i), Stage: string(sp.Stage), Units: us, Place: pls})
	}
	p, err := e.Run(passes)
	require.NoError(t, err)
	require.NoError(t, f.Verify())
	require.NoError(t, p.HomeErrors)
	return p.TotalMs
}

// scaled is the stand-in size of n bytes: a 4096th, in whole alignments.
func scaled(n int64) int64 {
	if n == 0 {
		return 0
	}
	return (n/4096 + weights.Align) / weights.Align * weights.Align
}
