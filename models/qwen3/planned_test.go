package qwen3_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/layering"
	"vlanode/models/layered"
	"vlanode/models/qwen3"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/safetensors"
	"vlanode/synth"
)

// TestPlannedGenerationMatchesResident writes synth's qwen3-tiny (whose
// MLPs, unlike the reference checkpoints', outgrow the device's pages)
// and generates on the CPU backend through plans that the planner makes
// (qwen3.PlanGeneration) at the minimum budget, with a chunked prefill:
// its own pick, each forced kind and --exact. Every unit but the
// embedding streams; Static and Dynamic share the MLPs and LM head blocks
// with the CPU engine. The greedy ids equal the resident model's, the
// logits of each pick are within float32 rounding of them (a split sums
// in two parts), bit-identical for GPU-only plans, and each plan gives
// the same bits twice.
func TestPlannedGenerationMatchesResident(t *testing.T) {
	dir := t.TempDir()
	l, err := synth.NewLayout(synth.Qwen3Tiny)
	require.NoError(t, err)
	_, err = synth.Write(context.Background(), dir, l, synth.Options{Seed: 3, Overwrite: true})
	require.NoError(t, err)
	be, engine := cpuBackends(t)
	ck, err := safetensors.Open(dir)
	require.NoError(t, err)
	defer ck.Close()

	const promptLen, newTokens, chunk = 40, 6, 16
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32((1 + 7919*i) % 151643)
	}
	ref, err := qwen3.Load(be, dir, ck)
	require.NoError(t, err)
	want, err := ref.Generate(context.Background(), prompt, newTokens, qwen3.GenerateOptions{Chunk: chunk, Logits: true})
	require.NoError(t, err)
	ref.Close()

	cfg, err := configs.LoadQwen3(dir)
	require.NoError(t, err)
	arch := residency.Qwen3Arch(cfg)
	prof, err := residency.DefaultProfile()
	require.NoError(t, err)
	// CPU rates at which sharing pays for these small units.
	prof.CPU = &residency.CPUProfile{Source: "test", Threads: 2, H2DBusyGBps: 50, HandoffMs: 0.001,
		Rates: []residency.CPURate{{Rows: 1, GBps: 45, TFLOPs: 0.5}, {Rows: 64, GBps: 45, TFLOPs: 1.9}}}
	free, err := qwen3.PlanGeneration(arch, promptLen, newTokens, chunk, prof, 0, residency.Options{})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		opts residency.Options
	}{
		{"planner", residency.Options{}},
		{"gpu-only", residency.Options{Kind: residency.GPUOnly}},
		{"exact", residency.Options{Exact: true}},
		{"static", residency.Options{Kind: residency.Static}},
		{"dynamic", residency.Options{Kind: residency.Dynamic}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A forced CPU kind needs the hand-off's scratch (a chunk's rows
			// of hidden floats) besides the GPU-only minimum.
			plan, err := qwen3.PlanGeneration(arch, promptLen, newTokens, chunk, prof, free.MinBudgetBytes+64<<10, tc.opts)
			require.NoError(t, err)
			dec, ok := plan.Stage(placement.StageDecode)
			require.True(t, ok)
			shares := tc.opts.Kind == residency.Static || tc.opts.Kind == residency.Dynamic || (tc.opts.Kind == "" && !tc.opts.Exact)
			if tc.opts.Kind != "" {
				assert.Equal(t, tc.opts.Kind, dec.Kind)
			}
			assert.Equal(t, shares, dec.CPUBytes > 0, "the decode's CPU shares: %s", dec.Kind)
			streamed := 0
			for _, u := range plan.Units {
				if u.Weights == placement.Streamed {
					streamed++
				}
			}
			require.Positive(t, streamed)
			dev := layering.NewHost()
			lay := &layered.Config{Plan: plan, Mode: layering.Pipelined, Device: dev, View: dev.WeightView(be), CPU: engine, Profile: true}
			m, err := qwen3.LoadWith(be, dir, ck, qwen3.LoadOptions{Layering: lay})
			require.NoError(t, err)
			defer m.Close()
			var first *qwen3.Generation
			for range 2 {
				g, err := m.Generate(context.Background(), prompt, newTokens, qwen3.GenerateOptions{Chunk: plan.Workload.PrefillChunk, Logits: true})
				require.NoError(t, err)
				assert.Equal(t, want.IDs, g.IDs, "greedy ids")
				assert.Equal(t, promptLen/chunk+1, g.Chunks)
				assert.Equal(t, shares, len(g.Layers.CPUTasks) > 0, "CPU tasks")
				for s, row := range g.Logits {
					if !shares {
						require.Equal(t, want.Logits[s], row, "step %d: GPU-only plans are bit-identical", s)
						continue
					}
					for i, v := range want.Logits[s] {
						require.InDelta(t, v, row[i], 1e-4+1e-5*math.Abs(float64(v)), "step %d logit %d", s, i)
					}
				}
				if first != nil {
					require.Equal(t, first.Logits, g.Logits, "the same plan, the same bits")
				}
				first = g
			}
		})
	}
}
