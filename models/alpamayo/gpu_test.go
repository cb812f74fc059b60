package alpamayo_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/cuda"
	"vlanode/cuda/cudatest"
	"vlanode/layering"
	"vlanode/models"
	"vlanode/models/alpamayo"
	"vlanode/models/qwen3vl"
	"vlanode/residency"
)

// TestCUDAVisionMatchesCPU encodes the same images on both backends. The
// cuda backend rounds matmul and attention inputs to bf16, so the merged
// visual tokens agree within a fraction of their largest magnitude (2%, as
// the Qwen3 logits do: see models/qwen3/gpu_test.go).
func TestCUDAVisionMatchesCPU(t *testing.T) {
	gpu := cudatest.Open(t)
	host, err := cpu.New()
	require.NoError(t, err)
	defer host.Close()
	req := request(5)
	encode := func(be backend.Backend) []float32 {
		m, err := alpamayo.Load(be, tinyCheckpoint(t), alpamayo.LoadOptions{})
		require.NoError(t, err)
		defer m.Close()
		f, err := m.VLM.Vision.Encode(context.Background(), &req.Images)
		require.NoError(t, err)
		defer f.Free(be)
		out, err := be.Download(f.Embeds)
		require.NoError(t, err)
		return out
	}
	want, got := encode(host), encode(gpu)
	require.Equal(t, len(want), len(got))
	var diff, scale float64
	for i := range want {
		diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
		scale = math.Max(scale, math.Abs(float64(want[i])))
	}
	t.Logf("visual tokens: max |cuda - cpu| = %.3g = %.2f%% of max %.3g", diff, 100*diff/scale, scale)
	require.LessOrEqual(t, diff, 0.02*scale)
}

// TestCUDAInferTiny runs the whole pipeline on the GPU.
func TestCUDAInferTiny(t *testing.T) {
	gpu := cudatest.Open(t)
	m, err := alpamayo.Load(gpu, tinyCheckpoint(t), alpamayo.LoadOptions{})
	require.NoError(t, err)
	defer m.Close()
	req := request(3)
	req.Greedy, req.MaxReasoningTokens = true, 8
	res, err := m.Infer(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, res.XYZ, 64)
	for _, p := range res.XYZ {
		for _, v := range p {
			require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0))
		}
	}
	t.Logf("cuda: %d reasoning tokens, last waypoint %v, timing %+v", len(res.ReasoningIDs), res.XYZ[63], res.Timing)
}

