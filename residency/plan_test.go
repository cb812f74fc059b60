package residency_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/residency/residencytest"
	"vlanode/synth"
)

// archOf is the planner's architecture of synth's arch.
func archOf(t *testing.T, arch synth.Arch) *residency.Arch { return residencytest.Arch(t, arch) }

func alpamayo10B(t *testing.T) *residency.Arch { return archOf(t, synth.AlpamayoR1_10B) }

// withCPU is the shipped profile with CPU figures for the tests (the
// shape of a 16-core host: 47 GB/s for one row, 1.9 TFLOP/s at 64).
func withCPU(t *testing.T) *residency.Profile {
	t.Helper()
	p, err := residency.DefaultProfile()
	require.NoError(t, err)
	p.CPU = &residency.CPUProfile{Source: "test", Threads: 16, H2DBusyGBps: 54, HandoffMs: 0.03,
		Rates: []residency.CPURate{{Rows: 1, GBps: 47, TFLOPs: 0.5}, {Rows: 64, GBps: 47, TFLOPs: 1.9}, {Rows: 512, GBps: 47, TFLOPs: 2.4}}}
	return p
}

func plan(t *testing.T, a *residency.Arch, p *residency.Profile, budget int64, opts residency.Options) *residency.Plan {
	t.Helper()
	w := placement.StandardWorkload()
	pl, err := residency.NewPlan(a, alpamayo.PlanUnits(a, w), w, p, budget, opts)
	require.NoError(t, err)
	return pl
}

// checkAccounts verifies a plan's bookkeeping in every stage: the resident
// bytes are the units home in it, the slots two of the largest streamed
// unit, every byte of the budget accounted for and none over it; the
// placements agree with the homes; the stages add up.
func checkAccounts(t *testing.T, p *residency.Plan) {
	t.Helper()
	var slot int64
	for _, u := range p.Units {
		for _, s := range u.Stages {
			pl := u.Place[s]
			require.NoError(t, pl.Validate(u.SplitDim), u.ID)
			if pl.OnDevice() && !u.HomeIn(s) {
				slot = max(slot, u.Bytes)
			}
			assert.Equal(t, u.HomeIn(s), pl == placement.OnGPU, "%s in %s", u.ID, s)
		}
		if u.Weights == placement.Host {
			assert.Equal(t, placement.Embedding, u.ID.Module)
		}
	}
	assert.Equal(t, slot, p.SlotBytes)
	var total float64
	var stages []placement.Stage
	for _, sp := range p.Stages {
		stages = append(stages, sp.Stage)
	}
	pages := func(n int64) int64 { return (n + 2<<20 - 1) / (2 << 20) * (2 << 20) }
	for _, sp := range p.Stages {
		var resident, sum int64
		arenas := map[placement.Stage]int64{} // homes carved from one arena per stage they entered with
		for _, u := range p.Units {
			switch {
			case u.Weights == placement.Resident:
				resident += u.Bytes
			case u.HomeIn(sp.Stage):
				k := slices.Index(stages, sp.Stage)
				for range stages {
					prev := stages[(k+len(stages)-1)%len(stages)]
					if !u.HomeIn(prev) {
						break
					}
					k = slices.Index(stages, prev)
				}
				arenas[stages[k]] += (u.Bytes + 255) / 256 * 256
			}
		}
		for _, n := range arenas {
			resident += pages(n)
		}
		assert.Equal(t, resident, sp.Bytes[residency.PurposeResident], sp.Stage)
		assert.Equal(t, 2*pages(slot), sp.Bytes[residency.PurposeSlots])
		for _, n := range sp.Bytes {
			sum += n
		}
		if p.BudgetBytes > 0 {
			assert.Equal(t, p.BudgetBytes, sum, sp.Stage)
			assert.GreaterOrEqual(t, sp.Bytes[residency.PurposeFree], int64(0), "%s over the budget", sp.Stage)
		}
		total += sp.PredictedMs
		assert.Equal(t, sp.PredictedMs, p.PredictedMs[sp.Stage])
	}
	assert.InDelta(t, total, p.TotalMs, 1e-9)
}

