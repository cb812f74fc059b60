package residency

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// stack draws n units whose copy and compute times lie in the given
// ranges (ms), all streamed.
func stack(r *rand.Rand, n int, dma, exe [2]float64) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = step{
			dma:      dma[0] + r.Float64()*(dma[1]-dma[0]),
			exe:      exe[0] + r.Float64()*(exe[1]-exe[0]),
			streamed: true,
		}
	}
	return out
}

func sums(seq []step) (dma, exe float64) {
	for _, s := range seq {
		dma += s.dma
		exe += s.exe
	}
	return dma, exe
}

// TestSimulateClosedForms checks the simulation against the closed forms
// of paper 1: every copy shorter than any compute → C¹_DMA + ΣC_EXE
// (Eq. 1, and R passes: Eq. 5 with the next pass's first copy hidden);
// every copy longer → ΣC_DMA + C_EXE of the last (Eq. 2, Eq. 6 with the
// trailing compute paid once); nothing streamed → ΣC_EXE (preload).
func TestSimulateClosedForms(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		n := 1 + r.IntN(40)
		passes := 1 + r.IntN(25)

		exeBound := stack(r, n, [2]float64{0.1, 4}, [2]float64{5, 10})
		d, e := sums(exeBound)
		assert.InDelta(t, exeBound[0].dma+e, simulate(1, exeBound), 1e-9, "EXE-intensive, trial %d", trial)
		assert.InDelta(t, exeBound[0].dma+float64(passes)*e, simulate(passes, exeBound), 1e-9, "EXE-intensive × %d", passes)

		dmaBound := stack(r, n, [2]float64{5, 10}, [2]float64{0.1, 4})
		d, _ = sums(dmaBound)
		last := dmaBound[n-1].exe
		assert.InDelta(t, d+last, simulate(1, dmaBound), 1e-9, "DMA-intensive, trial %d", trial)
		assert.InDelta(t, float64(passes)*d+last, simulate(passes, dmaBound), 1e-9, "DMA-intensive × %d", passes)

		for i := range dmaBound {
			dmaBound[i].streamed = false
		}
		_, e = sums(dmaBound)
		assert.InDelta(t, float64(passes)*e, simulate(passes, dmaBound), 1e-9, "preload")
	}
}

// TestSimulateHybrid is Eq. (7): a stack EXE-intensive in prefill and
// DMA-intensive over N decode passes costs C_DMA + L·C_prefill +
// N·L·C_DMA + C_decode (the paper's N trailing computes become one: the
// next step's first copy overlaps the current step's tail).
func TestSimulateHybrid(t *testing.T) {
	const L, N = 36, 21
	pre := make([]step, L)
	dec := make([]step, L)
	for i := range L {
		pre[i] = step{dma: vlmDMA, exe: prefillEXE, streamed: true}
		dec[i] = step{dma: vlmDMA, exe: decodeEXE, streamed: true}
	}
	got := simulate(1, pre) + simulate(N, dec)
	assert.InDelta(t, vlmDMA+L*prefillEXE+N*L*vlmDMA+decodeEXE, got, 1e-9)
}

// TestSimulateSlots: a copy waits for its slot, the one the streamed unit
// two turns back computes in.
func TestSimulateSlots(t *testing.T) {
	seq := []step{
		{dma: 1, exe: 10, streamed: true}, // copy [0,1], compute [1,11]
		{dma: 1, exe: 1, streamed: true},  // copy [1,2], compute [11,12]
		{dma: 5, exe: 1, streamed: true},  // slot 0 free at 11: copy [11,16], compute [16,17]
	}
	assert.InDelta(t, 17, simulate(1, seq), 1e-12)
	// A resident unit in between takes no slot: the third streamed turn
	// still waits for the first's (copied at [2,7] it would finish at 16).
	seq = []step{seq[0], {exe: 3}, seq[1], seq[2]}
	assert.InDelta(t, 17, simulate(1, seq), 1e-12) // computes [1,11], [11,14], [14,15]; copy [11,16], compute [16,17]
}

// TestSimulateResidentNeverSlower: making any unit resident never
// lengthens a stage.
func TestSimulateResidentNeverSlower(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		seq := stack(r, 2+r.IntN(30), [2]float64{0.1, 10}, [2]float64{0.1, 10})
		passes := 1 + r.IntN(5)
		before := simulate(passes, seq)
		for i := range seq {
			if r.IntN(3) == 0 {
				seq[i].streamed = false
			}
		}
		assert.LessOrEqual(t, simulate(passes, seq), before+1e-9)
	}
}

// TestSimulateCPUClosedForms checks the three-engine simulation against
// closed forms: units computed on the CPU alone (paper 2's Static plan for
// their MLPs) take their CPU time and two hand-offs each, one after the
// other; a Dynamic stack with instant hand-offs takes at least the busier
// engine's time and at most, unit by unit, the longer of its copy and its
// CPU share, plus one copy to fill the pipeline.
func TestSimulateCPUClosedForms(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 50 {
		n, passes := 1+r.IntN(30), 1+r.IntN(20)
		cpu, hop := 0.5+r.Float64()*5, r.Float64()*0.1
		seq := make([]step, n)
		for i := range seq {
			seq[i] = step{cpu: cpu, hop: hop}
		}
		tl := simulate3(passes, seq)
		want := float64(passes*n) * (cpu + 2*hop)
		assert.InDelta(t, want, tl.end, 1e-9*want)
		assert.InDelta(t, float64(passes*n)*cpu, tl.cpuMs, 1e-9*want)
		assert.Zero(t, tl.copyMs)

		dyn := make([]step, n)
		var maxD, both float64
		for i := range dyn {
			d, c := 0.5+r.Float64()*5, 0.5+r.Float64()*5
			dyn[i] = step{dma: d, cpu: c, streamed: true}
			maxD, both = max(maxD, d), both+max(d, c)
		}
		tl = simulate3(passes, dyn)
		assert.GreaterOrEqual(t, tl.end, max(tl.copyMs, tl.cpuMs)-1e-9, "no engine works faster than its busy time")
		assert.LessOrEqual(t, tl.end, float64(passes)*both+maxD+1e-9, "each unit's copy and CPU share overlap")
	}
}

// TestSimulateEnter: a unit entering its home is copied once, in the
// stage's first pass, without a slot, and computed in place after.
func TestSimulateEnter(t *testing.T) {
	seq := []step{{dma: 4, exe: 1, enter: true}, {dma: 4, exe: 1, enter: true}}
	// Pass 0: copies [0,4], [4,8]; computes [4,5], [8,9]. Passes 1, 2: 2 ms each.
	tl := simulate3(3, seq)
	assert.InDelta(t, 13, tl.end, 1e-12)
	assert.InDelta(t, 8, tl.copyMs, 1e-12)
	assert.InDelta(t, 6, tl.gpuMs, 1e-12)
}