// BenchmarkStandardWorkload runs DESIGN.md's standard workload (16 images
// of 720 patches, 21 reasoning tokens, 10 Euler steps) on the checkpoint in
// $VLANODE_BENCH_MODEL (e.g. `vlanode synth --arch alpamayo-r1-10b`),
// fully resident on the GPU, and reports each stage in ms.
func BenchmarkStandardWorkload(b *testing.B) {
	m, gpu, req := standardWorkload(b)
	defer m.Close()
	// The decode and Euler steps replayed from captured graphs, then the
	// same with every kernel launched only once the one ahead has finished
	// (no programmatic dependent launch), then with the biases and GELUs
	// added by kernels of ours instead of cuBLASLt's epilogues, then with
	// the greedy tokens picked on the host from downloaded logits, then
	// with the products of 2 to 64 rows (the expert's) through cuBLAS
	// instead of vla_gemm_rows, then with vla_gemm_rows on mma.sync instead
	// of wgmma (where that is built), then with the one-row products on the
	// warp-per-column GEMVs instead of vla_gemv_stream, then with the
	// vision stage ending in a wait for the device instead of a mark and
	// every Free waiting for the device (the host no longer ahead of it),
	// then with each greedy decode step waiting on the host for the token
	// it feeds (SerialGreedy), then with each Euler step's update on the
	// host after its velocity comes back (HostEuler), then with each decode
	// layer's two RMSNorms in launches of their own instead of inside the
	// streamed GEMVs that read them (SetNormGEMV), then with x held as
	// floats in those GEMVs (SetGEMVFloatX), then with a decode step's q/k
	// norms in a kernel ahead of its attention (SetQKAttention), then op by
	// op: all in the same process, for their ratios.
	cb := gpu.(*cuda.Backend)
	for _, v := range []struct {
		name                                              string
		noGraphs, serial, noEpilogues, hostGreedy, noRows bool
		warpGEMV, mmaRows, waiting, hostFed, hostEuler    bool
		normApart, floatX, qkApart                        bool
	}{
		{name: "graphs"},
		{name: "graphs-serial", serial: true},
		{name: "graphs-no-epilogues", noEpilogues: true},
		{name: "graphs-host-greedy", hostGreedy: true},
		{name: "graphs-cublas-rows", noRows: true},
		{name: "graphs-mma-rows", mmaRows: true},
		{name: "graphs-warp-gemv", warpGEMV: true},
		{name: "graphs-waiting", waiting: true},
		{name: "graphs-host-fed", hostFed: true},
		{name: "graphs-host-euler", hostEuler: true},
		{name: "graphs-norm-apart", normApart: true},
		{name: "graphs-float-x", floatX: true},
		{name: "graphs-qk-apart", qkApart: true},
		{name: "op-by-op", noGraphs: true},
	} {
		b.Run(v.name, func(b *testing.B) {
			m.VLM.Text.NoGraphs, m.Expert.NoGraphs = v.noGraphs, v.noGraphs
			m.VLM.Text.HostGreedy = v.hostGreedy
			defer func() { m.VLM.Text.HostGreedy = false }()
			m.VLM.Text.SerialGreedy = v.hostFed
			defer func() { m.VLM.Text.SerialGreedy = false }()
			m.Expert.HostEuler = v.hostEuler
			defer func() { m.Expert.HostEuler = false }()
			m.SyncStages = v.waiting
			defer func() { m.SyncStages = false }()
			require.NoError(b, cb.SetWaitingFree(v.waiting))
			defer cb.SetWaitingFree(false)
			require.NoError(b, cb.SetSerialLaunches(v.serial))
			defer cb.SetSerialLaunches(false)
			require.NoError(b, cb.SetEpilogues(!v.noEpilogues))
			defer cb.SetEpilogues(true)
			require.NoError(b, cb.SetRowProducts(!v.noRows))
			defer cb.SetRowProducts(true)
			require.NoError(b, cb.SetStreamGEMV(!v.warpGEMV))
			defer cb.SetStreamGEMV(true)
			require.NoError(b, cb.SetRowsWGMMA(!v.mmaRows))
			defer cb.SetRowsWGMMA(true)
			require.NoError(b, cb.SetNormGEMV(!v.normApart))
			defer cb.SetNormGEMV(true)
			require.NoError(b, cb.SetGEMVFloatX(v.floatX))
			defer cb.SetGEMVFloatX(false)
			require.NoError(b, cb.SetQKAttention(!v.qkApart))
			defer cb.SetQKAttention(true)
			var last *alpamayo.Result
			for i := 0; i < b.N+1; i++ { // the first run warms up (kernel compile, cuBLAS)
				if i == 1 {
					b.ResetTimer()
				}
				res, err := m.Infer(context.Background(), req)
				require.NoError(b, err)
				last = res
			}
			b.StopTimer()
			require.Equal(b, !v.noGraphs, last.DecodeGraph && last.DiffusionGraph, "graphs used (%s)", last.GraphError)
			if os.Getenv("VLANODE_TRACE") != "" {
				// One more inference, every GPU operation timed (a
				// developer's view of where the GPU time goes; the events
				// slow it down, and a graph's replays count as one launch
				// each, untimed).
				require.NoError(b, cb.StartTrace())
				_, err := m.Infer(context.Background(), req)
				require.NoError(b, err)
				ops, err := cb.StopTrace()
				require.NoError(b, err)
				var sb strings.Builder
				require.NoError(b, cuda.WriteOpTimes(&sb, ops))
				b.Logf("GPU time by operation (one traced inference):\n%s", sb.String())
			}
			b.ReportMetric(ms(last.Timing.Vision), "vision-ms")
			b.ReportMetric(ms(last.Timing.Prefill), "prefill-ms")
			b.ReportMetric(ms(last.Timing.Decode), "decode-ms")
			b.ReportMetric(ms(last.Timing.Diffusion), "diffusion-ms")
			b.ReportMetric(ms(last.Timing.Total), "total-ms")
			b.Logf("prompt %d tokens, %d reasoning tokens, cached %d; result %x", last.PromptTokens, len(last.ReasoningIDs), last.CachedTokens, digest(last))
		})
	}
}

