package qwen3_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/cpu"
	"vlanode/layering"
	"vlanode/models/layered"
	"vlanode/models/qwen3"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/safetensors"
)

// streamAll is plan with every device unit streamed in every stage, and
// each MLP computed as kind says: by the GPU (GPU-only), by the CPU whole
// (Static) or split at half its intermediate size (Dynamic). The tiny
// checkpoints' units (200 KB) all fit in VRAM at any budget the planner
// accepts (two DFB slots of 2 MiB pages), so the planner never streams
// them; this is the placement the planner gives a large model's
// non-resident units. The LM head's blocks after the first split as the
// MLPs do.
func streamAll(plan *residency.Plan, kind residency.Kind) *residency.Plan {
	out := *plan
	out.Units = nil
	out.SlotBytes = 0
	for _, u := range plan.Units {
		if u.Weights == placement.Host {
			out.Units = append(out.Units, u)
			continue
		}
		u.Weights, u.Home = placement.Streamed, nil
		u.Place = map[placement.Stage]placement.Placement{}
		for _, s := range u.Stages {
			pl := placement.StreamGPU
			switch {
			case u.SplitDim == 0:
			case kind == residency.Static:
				pl = placement.HostCPU
			case kind == residency.Dynamic:
				pl.CPUSplit = u.SplitDim / 2
			}
			u.Place[s] = pl
		}
		out.SlotBytes = max(out.SlotBytes, u.Bytes)
		out.Units = append(out.Units, u)
	}
	return &out
}

// TestLayeredGreedyMatchesTransformers runs every tiny reference
// checkpoint through the layering executor on the cpu backend (standing
// in for the device; layering.Host's slots, a second cpu backend as the
// CPU engine) with a chunked prefill (two passes): as the planner places
// it (everything resident: the units are tiny) and with every unit
// streamed and each MLP on the GPU (GPU-only), on the CPU (Static) or
// split between them (Dynamic), and the LM head's blocks after the first
// likewise. The greedy ids equal transformers', the
// logits of every pick are within the reference tolerance, and a second
// generation gives the same bits.
// layeredCase is a reference checkpoint's inputs and transformers'
// outputs, and its text workload planned at the minimum budget with a
// chunked prefill (two passes) and the LM head in blocks of at most 30 KB
// (those after the first split with the CPU as the MLPs do).
type layeredCase struct {
	dir     string
	ids     []int32
	want    []int64
	steps   []float32 // transformers' logits of every pick
	chunk   int
	planned *residency.Plan
}

func newLayeredCase(t *testing.T, name string) layeredCase {
	t.Helper()
	prof, err := residency.DefaultProfile()
	require.NoError(t, err)
	dir := filepath.Join(referenceDir, name)
	ref, ids, exp := loadCase(t, dir)
	info, err := exp.Tensor("greedy_ids")
	require.NoError(t, err)
	want, err := info.I64()
	require.NoError(t, err)
	stepInfo, err := exp.Expect("step_logits", 0, len(want), ref.Config.VocabSize)
	require.NoError(t, err)
	steps, err := stepInfo.F32()
	require.NoError(t, err)
	cfg, err := configs.LoadQwen3(dir)
	require.NoError(t, err)
	arch := residency.Qwen3Arch(cfg)
	chunk := (len(ids) + 1) / 2
	w := placement.TextWorkload(len(ids), len(want), chunk)
	units := qwen3.PlanText(arch.Text, arch.Geometry(w), 30<<10, true)
	free, err := residency.NewPlan(arch, units, w, prof, 0, residency.Options{})
	require.NoError(t, err)
	planned, err := residency.NewPlan(arch, units, w, prof, free.MinBudgetBytes, residency.Options{})
	require.NoError(t, err)
	return layeredCase{dir: dir, ids: ids, want: want, steps: steps, chunk: chunk, planned: planned}
}

// generate runs the case's generation twice on m: transformers' greedy
// ids, the logits of every pick within tol (absolute plus relative to
// each logit) of transformers', the same bits both times. It returns the
// second generation.
func (c layeredCase) generate(t *testing.T, m *qwen3.Model, atol, rtol float64) *qwen3.Generation {
	t.Helper()
	var first *qwen3.Generation
	for range 2 {
		g, err := m.Generate(context.Background(), c.ids, len(c.want), qwen3.GenerateOptions{Chunk: c.chunk, Logits: true})
		require.NoError(t, err)
		got := make([]int64, len(g.IDs))
		for i, id := range g.IDs {
			got[i] = int64(id)
		}
		require.Equal(t, c.want, got, "greedy ids")
		require.Equal(t, 2, g.Chunks)
		require.Len(t, g.Logits, len(c.want))
		v := m.Config.VocabSize
		for s, row := range g.Logits {
			ref := c.steps[s*v : (s+1)*v]
			for i := range ref {
				require.InDelta(t, ref[i], row[i], atol+rtol*math.Abs(float64(ref[i])), "step %d logit %d", s, i)
			}
		}
		if first != nil {
			require.Equal(t, first.Logits, g.Logits, "the same plan gives the same bits")
		}
		first = g
	}
	return first
}

