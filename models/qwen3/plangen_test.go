package qwen3_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models/qwen3"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/residency/residencytest"
	"vlanode/synth"
)

const gib = int64(1) << 30

// TestPlanGenerationTiers plans Qwen3-8B's text workload (16 new tokens)
// from 512 to 8K prompt tokens: the prefill is one pass of the prompt's
// tier where the budget holds it, the decode 15 passes of tier 1; a
// forced chunk cuts the prefill into passes of its tier; a budget below
// the whole prompt's minimum prefills in chunks; at 4 GiB the planner
// keeps the 4K prefill GPU-only and shares the decode with the CPU
// (Dynamic), which beats both forced plans, and --exact plans GPU-only.
func TestPlanGenerationTiers(t *testing.T) {
	arch := residencytest.Arch(t, synth.Qwen3_8B)
	prof, err := residency.DefaultProfile()
	require.NoError(t, err)
	for _, prompt := range []int{512, 2048, 4096, 8192} {
		plan, err := qwen3.PlanGeneration(arch, prompt, 16, 0, prof, 4*gib, residency.Options{})
		require.NoError(t, err, "prompt %d", prompt)
		pre, ok := plan.Stage(placement.StagePrefill)
		require.True(t, ok)
		assert.Equal(t, []int{prompt, prompt, 1}, []int{pre.Rows, pre.Tier, pre.Passes}, "prompt %d: rows, tier, passes", prompt)
		dec, ok := plan.Stage(placement.StageDecode)
		require.True(t, ok)
		assert.Equal(t, []int{1, 1, 15}, []int{dec.Rows, dec.Tier, dec.Passes}, "prompt %d", prompt)
		assert.Equal(t, residency.Dynamic, dec.Kind, "prompt %d: the decode shares with the CPU", prompt)
	}

	chunked, err := qwen3.PlanGeneration(arch, 4096, 16, 1024, prof, 4*gib, residency.Options{})
	require.NoError(t, err)
	pre, _ := chunked.Stage(placement.StagePrefill)
	assert.Equal(t, []int{1024, 1024, 4}, []int{pre.Rows, pre.Tier, pre.Passes})
	assert.Equal(t, 1024, chunked.Workload.PrefillChunk)

	// 8K tokens in one pass need 4.23 GB; at 3.5 GiB the prefill goes in
	// chunks.
	_, err = qwen3.PlanGeneration(arch, 8192, 16, 8192, prof, 3584<<20, residency.Options{})
	var be *residency.BudgetError
	require.True(t, errors.As(err, &be), "%v", err)
	small, err := qwen3.PlanGeneration(arch, 8192, 16, 0, prof, 3584<<20, residency.Options{})
	require.NoError(t, err)
	pre, _ = small.Stage(placement.StagePrefill)
	assert.Less(t, pre.Rows, 8192)
	assert.Equal(t, (8192+pre.Rows-1)/pre.Rows, pre.Passes)
	assert.Equal(t, pre.Rows, placement.Tier(pre.Rows), "a chunk is a tier")

	auto, err := qwen3.PlanGeneration(arch, 4096, 16, 0, prof, 4*gib, residency.Options{})
	require.NoError(t, err)
	pre, _ = auto.Stage(placement.StagePrefill)
	assert.Equal(t, residency.GPUOnly, pre.Kind, "4K rows: the GPU computes a streamed MLP faster than the CPU")
	for _, kind := range []residency.Kind{residency.GPUOnly, residency.Static, residency.Dynamic} {
		forced, err := qwen3.PlanGeneration(arch, 4096, 16, 0, prof, 4*gib, residency.Options{Kind: kind})
		require.NoError(t, err)
		assert.LessOrEqual(t, auto.TotalMs, forced.TotalMs*(1+1e-9), "the pick against %s", kind)
	}
	gpuOnly, err := qwen3.PlanGeneration(arch, 4096, 16, 0, prof, 4*gib, residency.Options{Kind: residency.GPUOnly})
	require.NoError(t, err)
	speedup := gpuOnly.PredictedMs[placement.StageDecode] / auto.PredictedMs[placement.StageDecode]
	t.Logf("decode at 4 GiB, 4K prompt: %.1f ms, GPU-only %.1f ms: %.2fx", auto.PredictedMs[placement.StageDecode], gpuOnly.PredictedMs[placement.StageDecode], speedup)
	assert.Greater(t, speedup, 1.8, "the decode's predicted speedup over GPU-only")
	exact, err := qwen3.PlanGeneration(arch, 4096, 16, 0, prof, 4*gib, residency.Options{Exact: true})
	require.NoError(t, err)
	for _, sp := range exact.Stages {
		assert.Equal(t, residency.GPUOnly, sp.Kind, sp.Stage)
		assert.Zero(t, sp.CPUBytes, sp.Stage)
	}
}

// TestPlanGenerationClosedForm checks the text tiers' GPU-only
// prediction against paper 1's closed form where every unit streams and
// every copy is longer than any compute (Eq. 6): a stage of R passes
// takes R·ΣC_DMA + C_EXE of its last unit. A prefill in chunks of 16
// leaves the decode no more room than the prefill, so nothing is home at
// the minimum budget; each stage is DMA-intensive at tiers 16 and 1.
func TestPlanGenerationClosedForm(t *testing.T) {
	arch := residencytest.Arch(t, synth.Qwen3_8B)
	prof, err := residency.DefaultProfile()
	require.NoError(t, err)
	const prompt, chunk, newTokens = 512, 16, 16
	free, err := qwen3.PlanGeneration(arch, prompt, newTokens, chunk, prof, 0, residency.Options{Exact: true})
	require.NoError(t, err)
	plan, err := qwen3.PlanGeneration(arch, prompt, newTokens, chunk, prof, free.MinBudgetBytes, residency.Options{Exact: true})
	require.NoError(t, err)
	for _, u := range plan.Units {
		if u.ID.Module != placement.Embedding {
			require.Equal(t, placement.Streamed, u.Weights, u.ID.String())
			require.Empty(t, u.Home, u.ID.String())
		}
	}
	w := placement.TextWorkload(prompt, newTokens, chunk)
	units := qwen3.PlanText(arch.Text, arch.Geometry(w), 0, true)
	prof.Cost(units)
	for _, st := range []struct {
		stage  placement.Stage
		passes int
	}{{placement.StagePrefill, prompt / chunk}, {placement.StageDecode, newTokens - 1}} {
		var dma, last float64
		for _, u := range units {
			wk, ok := u.WorkIn(st.stage)
			if !ok || u.HostOnly {
				continue
			}
			d := prof.DMAMs(u.Bytes)
			require.Greater(t, d, wk.ExeMs, "%s is DMA-intensive in %s", u.ID, st.stage)
			dma += d
			last = wk.ExeMs
		}
		sp, ok := plan.Stage(st.stage)
		require.True(t, ok)
		assert.Equal(t, st.passes, sp.Passes)
		assert.InDelta(t, float64(st.passes)*dma+last, sp.PredictedMs, 1e-6, "%s: R·ΣC_DMA + C_EXE of the last", st.stage)
	}
}