// standardWorkload loads the checkpoint in $VLANODE_BENCH_MODEL on the GPU
// (skipping without it) and returns it with DESIGN.md's standard request:
// 16 images of 720 patches, 21 greedy reasoning tokens.
func standardWorkload(b *testing.B) (*alpamayo.Model, backend.Backend, *alpamayo.Request) {
	dir := os.Getenv("VLANODE_BENCH_MODEL")
	if dir == "" {
		b.Skip("SKIPPED: set VLANODE_BENCH_MODEL to an alpamayo-r1-10b checkpoint")
	}
	gpu := cudatest.Open(b)
	start := time.Now()
	m, err := alpamayo.Load(gpu, dir, alpamayo.LoadOptions{})
	require.NoError(b, err)
	b.Logf("loaded %s in %v", dir, time.Since(start))
	req := request(1)
	req.Images = qwen3vl.Images{}
	for range 16 { // 1920×1080 → 576×320: a 1×20×36 grid, 720 patches
		req.Images.Grids = append(req.Images.Grids, qwen3vl.Grid{T: 1, H: 20, W: 36})
	}
	req.Images.Pixels = make([]float32, 16*720*1536)
	for i := range req.Images.Pixels {
		req.Images.Pixels[i] = float32(i%255)/127.5 - 1
	}
	req.Greedy, req.MaxReasoningTokens = true, 21
	return m, gpu, req
}

// BenchmarkMarginalCosts runs the standard workload (graphs) with kernels
// left out by name (cuda.Backend.SetSkipOps) in the same process as the
// complete run: a set's stage times less the complete run's are what its
// kernels cost there, overlap included. The runs with kernels left out
// compute wrong results (their hashes differ); only their times count.
// The sets are $VLANODE_SKIP_SETS (';' between sets, ',' between names;
// the empty set is the complete run), else marginalSets. Each set: one
// inference to warm up, then the best of three of each stage; the sets go
// round twice.
func BenchmarkMarginalCosts(b *testing.B) {
	m, gpu, req := standardWorkload(b)
	defer m.Close()
	cb := gpu.(*cuda.Backend)
	sets := marginalSets
	if e, ok := os.LookupEnv("VLANODE_SKIP_SETS"); ok {
		sets = strings.Split(e, ";")
	}
	defer cb.SetSkipOps(nil)
	for round := range 2 {
		for _, set := range sets {
			b.Run(fmt.Sprintf("round%d/skip=%s", round+1, strings.ReplaceAll(set, " ", "_")), func(b *testing.B) {
				require.NoError(b, cb.SetSkipOps(nil))
				_, err := m.Infer(context.Background(), req) // warm up, complete
				require.NoError(b, err)
				require.NoError(b, cb.SetSkipOps(strings.Split(set, ",")))
				var best [5]float64 // vision, prefill, decode a token, diffusion, total (ms)
				var last *alpamayo.Result
				for i := range 3 {
					res, err := m.Infer(context.Background(), req)
					require.NoError(b, err)
					t := res.Timing
					v := [5]float64{ms(t.Vision), ms(t.Prefill), ms(t.Decode) / float64(max(len(res.ReasoningIDs)-1, 1)), ms(t.Diffusion), ms(t.Total)}
					for j := range v {
						if i == 0 || v[j] < best[j] {
							best[j] = v[j]
						}
					}
					last = res
				}
				require.NoError(b, cb.SetSkipOps(nil))
				for j, unit := range []string{"vision-ms", "prefill-ms", "decode-ms/step", "diffusion-ms", "total-ms"} {
					b.ReportMetric(best[j], unit)
				}
				b.Logf("skip %q: result %x", set, digest(last))
			})
		}
	}
}

