package residency

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/synth"
)

// checkAccounts verifies a plan's bookkeeping: resident bytes are the
// resident units', the slots are two of the largest streamed unit, and
// with a budget every byte is accounted for.
func checkAccounts(t *testing.T, p *Plan) {
	t.Helper()
	var resident, slot int64
	for _, u := range p.Units {
		switch u.Placement {
		case Resident:
			resident += u.Bytes
		case Streamed:
			slot = max(slot, u.Bytes)
		case Host:
			assert.Equal(t, Embedding, u.Module)
		}
	}
	assert.Equal(t, resident, p.Bytes[PurposeResident])
	assert.Equal(t, slot, p.SlotBytes)
	assert.Equal(t, 2*slot, p.Bytes[PurposeSlots])
	var sum int64
	for _, n := range p.Bytes {
		sum += n
	}
	if p.BudgetBytes > 0 {
		assert.Equal(t, p.BudgetBytes, sum)
		assert.GreaterOrEqual(t, p.Bytes[PurposeFree], int64(0))
	}
	assert.GreaterOrEqual(t, p.TotalMs, p.PreloadTotalMs-1e-6)
	var stages float64
	for _, ms := range p.PredictedMs {
		stages += ms
	}
	assert.InDelta(t, stages, p.TotalMs, 1e-9)
}

// residentOf returns the resident indices of module m.
func residentOf(p *Plan, m Module) []int {
	for _, s := range p.Modules() {
		if s.Module == m {
			return s.Resident
		}
	}
	return nil
}

// TestPlanBudgets plans Alpamayo-R1-10B's standard workload on the default
// profile from "everything fits" down to the minimum and below, as
// ollama's TestLLMServerFitGPU does for its layer fitting.
func TestPlanBudgets(t *testing.T) {
	a, prof := alpamayo10B(t), defaultProfile(t)
	unlimited, err := NewPlan(a, StandardWorkload(), prof, 0)
	require.NoError(t, err)
	minimum := unlimited.MinBudgetBytes
	fitsAll := unlimited.Bytes[PurposeResident] + unlimited.Bytes[PurposeKV] + unlimited.Bytes[PurposeActivations] +
		unlimited.Bytes[PurposeWorkspaces] + unlimited.Bytes[PurposeContext]

	for _, tc := range []struct {
		name   string
		budget int64
		// vlm is the number of resident VLM layers, -1 for any.
		vlm      int
		streamed bool // some unit is streamed
	}{
		{"none", 0, 36, false},
		{"everything fits", fitsAll, 36, false},
		{"one byte short", fitsAll - 1, -1, true},
		{"16G", 16e9, 30, true},
		{"8G", 8e9, 13, true},
		{"4G", 4e9, 2, true},
		{"minimum", minimum, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(a, StandardWorkload(), prof, tc.budget)
			require.NoError(t, err)
			checkAccounts(t, p)
			assert.Equal(t, minimum, p.MinBudgetBytes)
			assert.Equal(t, tc.streamed, p.SlotBytes > 0)
			vlm := residentOf(p, VLM)
			if tc.vlm >= 0 {
				assert.Len(t, vlm, tc.vlm)
			}
			if n := len(vlm); n > 0 && n < 36 {
				assert.Equal(t, 0, vlm[0], "the first VLM layer is resident")
				assert.NotContains(t, vlm, 35, "the last is not")
				assert.Equal(t, interleave(36, n), vlm)
			}
			if !tc.streamed {
				assert.InDelta(t, p.PreloadTotalMs, p.TotalMs, 1e-6)
				assert.Zero(t, p.Bytes[PurposeSlots])
			}
			if tc.budget == fitsAll-1 {
				// What stays streamed (ViT blocks, whose copies hide under
				// compute) costs under a millisecond over every unit
				// resident computed unit by unit (the sums of the unit
				// times, without the stage times a plan that streams
				// nothing takes).
				op := *prof
				op.StageMs, op.GraphStageMs = nil, nil
				q, err := NewPlan(a, StandardWorkload(), &op, tc.budget)
				require.NoError(t, err)
				assert.InDelta(t, q.PreloadTotalMs, p.TotalMs, 1)
				assert.GreaterOrEqual(t, p.TotalMs, p.PreloadTotalMs)
			}
			assert.Equal(t, 4, len(p.PredictedMs), "vision, prefill, decode, diffusion")
		})
	}

	_, err = NewPlan(a, StandardWorkload(), prof, minimum-1)
	var be *BudgetError
	require.ErrorAs(t, err, &be)
	assert.True(t, errors.Is(err, ErrBudgetTooSmall))
	assert.Equal(t, minimum, be.Min)
	assert.Contains(t, err.Error(), fmt.Sprintf("minimum of %s bytes (%.2f GB)", GroupDigits(minimum), float64(minimum)/1e9))
	_, err = NewPlan(a, StandardWorkload(), prof, 2.5e9)
	assert.ErrorIs(t, err, ErrBudgetTooSmall)
}