// TestLayeredGreedyMatchesTransformers runs every tiny reference
// checkpoint through the layering executor on the cpu backend (standing
// in for the device; layering.Host's slots, a second cpu backend as the
// CPU engine) with a chunked prefill (two passes): as the planner places
// it (everything resident: the units are tiny) and with every unit
// streamed and each MLP on the GPU (GPU-only), on the CPU (Static) or
// split between them (Dynamic), and the LM head's blocks after the first
// likewise. The greedy ids equal transformers', the logits of every pick
// are within the reference tolerance, and a second generation gives the
// same bits.
func TestLayeredGreedyMatchesTransformers(t *testing.T) {
	for _, name := range referenceCases(t) {
		c := newLayeredCase(t, name)
		pre, ok := c.planned.Stage(placement.StagePrefill)
		require.True(t, ok)
		assert.Equal(t, 2, pre.Passes, "a chunked prefill")
		assert.Equal(t, c.chunk, pre.Rows)
		dec, ok := c.planned.Stage(placement.StageDecode)
		require.True(t, ok)
		assert.Equal(t, len(c.want)-1, dec.Passes)
		heads := 0
		for _, u := range c.planned.Units {
			if u.ID.Module == placement.LMHead {
				heads++
				assert.Equal(t, u.ID.Index > 0, u.SplitDim > 0, "head block %d splits", u.ID.Index)
			}
		}
		assert.GreaterOrEqual(t, heads, 2, "blocks to split")
		for _, tc := range []struct {
			name             string
			plan             *residency.Plan
			streams, cpuBusy bool
		}{
			{"planned", c.planned, false, false},
			{"gpu-only", streamAll(c.planned, residency.GPUOnly), true, false},
			{"static", streamAll(c.planned, residency.Static), true, true},
			{"dynamic", streamAll(c.planned, residency.Dynamic), true, true},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				be, engine := cpuBackends(t)
				dev := layering.NewHost()
				lay := &layered.Config{Plan: tc.plan, Mode: layering.Pipelined, Device: dev, View: dev.WeightView(be), CPU: engine, Profile: true}
				ck, err := safetensors.Open(c.dir)
				require.NoError(t, err)
				defer ck.Close()
				m, err := qwen3.LoadWith(be, c.dir, ck, qwen3.LoadOptions{Layering: lay})
				require.NoError(t, err)
				defer m.Close()
				g := c.generate(t, m, atol, rtol)
				require.NotNil(t, g.Layers, "profiling: the executor ran")
				streamed := 0
				for _, tr := range g.Layers.Turns {
					if tr.Slot != layering.NoSlot {
						streamed++
					}
				}
				assert.Equal(t, tc.streams, streamed > 0, "units ran from the DFB slots")
				assert.Equal(t, tc.cpuBusy, len(g.Layers.CPUTasks) > 0, "the CPU computed shares")
				if tc.cpuBusy {
					head := false
					for _, task := range g.Layers.CPUTasks {
						head = head || task.Unit == placement.ID{Module: placement.LMHead, Index: 1}
					}
					assert.True(t, head, "the CPU computed a share of LM head block 1")
				}
			})
		}
	}
}

// TestReplanGreedyMatchesTransformers loads a reference checkpoint once
// (Replaceable) and runs it under one plan after another, each on a new
// executor (models/layered.Replace): streamed and split (Dynamic), every
// unit resident, the MLPs and head blocks on the CPU (Static), streamed
// on the GPU alone, and Dynamic again: transformers' ids and logits every
// time, and the Dynamic plan's bits the same before and after the others.
// A plan that cuts the LM head differently is refused.
func TestReplanGreedyMatchesTransformers(t *testing.T) {
	c := newLayeredCase(t, referenceCases(t)[0])
	be, engine := cpuBackends(t)
	config := func(plan *residency.Plan) *layered.Config {
		dev := layering.NewHost()
		return &layered.Config{Plan: plan, Mode: layering.Pipelined, Device: dev, View: dev.WeightView(be), CPU: engine, Replaceable: true}
	}
	ck, err := safetensors.Open(c.dir)
	require.NoError(t, err)
	defer ck.Close()
	m, err := qwen3.LoadWith(be, c.dir, ck, qwen3.LoadOptions{Layering: config(streamAll(c.planned, residency.Dynamic))})
	require.NoError(t, err)
	defer m.Close()
	first := c.generate(t, m, atol, rtol)
	for _, plan := range []*residency.Plan{c.planned, streamAll(c.planned, residency.Static), streamAll(c.planned, residency.GPUOnly)} {
		require.NoError(t, m.Replan(config(plan)))
		c.generate(t, m, atol, rtol)
	}
	require.NoError(t, m.Replan(config(streamAll(c.planned, residency.Dynamic))))
	again := c.generate(t, m, atol, rtol)
	assert.Equal(t, first.Logits, again.Logits, "the same plan, the same bits, after the others")

	other := *c.planned
	other.Units = nil
	for _, u := range c.planned.Units {
		if u.ID.Module != placement.LMHead || u.ID.Index == 0 {
			other.Units = append(other.Units, u)
		}
	}
	assert.ErrorContains(t, m.Replan(config(&other)), "cuts the LM head into 1 blocks")
	_, err = m.Generate(context.Background(), c.ids, 2, qwen3.GenerateOptions{})
	assert.ErrorContains(t, err, "could not be placed")
	require.NoError(t, m.Replan(config(c.planned)))
	c.generate(t, m, atol, rtol)
}

// cpuBackends are a CPU backend standing in for the device and a
// two-thread CPU engine for the CPU shares, both closed when t ends
// (after the test's own deferred closes: the models first).
func cpuBackends(t *testing.T) (be, engine *cpu.Backend) {
	t.Helper()
	be, err := cpu.New()
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	engine, err = cpu.New(cpu.WithThreads(2))
	require.NoError(t, err)
	t.Cleanup(func() { engine.Close() })
	return be, engine
}