// marginalSets are BenchmarkMarginalCosts' default sets of kernel names.
var marginalSets = []string{"", "attention decode", "attention combine", "rmsnorm", "qk norm", "attention flash",
	"layernorm", "silumul", "attention k/v", "rows", "gemv stream", "gemv stream,attention,rmsnorm,qk norm"}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// TestCUDALayeredMatchesResident streams the tiny model's units through
// cuda.DFBDevice (pinned host blobs, async copies on a copy stream,
// weights viewed inside the slots) and checks that reasoning, actions and
// trajectory are bit-identical to the same backend's run with every unit
// resident in preload mode, pipelined and sequential, and at a budget that
// keeps some units resident.
func TestCUDALayeredMatchesResident(t *testing.T) {
	cb := cudatest.Open(t)
	var gpu backend.Backend = cb
	dir := tinyCheckpoint(t)
	req := request(5)
	req.MaxReasoningTokens = 6

	all, min, mid := tinyPlan(t, dir, 0), tinyPlan(t, dir, -1), midPlan(t, dir)
	infer := func(plan *residency.Plan, mode layering.Mode, profile bool) *alpamayo.Result {
		dev := cb.NewDFBDevice()
		var blobs [][]byte
		lay := &alpamayo.Layering{Plan: plan, Mode: mode, Device: dev, View: dev.WeightAt, Profile: profile,
			HostAlloc: func(n int64) ([]byte, error) {
				b, err := cuda.HostAlloc(n)
				if err == nil {
					blobs = append(blobs, b)
				}
				return b, err
			}}
		m, err := alpamayo.Load(gpu, dir, alpamayo.LoadOptions{Layering: lay})
		require.NoError(t, err)
		defer func() {
			m.Close()
			require.NoError(t, dev.Close())
			for _, b := range blobs {
				require.NoError(t, cuda.HostFree(b))
			}
		}()
		res, err := m.Infer(context.Background(), req)
		require.NoError(t, err)
		if res.Layers != nil {
			t.Logf("%v: %d turns, %.2f ms on the device", mode, len(res.Layers.Turns), res.Layers.TotalMs)
		}
		return res
	}
	// Every unit resident and no profiling: no executor run, decode and
	// Euler steps replayed from captured graphs.
	want := infer(all, layering.Preload, false)
	require.Empty(t, want.GraphError)
	require.True(t, want.DecodeGraph, "decode steps replayed a graph")
	require.True(t, want.DiffusionGraph, "Euler steps replayed a graph")
	for _, tc := range []struct {
		name string
		plan *residency.Plan
		mode layering.Mode
	}{
		{"all resident, op by op (profiled)", all, layering.Preload},
		{"all streamed, pipelined", min, layering.Pipelined},
		{"all streamed, sequential", min, layering.Sequential},
		{"mid budget, pipelined", mid, layering.Pipelined},
	} {
		got := infer(tc.plan, tc.mode, true)
		require.False(t, got.DecodeGraph || got.DiffusionGraph, "%s: a graph under the executor", tc.name)
		require.Equal(t, want.ReasoningIDs, got.ReasoningIDs, tc.name)
		require.Equal(t, want.Normalized, got.Normalized, tc.name)
		require.Equal(t, want.XYZ, got.XYZ, tc.name)
	}
}