// TestPlanBudgets plans Alpamayo-R1-10B's standard workload from
// "everything fits" down to the minimum, on the GPU alone (--exact) and
// with CPU shards, as ollama's TestLLMServerFitGPU does for its layer
// fitting.
func TestPlanBudgets(t *testing.T) {
	a := alpamayo10B(t)
	exact := residency.Options{Exact: true}
	unlimited := plan(t, a, withCPU(t), 0, residency.Options{})
	checkAccounts(t, unlimited)
	assert.Zero(t, unlimited.SlotBytes)
	for _, sp := range unlimited.Stages {
		assert.Equal(t, residency.GPUOnly, sp.Kind)
		assert.Zero(t, sp.EnterBytes)
	}
	minimum := unlimited.MinBudgetBytes
	for _, budget := range []int64{16 << 30, 11 << 30, 8 << 30, 5 << 30, 4 << 30, minimum} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			gpu := plan(t, a, withCPU(t), budget, exact)
			checkAccounts(t, gpu)
			co := plan(t, a, withCPU(t), budget, residency.Options{})
			checkAccounts(t, co)
			assert.LessOrEqual(t, co.TotalMs, gpu.TotalMs+1e-6, "CPU shards never plan slower")
			assert.GreaterOrEqual(t, gpu.TotalMs, gpu.PreloadTotalMs-1e-6)
			for _, sp := range gpu.Stages {
				assert.Equal(t, residency.GPUOnly, sp.Kind, "exact: %s", sp.Stage)
				assert.Zero(t, sp.CPUMs)
			}
			// Each module is home in the stages it works in, or for good.
			for _, u := range gpu.Units {
				if u.Weights == placement.Streamed && len(u.Home) > 0 {
					for _, s := range u.Home {
						assert.Contains(t, u.Stages, s, "%s is home in %s where it does not work", u.ID, s)
					}
				}
			}
			dec, ok := co.Stage(placement.StageDecode)
			require.True(t, ok)
			if budget <= 8<<30 {
				// Decoding streams most of the language model: the CPU
				// takes a share of every streamed MLP.
				assert.Equal(t, residency.Dynamic, dec.Kind)
				assert.Positive(t, dec.CPUBytes)
				assert.Less(t, dec.PredictedMs, gpuDecode(gpu), "the CPU's bandwidth adds to PCIe's")
			}
		})
	}
}

func gpuDecode(p *residency.Plan) float64 { return p.PredictedMs[placement.StageDecode] }

// TestPlanMonotone: more budget never predicts a slower plan, on the GPU
// alone and with CPU shares, raw and compressed.
func TestPlanMonotone(t *testing.T) {
	a, prof := alpamayo10B(t), withCPU(t)
	for _, opts := range []residency.Options{{Exact: true}, {}, {Exact: true, Compress: true}, {Compress: true}} {
		prev := plan(t, a, prof, 0, opts)
		last := 1e18
		for b := prev.MinBudgetBytes; b < 24e9; b += 1e9 {
			p := plan(t, a, prof, b, opts)
			assert.LessOrEqual(t, p.TotalMs, last*1.01+1e-9, "budget %d, %+v", b, opts)
			last = min(last, p.TotalMs)
		}
	}
}

// TestPlanKinds forces each plan: GPU-only computes nothing on the CPU,
// Static puts every streamed MLP of the decode on the CPU whole, Dynamic
// splits them; the unforced plan is never slower than any forced one.
func TestPlanKinds(t *testing.T) {
	a, prof := alpamayo10B(t), withCPU(t)
	best := plan(t, a, prof, 8<<30, residency.Options{})
	for _, k := range []residency.Kind{residency.GPUOnly, residency.Static, residency.Dynamic} {
		p := plan(t, a, prof, 8<<30, residency.Options{Kind: k})
		checkAccounts(t, p)
		assert.LessOrEqual(t, best.TotalMs, p.TotalMs+1e-6, k)
		dec, _ := p.Stage(placement.StageDecode)
		assert.Equal(t, k, dec.Kind)
		for _, u := range p.Units {
			pl, ok := u.Place[placement.StageDecode]
			if !ok || u.HomeIn(placement.StageDecode) || u.Weights == placement.Host {
				continue
			}
			switch {
			case k == residency.GPUOnly || u.ID.Part != placement.MLP:
				assert.Equal(t, placement.StreamGPU, pl, u.ID)
			case k == residency.Static:
				assert.Equal(t, placement.HostCPU, pl, u.ID)
			default:
				assert.True(t, pl.Split(), u.ID)
				assert.Zero(t, pl.CPUSplit%128, "whole tiles")
			}
		}
	}
	_, err := residency.NewPlan(a, nil, placement.StandardWorkload(), prof, 0, residency.Options{Exact: true, Kind: residency.Static})
	assert.ErrorContains(t, err, "--exact forbids")
	_, err = residency.NewPlan(a, nil, placement.StandardWorkload(), prof, 0, residency.Options{Kind: "fast"})
	assert.ErrorContains(t, err, `unknown plan kind "fast"`)
}

