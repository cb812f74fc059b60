package residency

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"

	"vlanode/placement"
	"vlanode/weights/bf16z"
)

// zStack draws n compressed streamed units: copy (of the compressed
// bytes), decode and compute times in the given ranges (ms).
func zStack(r *rand.Rand, n int, dma, dec, exe [2]float64) []step {
	out := stack(r, n, dma, exe)
	for i := range out {
		out[i].z, out[i].dec = true, dec[0]+r.Float64()*(dec[1]-dec[0])
	}
	return out
}

// TestSimulateCompressedClosedForms checks the three-stream pipeline of
// compressed units against its closed forms, over R passes: copies the
// longest → R·ΣC_DMA + C_DEC + C_EXE of the last (each decode runs while
// the compute engine waits: nothing is taken from it); decodes or
// computes the longest → C¹_DMA + R·Σ(C_DEC + C_EXE) (the decode kernel
// shares the GPU with the computes: the compute engine does both); and
// that the decode engine's busy time is R·ΣC_DEC.
func TestSimulateCompressedClosedForms(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		n := 2 + r.IntN(40)
		passes := 1 + r.IntN(25)
		R := float64(passes)
		sum := func(seq []step, f func(step) float64) float64 {
			s := 0.0
			for _, st := range seq {
				s += f(st)
			}
			return s
		}
		dma := func(s step) float64 { return s.dma }
		dec := func(s step) float64 { return s.dec }

		copyBound := zStack(r, n, [2]float64{5, 10}, [2]float64{0.1, 2}, [2]float64{0.1, 2})
		last := copyBound[n-1]
		tl := simulate3(passes, copyBound)
		assert.InDelta(t, R*sum(copyBound, dma)+last.dec+last.exe, tl.end, 1e-9, "copy-bound, trial %d", trial)
		assert.InDelta(t, R*sum(copyBound, dec), tl.decMs, 1e-9)

		decBound := zStack(r, n, [2]float64{0.1, 2}, [2]float64{5, 10}, [2]float64{0.1, 2})
		last = decBound[n-1]
		both := func(s step) float64 { return s.dec + s.exe }
		tl = simulate3(passes, decBound)
		assert.InDelta(t, decBound[0].dma+R*sum(decBound, both), tl.end, 1e-9, "decode-bound, trial %d", trial)
		exe := func(s step) float64 { return s.exe }
		assert.Greater(t, tl.gpuMs, R*sum(decBound, exe), "decode-bound, trial %d: the decodes take from the compute engine", trial)
		assert.LessOrEqual(t, tl.gpuMs, R*sum(decBound, both)+1e-9, "decode-bound, trial %d", trial)

		exeBound := zStack(r, n, [2]float64{0.1, 2}, [2]float64{0.1, 2}, [2]float64{5, 10})
		assert.InDelta(t, exeBound[0].dma+R*sum(exeBound, both), simulate(passes, exeBound), 1e-9, "compute-bound, trial %d", trial)
	}
}

// TestSimulateCompressedEnter: a compressed unit entering its home is
// copied and decoded once, in the stage's first pass, through the same
// staging ring: a home and a streamed unit, copy-bound, cost the home's
// copy once and the streamed one's every pass.
func TestSimulateCompressedEnter(t *testing.T) {
	seq := []step{
		{enter: true, z: true, dma: 4, dec: 1, exe: 0.5},
		{streamed: true, z: true, dma: 6, dec: 1, exe: 0.5},
	}
	tl := simulate3(3, seq)
	assert.InDelta(t, 4+3*6+1+0.5, tl.end, 1e-9)
	assert.InDelta(t, 4+3*6, tl.copyMs, 1e-9)
	assert.InDelta(t, 1+3*1, tl.decMs, 1e-9)
}

// TestZEstimate checks the estimate of a unit's compressed size against
// bf16z's layout: header, a record per tensor, a job per tile, and each
// tensor coded (ρ of its bytes and its table) when that saves
// DefaultMinSaving, else raw in whole PayloadAlign.
func TestZEstimate(t *testing.T) {
	u := placement.Unit{Tensors: []placement.Tensor{
		{Name: "w", Shape: []int{1024, 1024}, Matrix: true}, // 2 MiB: 64 rows a tile, 16 tiles, coded
		{Name: "norm", Shape: []int{100}},                   // 200 bytes: raw, 1 tile
		{Name: "wide", Shape: []int{2, 70000}},              // rows wider than a tile: 2 × 2 tiles, coded
	}}
	rho := 0.7
	want := int64(bf16z.HeaderBytes + 3*bf16z.TensorBytes +
		bf16z.JobBytes*(16+1+4) +
		int64(rho*2*1024*1024) + bf16z.LUTBytes +
		208 +
		int64(rho*2*2*70000) + bf16z.LUTBytes)
	assert.Equal(t, want, zEstimate(u, rho))
}

// TestCompressItems: Options.Stored overrides the estimate; a unit whose
// stored size is not below ZMaxRatio of its bytes, and host units, stay
// raw; the copy time is the stored bytes', the decode the raw bytes'.
func TestCompressItems(t *testing.T) {
	p := &Profile{H2DGBps: 50, Decode: &DecodeProfile{Source: "test", GBps: 400, LaunchMs: 0.05}}
	mk := func(module placement.Module, bytes int64, host bool) item {
		u := placement.Unit{ID: placement.ID{Module: module}, Bytes: bytes, HostOnly: host,
			Tensors: []placement.Tensor{{Name: "w", Shape: []int{int(bytes / 2 / 1000), 1000}, Matrix: true}}}
		return item{Unit: u, dma: p.DMAMs(bytes)}
	}
	items := []item{mk("a", 2e8, false), mk("b", 2e8, false), mk("c", 2e8, false), mk("emb", 2e8, true)}
	compress(items, p, Options{Compress: true, Stored: map[placement.ID]int64{
		{Module: "b"}: 1e8,
		{Module: "c"}: 1.95e8, // 0.975 of raw: not worth it
	}})
	assert.True(t, items[0].zok)
	assert.InDelta(t, DefaultZRatio*2e8, float64(items[0].stored), 2e8*0.001)
	assert.True(t, items[1].zok)
	assert.Equal(t, int64(1e8), items[1].stored)
	assert.InDelta(t, 2.0, items[1].dma, 1e-9) // 1e8 bytes at 50 GB/s
	assert.InDelta(t, 0.05+0.5, items[1].dec, 1e-9)
	assert.False(t, items[2].zok)
	assert.InDelta(t, 4.0, items[2].dma, 1e-9)
	assert.False(t, items[3].zok)
}

// TestDecodeMsFallback: a profile without a decode section plans with
// FallbackDecode, whose line passes through the two measured units.
func TestDecodeMsFallback(t *testing.T) {
	p := &Profile{}
	assert.InDelta(t, 0.8846, p.DecodeMs(385_900_000), 0.002)
	assert.InDelta(t, 0.3447, p.DecodeMs(126_600_000), 0.002)
}