// TestCUDALayeredCompressed streams the tiny model's units compressed
// through cuda.DFBDevice (bf16z bytes in pinned memory, copied into
// staging buffers, decoded by the warp kernel on the decode stream into
// the slots and homes; every bf16 tensor coded, as the tiny tensors would
// not pay) and checks that reasoning, actions and trajectory are
// bit-identical to raw streaming and to the resident model, pipelined and
// sequential, at the minimum budget and a mid one.
func TestCUDALayeredCompressed(t *testing.T) {
	cb := cudatest.Open(t)
	var gpu backend.Backend = cb
	dir := tinyCheckpoint(t)
	req := request(5)
	req.MaxReasoningTokens = 6

	all, min, mid := tinyPlan(t, dir, 0), tinyPlan(t, dir, -1), midPlan(t, dir)
	infer := func(plan *residency.Plan, mode layering.Mode, compress bool) *alpamayo.Result {
		dev := cb.NewDFBDevice()
		var mu sync.Mutex
		blobs := map[*byte][]byte{}
		alloc := func(n int64) ([]byte, error) {
			b, err := cuda.HostAlloc(n)
			if err == nil {
				mu.Lock()
				blobs[unsafe.SliceData(b)] = b
				mu.Unlock()
			}
			return b, err
		}
		lay := &alpamayo.Layering{Plan: plan, Mode: mode, Device: dev, View: dev.WeightAt, Profile: true, HostAlloc: alloc}
		if compress {
			lay.Plan = compressedPlan(plan)
			require.True(t, lay.Plan.Compressed, "the plan streams nothing to compress")
			lay.Compress = &models.CompressOptions{MinSaving: -1, MaxRatio: 100, Alloc: alloc, Release: func(b []byte) error {
				mu.Lock()
				delete(blobs, unsafe.SliceData(b))
				mu.Unlock()
				return cuda.HostFree(b)
			}}
		}
		m, err := alpamayo.Load(gpu, dir, alpamayo.LoadOptions{Layering: lay})
		require.NoError(t, err)
		defer func() {
			m.Close()
			require.NoError(t, dev.Close())
			for _, b := range blobs {
				require.NoError(t, cuda.HostFree(b))
			}
		}()
		res, err := m.Infer(context.Background(), req)
		require.NoError(t, err)
		decoded := 0
		for _, tr := range res.Layers.Turns {
			if tr.Compressed {
				decoded++
			}
		}
		require.Equal(t, compress, decoded > 0, "decoded turns: %d", decoded)
		return res
	}
	want := infer(all, layering.Preload, false)
	for _, tc := range []struct {
		name string
		plan *residency.Plan
		mode layering.Mode
	}{
		{"all streamed, pipelined", min, layering.Pipelined},
		{"all streamed, sequential", min, layering.Sequential},
		{"mid budget, pipelined", mid, layering.Pipelined},
	} {
		raw, z := infer(tc.plan, tc.mode, false), infer(tc.plan, tc.mode, true)
		for _, got := range []*alpamayo.Result{raw, z} {
			require.Equal(t, want.ReasoningIDs, got.ReasoningIDs, tc.name)
			require.Equal(t, want.Normalized, got.Normalized, tc.name)
			require.Equal(t, want.XYZ, got.XYZ, tc.name)
			require.Equal(t, want.Rot, got.Rot, tc.name)
		}
	}
}

// digest hashes a result's reasoning, actions and trajectory, to compare
// runs.
func digest(r *alpamayo.Result) []byte {
	h := sha256.New()
	for _, v := range [][]float32{r.Normalized} {
		for _, f := range v {
			fmt.Fprintf(h, "%08x", math.Float32bits(f))
		}
	}
	fmt.Fprint(h, r.ReasoningIDs, r.XYZ, r.Rot)
	return h.Sum(nil)[:8]
}