// TestPlanMinimum: the minimum is the largest stage's fixed costs and two
// slots of the largest unit (a VLM layer's MLP: the LM head is cut to
// fit one); below it the plan is refused with the minimum.
func TestPlanMinimum(t *testing.T) {
	a := alpamayo10B(t)
	p := plan(t, a, withCPU(t), 4e9, residency.Options{})
	var fixed int64
	for _, sp := range p.Stages {
		fixed = max(fixed, sp.Bytes[residency.PurposeKV]+sp.Bytes[residency.PurposeActivations]+sp.Bytes[residency.PurposeWorkspaces]+sp.Bytes[residency.PurposeContext])
	}
	assert.Equal(t, fixed+2*((301998080+2<<20-1)/(2<<20)*(2<<20)), p.MinBudgetBytes, "two slots of the largest part, in whole pages")
	pre, _ := p.Stage(placement.StagePrefill)
	assert.Equal(t, int64(461373440), pre.Bytes[residency.PurposeKV])
	dec, _ := p.Stage(placement.StageDecode)
	assert.Less(t, dec.Bytes[residency.PurposeActivations], pre.Bytes[residency.PurposeActivations], "decode needs less scratch")

	w := placement.StandardWorkload()
	_, err := residency.NewPlan(a, alpamayo.PlanUnits(a, w), w, withCPU(t), p.MinBudgetBytes-1, residency.Options{})
	var be *residency.BudgetError
	require.ErrorAs(t, err, &be)
	assert.True(t, errors.Is(err, residency.ErrBudgetTooSmall))
	assert.Equal(t, p.MinBudgetBytes, be.Min)
}

// TestPlanOtherArchs: Qwen3-VL has no diffusion stage; a Qwen3 text model
// has only prefill and decode.
func TestPlanOtherArchs(t *testing.T) {
	vl := archOf(t, synth.Qwen3VL8B)
	p := plan(t, vl, withCPU(t), 8e9, residency.Options{})
	checkAccounts(t, p)
	assert.NotContains(t, p.PredictedMs, placement.StageDiffusion)

	c, err := configs.ParseQwen3([]byte(`{"model_type":"qwen3","vocab_size":151936,"hidden_size":2048,
		"intermediate_size":6144,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,
		"head_dim":128,"tie_word_embeddings":true}`))
	require.NoError(t, err)
	p = plan(t, residency.Qwen3Arch(c), withCPU(t), 2e9, residency.Options{})
	checkAccounts(t, p)
	var stages []placement.Stage
	for _, sp := range p.Stages {
		stages = append(stages, sp.Stage)
	}
	assert.Equal(t, []placement.Stage{placement.StagePrefill, placement.StageDecode}, stages)
	assert.Positive(t, p.Timing["scaled"], "the 2B-shaped layers scale the 8B's profiled times")
}

