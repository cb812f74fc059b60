package residency

import (
	"fmt"
	"testing"
	"vlanode/placement"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Paper 1's Table III (RTX 5070 Ti, ms) and layer sizes (§IV-D, MB), with
// N = 21 reasoning tokens and 10 Euler steps.
const (
	paperN, paperSteps = 21, 10

	visionDMA, visionEXE, visionMB = 0.9, 8.3, 29.1
	vlmDMA, prefillEXE, decodeEXE  = 10.9, 16.6, 0.9
	vlmMB                          = 368.0
	expertDMA, expertEXE, expertMB = 3.6, 1.0, 120.8
)

// paperItems is Alpamayo as the paper models it: 27 ViT layers, 36 VLM
// layers (prefill and decode), 36 expert layers; the non-layer units are
// resident there and left out here.
func paperItems() []item {
	var out []item
	add := func(m placement.Module, n int, mb, dma float64, work ...placement.Work) {
		for i := range n {
			out = append(out, item{Unit: placement.Unit{ID: placement.ID{Module: m, Index: i}, Bytes: int64(mb * bytesPerMB), Work: work}, dma: dma})
		}
	}
	add(placement.Vision, 27, visionMB, visionDMA, placement.Work{Stage: placement.StageVision, Passes: 1, ExeMs: visionEXE})
	add(placement.VLM, 36, vlmMB, vlmDMA,
		placement.Work{Stage: placement.StagePrefill, Passes: 1, ExeMs: prefillEXE},
		placement.Work{Stage: placement.StageDecode, Passes: paperN, ExeMs: decodeEXE})
	add(placement.Expert, 36, expertMB, expertDMA, placement.Work{Stage: placement.StageDiffusion, Passes: paperSteps, ExeMs: expertEXE})
	return out
}

// TestPaperTableVII computes the residency benefits of Table VII from the
// profile of Table III: ViT 0.031 / 0 / 0, VLM 0.651 / 0.622 / 0.571,
// expert 0.298 / 0.298 / 0.215 ms/MB (first / middle / last), to the
// paper's three decimals (it prints 22 × 10.9 / 368.0 = 0.6516 as 0.651).
func TestPaperTableVII(t *testing.T) {
	l := newLayout(paperItems())
	want := map[placement.Module][3]float64{
		placement.Vision: {0.031, 0, 0},
		placement.VLM:    {0.651, 0.622, 0.571},
		placement.Expert: {0.298, 0.298, 0.215},
	}
	require.Len(t, l.modules, 3)
	for _, m := range l.modules {
		n := len(m.idxs)
		got := [3]float64{l.benefit(m, 0), l.benefit(m, n/2), l.benefit(m, n-1)}
		for i := range got {
			assert.InDelta(t, want[m.group.Module][i], got[i], 0.001, "%s %v", m.group.Module, got)
		}
		// Every middle layer has the middle benefit.
		for k := 1; k < n-1; k++ {
			assert.InDelta(t, l.benefit(m, 1), l.benefit(m, k), 1e-12)
		}
	}
}

// TestPaperPredictionSlope checks the prediction model of §IV-E against
// the simulation: with the first VLM layer resident, every further
// resident VLM layer saves N·C_DMA = 228.9 ms (the paper: 229.5 ms from
// its unrounded profile, 228.0 ms measured over 29 configurations), the
// first one (N+1)·C_DMA; and with nothing resident the simulation comes
// within 2% of the measured full-offload time, 10.482 s (Table VIII; the
// simulation leaves out the non-layer units and their overhead).
func TestPaperPredictionSlope(t *testing.T) {
	items := paperItems()
	l := newLayout(items)
	vlm := l.modules[1]
	total := func(k int) float64 {
		set := make([]bool, len(items))
		for _, j := range interleave(len(vlm.idxs), k) {
			set[vlm.idxs[j]] = true
		}
		f := &filler{l: l}
		return f.predict(set)
	}
	t0 := total(0)
	assert.InDelta(t, 10482, t0, 10482*0.02)
	assert.InDelta(t, (paperN+1)*vlmDMA, t0-total(1), 1e-6)
	for k := 1; k < 28; k++ {
		assert.InDelta(t, paperN*vlmDMA, total(k)-total(k+1), 1e-6, "k = %d", k)
	}
	measuredSlope := (10.482 - 4.092) / 28 * 1000 // Table VIII, 0 and 28 resident
	assert.InDelta(t, measuredSlope, paperN*vlmDMA, measuredSlope*0.03)
}

// TestPaperPlanPrefersVLM: planned with the paper's profile, room for k
// layers goes to the VLM (its benefit dominates, §IV-D), placed by Eq. 8.
func TestPaperPlanPrefersVLM(t *testing.T) {
	items := paperItems()
	slot := int64(vlmMB * bytesPerMB)
	for _, k := range []int{1, 5, 10, 28} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			resident, promoted := fillSide(items, int64(k)*slot, -1)
			var got []int
			for i, r := range resident {
				if r {
					require.Equal(t, placement.VLM, items[i].ID.Module, items[i].ID.String())
					got = append(got, items[i].ID.Index)
				}
				assert.False(t, promoted[i])
			}
			assert.Equal(t, interleave(36, k), got)
		})
	}
}