// TestPlanMinimum: the minimum is the fixed costs and two slots of the
// largest unit (a VLM layer: the LM head is cut to fit one).
func TestPlanMinimum(t *testing.T) {
	p, err := NewPlan(alpamayo10B(t), StandardWorkload(), defaultProfile(t), 4e9)
	require.NoError(t, err)
	fixed := p.Bytes[PurposeKV] + p.Bytes[PurposeActivations] + p.Bytes[PurposeWorkspaces] + p.Bytes[PurposeContext]
	assert.Equal(t, fixed+2*385892864, p.MinBudgetBytes)
	// KV cache: 2 blocks (K, V) of 36 layers × (3,042 + 21 + 64) tokens × 8
	// heads × 128 × 2 bytes (bf16), each rounded up to 2 MiB pages.
	assert.Equal(t, 2*pages(36*(3042+21+64)*8*128*2), p.Bytes[PurposeKV])
	assert.Equal(t, int64(461373440), p.Bytes[PurposeKV])
}

// TestPlanMonotone: more budget never predicts a slower plan.
func TestPlanMonotone(t *testing.T) {
	a, prof := alpamayo10B(t), defaultProfile(t)
	prev, err := NewPlan(a, StandardWorkload(), prof, 0)
	require.NoError(t, err)
	top := prev.MinBudgetBytes + 2*prev.Bytes[PurposeResident]
	last := 1e18
	for b := prev.MinBudgetBytes; b < top; b += 40e6 {
		p, err := NewPlan(a, StandardWorkload(), prof, b)
		require.NoError(t, err)
		assert.LessOrEqual(t, p.TotalMs, last+1e-9, "budget %d", b)
		last = p.TotalMs
	}
	assert.InDelta(t, prev.TotalMs, last, 1e-6, "the largest budgets plan like no budget")
}

// TestPlanOtherArchs: Qwen3-VL has no diffusion stage and sizes its cache
// without action tokens; a Qwen3 text model has only prefill and decode.
func TestPlanOtherArchs(t *testing.T) {
	vl := archOf(t, synth.Qwen3VL8B)
	p, err := NewPlan(vl, StandardWorkload(), defaultProfile(t), 8e9)
	require.NoError(t, err)
	checkAccounts(t, p)
	assert.NotContains(t, p.PredictedMs, StageDiffusion)
	assert.Equal(t, 2*pages(36*(3042+21)*8*128*2), p.Bytes[PurposeKV])
	assert.NotEmpty(t, residentOf(p, VLM))

	c, err := configs.ParseQwen3([]byte(`{"model_type":"qwen3","vocab_size":151936,"hidden_size":2048,
		"intermediate_size":6144,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,
		"head_dim":128,"tie_word_embeddings":true}`))
	require.NoError(t, err)
	p, err = NewPlan(Qwen3Arch(c), StandardWorkload(), defaultProfile(t), 3e9)
	require.NoError(t, err)
	checkAccounts(t, p)
	assert.Equal(t, []Stage{StagePrefill, StageDecode}, stagesOf(p))
	assert.Positive(t, p.Timing["scaled"], "the 2B-shaped layers scale the 8B's profiled times")
}

func stagesOf(p *Plan) []Stage {
	var out []Stage
	for _, s := range Stages() {
		if _, ok := p.PredictedMs[s]; ok {
			out = append(out, s)
		}
	}
	return out
}

// TestPlanErrors: bad inputs are refused with the reason.
func TestPlanErrors(t *testing.T) {
	a, prof := alpamayo10B(t), defaultProfile(t)
	_, err := NewPlan(a, StandardWorkload(), prof, -1)
	assert.ErrorContains(t, err, "negative budget")
	bad := *prof
	bad.H2DGBps = 0
	_, err = NewPlan(a, StandardWorkload(), &bad, 0)
	assert.ErrorContains(t, err, "h2d_gbps must be positive")
	w := StandardWorkload()
	w.Images = -1
	_, err = NewPlan(a, w, prof, 0)
	assert.ErrorContains(t, err, "images is negative")
	items := paperItems()
	items[3].Work = []Work{{Stage: StageVision, Passes: 2, ExeMs: 1}}
	_, err = planItems(items, nil, 0, 0)
	assert.ErrorContains(t, err, "runs 2 passes of vision, other units 1")
}