// TestPlanErrors: bad inputs are refused with the reason.
func TestPlanErrors(t *testing.T) {
	a, prof := alpamayo10B(t), withCPU(t)
	w := placement.StandardWorkload()
	units := alpamayo.PlanUnits(a, w)
	_, err := residency.NewPlan(a, units, w, prof, -1, residency.Options{})
	assert.ErrorContains(t, err, "negative budget")
	bad := *prof
	bad.H2DGBps = 0
	_, err = residency.NewPlan(a, units, w, &bad, 0, residency.Options{})
	assert.ErrorContains(t, err, "h2d_gbps must be positive")
	cpu := *prof.CPU
	cpu.Rates = nil
	bad = *prof
	bad.CPU = &cpu
	_, err = residency.NewPlan(a, units, w, &bad, 0, residency.Options{})
	assert.ErrorContains(t, err, "cpu.rates is empty")
	w.Images = -1
	_, err = residency.NewPlan(a, units, w, prof, 0, residency.Options{})
	assert.ErrorContains(t, err, "images is negative")
	w = placement.StandardWorkload()
	_, err = residency.NewPlan(a, append(units, units[3]), w, prof, 0, residency.Options{})
	assert.ErrorContains(t, err, "listed twice")
	e := *a.Expert
	e.NumHiddenLayers = 12
	broken := *a
	broken.Expert = &e
	_, err = residency.NewPlan(&broken, units, w, prof, 0, residency.Options{})
	assert.ErrorContains(t, err, "expert has 12 layers, the VLM 36")
	w.PatchesPerImage = 721
	_, err = residency.NewPlan(a, units, w, prof, 0, residency.Options{})
	assert.ErrorContains(t, err, "721 patches per image do not merge in groups of 4")
}

// TestPlanCompressed plans Alpamayo-R1-10B with compressed streaming, on
// the GPU alone and with CPU shards: the accounts hold with the staging
// buffers (two of the largest compressed unit, under z-staging), host
// memory is the compressed bytes where units are compressed (and the raw
// blob too where the CPU shares a unit, with the compressed GPU shares),
// and a compressed plan is kept only where it predicts less than the raw
// one (the GPU-only plans at 5 and 8 GiB copy a third less and gain about
// 30%; with CPU shares, whose half compression does not shrink, about
// 15%).
func TestPlanCompressed(t *testing.T) {
	a := alpamayo10B(t)
	pages := func(n int64) int64 { return (n + 2<<20 - 1) / (2 << 20) * (2 << 20) }
	for _, exact := range []bool{true, false} {
		for _, budget := range []int64{5 << 30, 8 << 30, 16 << 30, 0} {
			t.Run(fmt.Sprintf("%d exact %v", budget, exact), func(t *testing.T) {
				raw := plan(t, a, withCPU(t), budget, residency.Options{Exact: exact})
				z := plan(t, a, withCPU(t), budget, residency.Options{Exact: exact, Compress: true})
				checkAccounts(t, z)
				assert.LessOrEqual(t, z.TotalMs, raw.TotalMs+1e-9, "compression where it pays never plans slower")
				if budget == 0 {
					assert.False(t, z.Compressed, "nothing streams")
					assert.NotEmpty(t, z.CompressNote)
					return
				}
				if exact && budget <= 8<<30 {
					require.True(t, z.Compressed)
					assert.Less(t, z.TotalMs, 0.8*raw.TotalMs, "a copy-bound plan gains from a third fewer bytes")
				}
				if !exact && budget <= 8<<30 {
					require.True(t, z.Compressed)
					assert.Less(t, z.TotalMs, 0.9*raw.TotalMs, "the decode re-balanced: the GPU's shares copy compressed")
					dec, _ := z.Stage(placement.StageDecode)
					assert.Equal(t, residency.Dynamic, dec.Kind)
				}
				if !z.Compressed {
					assert.Contains(t, z.CompressNote, "does not pay")
					return
				}
				var staging, host, hostRaw int64
				for _, u := range z.Units {
					host += u.StoredBytes
					hostRaw += u.Bytes
					shared := false
					for _, pl := range u.Place {
						shared = shared || pl.Engine == placement.CPU || pl.CPUSplit > 0
					}
					for c := range u.CompressedShares {
						found := false
						for _, pl := range u.Place {
							found = found || pl.CPUSplit == c
						}
						assert.True(t, found, "%s: a compressed share at %d that no stage splits at", u.ID, c)
					}
					if len(u.CompressedShares) == 1 {
						staging = max(staging, u.ShareBytes)
					}
					switch {
					case u.Compressed && shared:
						// The CPU reads the raw blob: it stays beside the codings.
						assert.Equal(t, u.ZBytes+u.Bytes+u.ShareBytes, u.StoredBytes, u.ID)
					case u.Compressed:
						assert.Equal(t, u.ZBytes, u.StoredBytes, u.ID)
					default:
						assert.Equal(t, u.Bytes+u.ShareBytes, u.StoredBytes, u.ID)
					}
					if !u.Compressed {
						continue
					}
					staging = max(staging, u.ZBytes)
					assert.Equal(t, placement.Streamed, u.Weights, u.ID)
					assert.Less(t, float64(u.ZBytes), residency.ZMaxRatio*float64(u.Bytes), u.ID)
				}
				assert.Equal(t, staging, z.StagingBytes)
				assert.Equal(t, host, z.HostBytes)
				assert.Equal(t, hostRaw, z.HostRawBytes)
				if exact {
					assert.Less(t, z.HostBytes, z.HostRawBytes, "GPU-only: host memory shrinks")
				}
				for _, sp := range z.Stages {
					assert.Equal(t, 2*pages(staging), sp.Bytes[residency.PurposeStaging], sp.Stage)
					assert.LessOrEqual(t, sp.CopiedBytes, sp.StreamedBytes, sp.Stage)
					assert.LessOrEqual(t, sp.EnterCopiedBytes, sp.EnterBytes, sp.Stage)
					if sp.CopiedBytes < sp.StreamedBytes {
						assert.Positive(t, sp.DecodeMs, sp.Stage)
					}
				}
			})
		}
	}
}

// TestPlanCompressedBudgetFallback: a budget that holds the slots but not
// the staging buffers plans raw and says why.
func TestPlanCompressedBudgetFallback(t *testing.T) {
	a := alpamayo10B(t)
	raw := plan(t, a, withCPU(t), 0, residency.Options{Exact: true})
	p := plan(t, a, withCPU(t), raw.MinBudgetBytes, residency.Options{Exact: true, Compress: true})
	assert.False(t, p.Compressed)
	assert.Contains(t, p.CompressNote, "staging buffers")
	assert.Equal(t, raw.MinBudgetBytes, p.MinBudgetBytes)
	_, err := residency.NewPlan(a, alpamayo.PlanUnits(a, placement.StandardWorkload()), placement.StandardWorkload(), withCPU(t),
		raw.MinBudgetBytes-1, residency.Options{Exact: true, Compress: true})
	var be *residency.BudgetError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, raw.MinBudgetBytes, be.Min, "the minimum named is the raw plan's")
}

// TestStageEntry checks that a profile's calibrated entry costs are added
// to the stages that copy something, and only to them: a budget that
// holds every unit copies nothing and is predicted as before.
func TestStageEntry(t *testing.T) {
	a := alpamayo10B(t)
	base, err := residency.DefaultProfile()
	require.NoError(t, err)
	base.StageEntryMs = nil
	cal, err := residency.DefaultProfile()
	require.NoError(t, err)
	cal.StageEntryMs = map[placement.Stage]float64{placement.StagePrefill: 5, placement.StageDiffusion: 16}
	require.NoError(t, cal.Validate())
	const budget = 8 << 30
	p0 := plan(t, a, base, budget, residency.Options{Exact: true})
	p1 := plan(t, a, cal, budget, residency.Options{Exact: true})
	for _, s := range p1.Stages {
		s0, ok := p0.Stage(s.Stage)
		require.True(t, ok)
		want := cal.StageEntryMs[s.Stage]
		assert.Equal(t, want, s.EntryMs, "%s", s.Stage)
		assert.InDelta(t, s0.PredictedMs+want, s.PredictedMs, 1e-9, "%s", s.Stage)
	}
	assert.InDelta(t, p0.TotalMs+21, p1.TotalMs, 1e-9)

	all0 := plan(t, a, base, 0, residency.Options{})
	all1 := plan(t, a, cal, 0, residency.Options{})
	assert.Equal(t, all0.TotalMs, all1.TotalMs, "a plan that copies nothing has no entry costs")

	cal.StageEntryMs[placement.StageDecode] = 5000
	assert.ErrorContains(t, cal.Validate(), "stage_entry_ms[decode]")
}
