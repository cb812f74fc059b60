package cuda

import (
	"math"
	"strings"
	"testing"

	"vlanode/backend"
	"vlanode/tensor"
)

// Kernel benchmarks at the Standard workload's shapes (DESIGN.md:
// Alpamayo-R1-10B: Qwen3-VL-8B text stack 4096 hidden, 32/8 heads × 128,
// MLP 12288, prefill ≈ 3,030 tokens; vision 16 images × 720 patches, 16
// heads × 72, hidden 1152; expert 64 action tokens over the VLM cache).
// Each reports its GPU time (median, CUDA events), the bytes and FLOPs it
// must move or do, and its ratio to the floor that the ceilings measured
// in the same run set: max(bytes / byte ceiling, FLOPs / GEMM ceiling).
// Run on the GPU machine:
//
//	cuda.test -test.run '^$' -test.bench GPU -test.benchtime 20x -test.v
//
// Without a GPU each benchmark says SKIPPED.

// rotation is how many copies of an op's inputs a benchmark cycles
// through when one copy fits in the L2 (60 MB on the H200): enough that
// repeated runs read device memory, not the cache.
func rotation(bytes float64) int {
	const target = 240e6 // 4 × L2
	return int(min(max(math.Ceil(target/bytes), 1), 16))
}

func BenchmarkGPUCeilings(b *testing.B) {
	be := gpuBackend(b)
	needCeilings(b, be)
	b.Run("copy_d2d_2GiB", func(b *testing.B) {
		src := devRandom(b, be, tensor.F32, 1, ceilingBytes/4)
		dst := devRandom(b, be, tensor.F32, 1, ceilingBytes/4)
		defer be.Free(src)
		defer be.Free(dst)
		gpuBench(b, be, benchWork{bytes: 2 * ceilingBytes}, func() error { return be.Copy(dst, src) })
	})
	b.Run("gemm_bf16_8192", func(b *testing.B) {
		d := measureGEMM(b, be)
		b.ReportMetric(d, "TFLOP/s")
	})
}

func BenchmarkGPUMatMul(b *testing.B) {
	be := gpuBackend(b)
	needCeilings(b, be)
	for _, c := range []struct {
		name    string
		M, N, K int
		cublas  bool // through cuBLAS even where the GEMV or row-product kernel applies
		warp    bool // one row on the warp-per-column GEMV, not vla_gemv_stream
		mma     bool // 2 to 64 rows on vla_gemm_rows' mma.sync kernel, not its wgmma one
	}{
		{"gemv_bf16_1x4096x12288", 1, 12288, 4096, false, false, false},
		{"gemv_bf16_1x4096x12288_warp", 1, 12288, 4096, false, true, false},
		{"gemv_bf16_1x4096x12288_cublas", 1, 12288, 4096, true, false, false},
		{"gemv_bf16_1x12288x4096", 1, 4096, 12288, false, false, false},
		{"gemv_bf16_1x12288x4096_warp", 1, 4096, 12288, false, true, false},
		{"gemv_bf16_1x4096x4096", 1, 4096, 4096, false, false, false}, // a decode layer's o
		{"gemv_bf16_1x4096x4096_warp", 1, 4096, 4096, false, true, false},
		{"gemv_bf16_1x4096x6144", 1, 6144, 4096, false, false, false}, // its q, k, v together
		{"gemv_bf16_1x4096x6144_warp", 1, 6144, 4096, false, true, false},
		{"matmul_bf16_4x4096x12288", 4, 12288, 4096, false, false, false},
		{"gemm_bf16_3030x4096x12288", 3030, 12288, 4096, false, false, false},
		// The action expert's projections (64 tokens; bench/results/cuda-kernels.md):
		// vla_gemm_rows (wgmma where built, and mma.sync) against cuBLAS.
		{"rows_bf16_64x2048x2048", 64, 2048, 2048, false, false, false},
		{"rows_bf16_64x1024x2048", 64, 1024, 2048, false, false, false},
		{"rows_bf16_64x8256x2048", 64, 8256, 2048, false, false, false},
		{"rows_bf16_64x2048x8256", 64, 2048, 8256, false, false, false},
		{"rows_bf16_64x2048x2048_mma", 64, 2048, 2048, false, false, true},
		{"rows_bf16_64x1024x2048_mma", 64, 1024, 2048, false, false, true},
		{"rows_bf16_64x8256x2048_mma", 64, 8256, 2048, false, false, true},
		{"rows_bf16_64x2048x8256_mma", 64, 2048, 8256, false, false, true},
		{"gemm_bf16_64x2048x2048_cublas", 64, 2048, 2048, true, false, false},
		{"gemm_bf16_64x1024x2048_cublas", 64, 1024, 2048, true, false, false},
		{"gemm_bf16_64x8256x2048_cublas", 64, 8256, 2048, true, false, false},
		{"gemm_bf16_64x2048x8256_cublas", 64, 2048, 8256, true, false, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := be.run(func(g *gpu) error {
				g.noGEMV, g.noRows, g.noStream, g.noRowsWG = c.cublas, c.cublas, c.warp, c.mma
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			defer be.run(func(g *gpu) error {
				g.noGEMV, g.noRows, g.noStream, g.noRowsWG = false, false, false, false
				return nil
			})
			wBytes := float64(c.N) * float64(c.K) * 2
			n := rotation(wBytes)
			ws := make([]backend.Tensor, n)
			for i := range ws {
				ws[i] = devRandom(b, be, tensor.BF16, 0.05, c.N, c.K)
				defer be.Free(ws[i])
			}
			x := devRandom(b, be, tensor.F32, 1, c.M, c.K)
			dst := devRandom(b, be, tensor.F32, 1, c.M, c.N)
			defer be.Free(x)
			defer be.Free(dst)
			i := 0
			w := benchWork{
				bytes: wBytes + 4*float64(c.M)*float64(c.K+c.N),
				flops: 2 * float64(c.M) * float64(c.N) * float64(c.K),
			}
			mm := func() error {
				i++
				return be.MatMul(dst, x, ws[i%n], nil)
			}
			med := gpuBench(b, be, w, mm)
			b.ReportMetric(wBytes/med.Seconds()/1e12, "weight-TB/s")
			// The product's own kernel apart from MatMul's rounding of x
			// (which cuBLAS needs in bf16): one traced batch, each kernel
			// between two events.
			if err := be.StartTrace(); err != nil {
				b.Fatal(err)
			}
			for range 20 {
				if err := mm(); err != nil {
					b.Fatal(err)
				}
			}
			ops, err := be.StopTrace()
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range ops {
				if strings.HasPrefix(o.Op, "gemm ") || strings.HasPrefix(o.Op, "matmul gemv") || strings.HasPrefix(o.Op, "rows ") {
					us := o.Ms * 1e3 / float64(o.Count)
					b.ReportMetric(us, "kernel-us")
					b.ReportMetric(w.flops/us/1e6, "kernel-TFLOP/s")
					b.ReportMetric(wBytes/us/1e6, "kernel-weight-TB/s")
				}
			}
		})
	}
}

// attnBench is one attention shape of the workload.
type attnBench struct {
	name       string
	tq, rows   int
	o          backend.AttnOpts
	exact      bool
	inPlace    bool    // the flash kernels that read float K and V in place
	mma        bool    // vla_flash_pipe_* where vla_flash_wg_* would run
	flops      float64 // multiply-adds × 2 of the visible scores and P·V
	rotateKV   bool
	rowsPerSeg int
}

func BenchmarkGPUAttention(b *testing.B) {
	be := gpuBackend(b)
	needCeilings(b, be)
	const T = 3030
	vis := backend.AttnOpts{Heads: 16, KVHeads: 16, HeadDim: 72, NKV: 16 * 720}
	for s := 0; s <= 16; s++ {
		vis.Segments = append(vis.Segments, s*720)
	}
	causalPairs := float64(T) * float64(T+1) / 2
	cases := []attnBench{
		{name: "prefill_3030_32x8x128_causal", tq: T, rows: T, o: backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: T, Causal: true},
			flops: 4 * 128 * 32 * causalPairs},
		{name: "prefill_3030_32x8x128_causal_mma", tq: T, rows: T, o: backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: T, Causal: true},
			flops: 4 * 128 * 32 * causalPairs, mma: true},
		{name: "prefill_3030_32x8x128_causal_inplace", tq: T, rows: T, o: backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: T, Causal: true},
			flops: 4 * 128 * 32 * causalPairs, inPlace: true},
		{name: "prefill_3030_32x8x128_causal_exact", tq: T, rows: T, o: backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: T, Causal: true},
			flops: 4 * 128 * 32 * causalPairs, exact: true},
		{name: "decode_1_over_3030", tq: 1, rows: T, o: backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: T, Causal: true, QPos0: T - 1},
			flops: 4 * 128 * 32 * T, rotateKV: true},
		{name: "expert_64_over_3094", tq: 64, rows: T + 64, o: backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: T + 64},
			flops: 4 * 128 * 32 * 64 * (T + 64), rotateKV: true},
		{name: "expert_64_16x8_over_3126", tq: 64, rows: T + 96, o: backend.AttnOpts{Heads: 16, KVHeads: 8, HeadDim: 128, NKV: T + 96},
			flops: 4 * 128 * 16 * 64 * (T + 96), rotateKV: true},
		{name: "expert_64_over_3094_inplace", tq: 64, rows: T + 64, o: backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: T + 64},
			flops: 4 * 128 * 32 * 64 * (T + 64), rotateKV: true, inPlace: true},
		{name: "vision_16x720_16x72", tq: 16 * 720, rows: 16 * 720, o: vis, flops: 4 * 72 * 16 * 16 * 720 * 720},
		{name: "vision_16x720_16x72_mma", tq: 16 * 720, rows: 16 * 720, o: vis, flops: 4 * 72 * 16 * 16 * 720 * 720, mma: true},
		{name: "vision_16x720_16x72_inplace", tq: 16 * 720, rows: 16 * 720, o: vis, flops: 4 * 72 * 16 * 16 * 720 * 720, inPlace: true},
		{name: "vision_16x720_16x72_exact", tq: 16 * 720, rows: 16 * 720, o: vis, flops: 4 * 72 * 16 * 16 * 720 * 720, exact: true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			o := c.o
			o.Scale = float32(1 / math.Sqrt(float64(o.HeadDim)))
			qc, kc := o.Heads*o.HeadDim, o.KVHeads*o.HeadDim
			kvBytes := 2 * 4 * float64(o.NKV) * float64(kc)
			n := 1
			if c.rotateKV {
				n = rotation(kvBytes)
			}
			ks, vs := make([]backend.Tensor, n), make([]backend.Tensor, n)
			for i := range ks {
				ks[i] = devRandom(b, be, tensor.F32, 1, c.rows, kc)
				vs[i] = devRandom(b, be, tensor.F32, 1, c.rows, kc)
				defer be.Free(ks[i])
				defer be.Free(vs[i])
			}
			q := devRandom(b, be, tensor.F32, 1, c.tq, qc)
			dst := devRandom(b, be, tensor.F32, 1, c.tq, qc)
			defer be.Free(q)
			defer be.Free(dst)
			setExactAttention(b, be, c.exact)
			defer setExactAttention(b, be, false)
			setFlashInPlace(b, be, c.inPlace)
			defer setFlashInPlace(b, be, false)
			if err := be.SetFlashWGMMA(!c.mma); err != nil {
				b.Fatal(err)
			}
			defer be.SetFlashWGMMA(true)
			i := 0
			w := benchWork{bytes: kvBytes + 2*4*float64(c.tq)*float64(qc), flops: c.flops}
			gpuBench(b, be, w, func() error {
				i++
				return be.Attention(dst, q, ks[i%n], vs[i%n], o)
			})
		})
	}
}

func BenchmarkGPUOps(b *testing.B) {
	be := gpuBackend(b)
	needCeilings(b, be)
	type opCase struct {
		name  string
		bytes float64
		setup func(b *testing.B) func() error // returns one run of the op
	}
	const T, H, F = 3030, 4096, 12288
	const VT, VH, VF = 16 * 720, 1152, 4304
	f32 := func(b *testing.B, shape ...int) backend.Tensor {
		t := devRandom(b, be, tensor.F32, 1, shape...)
		b.Cleanup(func() { be.Free(t) })
		return t
	}
	bf16 := func(b *testing.B, shape ...int) backend.Tensor {
		t := devRandom(b, be, tensor.BF16, 1, shape...)
		b.Cleanup(func() { be.Free(t) })
		return t
	}
	// rot makes n copies of an input (n from its size) and returns a
	// function that hands them out in turn.
	rot := func(b *testing.B, bytes float64, mk func() backend.Tensor) func() backend.Tensor {
		n := rotation(bytes)
		ts := make([]backend.Tensor, n)
		for i := range ts {
			ts[i] = mk()
		}
		i := 0
		return func() backend.Tensor { i++; return ts[i%n] }
	}
	// QKNormRopeCache over a prefill's rows (one: a head a warp).
	const qkBytes = 4*T*(H+2*1024) + 4*T*(H+1024) + 2*T*2*1024
	qkCase := func(one bool) func(b *testing.B) func() error {
		return func(b *testing.B) func() error {
			q, k, v := f32(b, T, H), f32(b, T, 1024), f32(b, T, 1024)
			qw, kw, c, s := bf16(b, 128), bf16(b, 128), f32(b, T, 64), f32(b, T, 64)
			kc, vc := bf16(b, T, 1024), bf16(b, T, 1024)
			return func() error {
				if err := be.run(func(g *gpu) error { g.qkOne = one; return nil }); err != nil {
					return err
				}
				defer be.run(func(g *gpu) error { g.qkOne = false; return nil })
				return be.QKNormRopeCache(q, k, v, qw, kw, c, s, 128, 1e-6, kc, vc, backend.CacheAt{})
			}
		}
	}
	cases := []opCase{
		{"rmsnorm_3030x4096", 2 * 4 * T * H, func(b *testing.B) func() error {
			x := rot(b, 4*T*H, func() backend.Tensor { return f32(b, T, H) })
			w, d := bf16(b, H), f32(b, T, H)
			return func() error { return be.RMSNorm(d, x(), w, 1e-6) }
		}},
		{"rmsnorm_heads_3030x32x128", 2 * 4 * T * H, func(b *testing.B) func() error {
			x := rot(b, 4*T*H, func() backend.Tensor { return f32(b, T*32, 128) })
			w, d := bf16(b, 128), f32(b, T*32, 128)
			return func() error { return be.RMSNorm(d, x(), w, 1e-6) }
		}},
		{"layernorm_11520x1152", 2 * 4 * VT * VH, func(b *testing.B) func() error {
			x := rot(b, 4*VT*VH, func() backend.Tensor { return f32(b, VT, VH) })
			w, bias, d := bf16(b, VH), bf16(b, VH), f32(b, VT, VH)
			return func() error { return be.LayerNorm(d, x(), w, bias, 1e-6) }
		}},
		{"rope_3030x32x128", 2*4*T*H + 2*4*T*64, func(b *testing.B) func() error {
			x := rot(b, 4*T*H, func() backend.Tensor { return f32(b, T, H) })
			c, s := f32(b, T, 64), f32(b, T, 64)
			return func() error { return be.Rope(x(), c, s, 128) }
		}},
		{"rope_11520x16x72", 2*4*VT*VH + 2*4*VT*36, func(b *testing.B) func() error {
			x := rot(b, 4*VT*VH, func() backend.Tensor { return f32(b, VT, VH) })
			c, s := f32(b, VT, 36), f32(b, VT, 36)
			return func() error { return be.Rope(x(), c, s, 72) }
		}},
		{"silumul_3030x12288", 3 * 4 * T * F, func(b *testing.B) func() error {
			g, u, d := f32(b, T, F), f32(b, T, F), f32(b, T, F)
			return func() error { return be.SiLUMul(d, g, u) }
		}},
		{"gelu_tanh_11520x4304", 2 * 4 * VT * VF, func(b *testing.B) func() error {
			x, d := f32(b, VT, VF), f32(b, VT, VF)
			return func() error { return be.GELU(d, x, true) }
		}},
		{"gelu_erf_11520x4304", 2 * 4 * VT * VF, func(b *testing.B) func() error {
			x, d := f32(b, VT, VF), f32(b, VT, VF)
			return func() error { return be.GELU(d, x, false) }
		}},
		{"add_3030x4096", 3 * 4 * T * H, func(b *testing.B) func() error {
			x := rot(b, 8*T*H, func() backend.Tensor { return f32(b, T, H) })
			y, d := f32(b, T, H), f32(b, T, H)
			return func() error { return be.Add(d, x(), y) }
		}},
		{"embedding_3030_of_151936x4096_bf16", (2 + 4) * T * H, func(b *testing.B) func() error {
			table, d := bf16(b, 151936, H), f32(b, T, H)
			ids := make([]int32, T)
			for i := range ids {
				ids[i] = int32((i*7919 + 13) % 151936)
			}
			return func() error { return be.Embedding(d, table, ids) }
		}},
		{"qknormropecache_3030x32x8x128", qkBytes, qkCase(false)},
		{"qknormropecache_3030x32x8x128_one", qkBytes, qkCase(true)}, // a head a warp
		{"rmsnorm_decode_1x4096", 2 * 4 * H, func(b *testing.B) func() error {
			x, w, d := f32(b, 1, H), bf16(b, H), f32(b, 1, H)
			return func() error { return be.RMSNorm(d, x, w, 1e-6) }
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			run := c.setup(b)
			gpuBench(b, be, benchWork{bytes: c.bytes}, run)
		})
	}
}

// BenchmarkGPUGraph compares queuing ops one by one with replaying them
// as a captured graph: 1,000 tiny Adds (launch overhead alone), and four
// decode steps of a full-size Qwen3-VL-8B layer over a 3,030-token cache.
func BenchmarkGPUGraph(b *testing.B) {
	be := gpuBackend(b)
	needCeilings(b, be)
	const nOps = 1000
	tiny := func(b *testing.B) func() error {
		x := devRandom(b, be, tensor.F32, 1, 4096)
		y := devRandom(b, be, tensor.F32, 1, 4096)
		b.Cleanup(func() { be.Free(x); be.Free(y) })
		return func() error {
			for i := 0; i < nOps; i++ {
				if err := be.Add(y, x, y); err != nil {
					return err
				}
			}
			return nil
		}
	}
	b.Run("adds_1000_direct", func(b *testing.B) {
		med := gpuBench(b, be, benchWork{}, tiny(b))
		b.ReportMetric(float64(med.Nanoseconds())/1e3/nOps, "us/add")
	})
	b.Run("adds_1000_graph", func(b *testing.B) {
		fn := tiny(b)
		gr, err := be.Capture(fn)
		if err != nil {
			b.Fatal(err)
		}
		defer gr.Close()
		med := gpuBench(b, be, benchWork{}, gr.Launch)
		b.ReportMetric(float64(med.Nanoseconds())/1e3/nOps, "us/add")
	})
	// Launched with programmatic dependent launch (the default), and each
	// kernel only once the one ahead has finished (serial), or with the
	// overlap but GEMVs loading no weight early (late).
	for _, c := range []struct {
		name         string
		graph        bool
		serial, late bool
		warp         bool // the warp-per-column GEMVs, not vla_gemv_stream
		slots        int  // vla_gemv_stream's ring (0: gstreamSlots)
	}{
		{"decode_4_layers_direct", false, false, false, false, 0},
		{"decode_4_layers_graph", true, false, false, false, 0},
		{"decode_4_layers_graph_warp", true, false, false, true, 0},
		{"decode_4_layers_graph_slots16", true, false, false, false, 16},
		{"decode_4_layers_graph_slots48", true, false, false, false, 48},
		{"decode_4_layers_graph_serial", true, true, false, false, 0},
		{"decode_4_layers_graph_late", true, false, true, false, 0},
		{"decode_4_layers_graph_late_warp", true, false, true, true, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := be.SetSerialLaunches(c.serial); err != nil {
				b.Fatal(err)
			}
			defer be.SetSerialLaunches(false)
			slots := c.slots
			if slots == 0 {
				slots = gstreamSlots
			}
			if err := be.run(func(g *gpu) error { g.gemvLate, g.noStream, g.gstreamSlots = c.late, c.warp, slots; return nil }); err != nil {
				b.Fatal(err)
			}
			defer be.run(func(g *gpu) error { g.gemvLate, g.noStream, g.gstreamSlots = false, false, gstreamSlots; return nil })
			st := newDecodeStack(b, be, decodeFull, 4)
			fn := st.step
			if c.graph {
				gr := warmCapture(b, be, fn)
				b.Logf("graph of %d nodes", gr.Nodes())
				fn = gr.Launch
			}
			gpuBench(b, be, benchWork{bytes: st.bytes}, fn)
		})
	}
}

// BenchmarkGPUVisionNorms compares a vision block's two LayerNorms and
// the products that read them as sequences (LayerNorm, then MatMuls or
// GELUMLP: the norm written in float and in bf16) with LayerNormMatMuls
// and LayerNormGELUMLP (the norm written only in bf16), Qwen3-VL's vision
// sizes (11,520 patches of 1152, an MLP of 4304), in one process.
func BenchmarkGPUVisionNorms(b *testing.B) {
	be := gpuBackend(b)
	needCeilings(b, be)
	const VT, VH, VF = 16 * 720, 1152, 4304
	f32 := func(b *testing.B, shape ...int) backend.Tensor {
		t := devRandom(b, be, tensor.F32, 1, shape...)
		b.Cleanup(func() { be.Free(t) })
		return t
	}
	bf16 := func(b *testing.B, scale float32, shape ...int) backend.Tensor {
		t := devRandom(b, be, tensor.BF16, scale, shape...)
		b.Cleanup(func() { be.Free(t) })
		return t
	}
	for _, fused := range []bool{false, true} {
		suffix := "_seq"
		if fused {
			suffix = ""
		}
		b.Run("layernorm_qkv_11520x1152"+suffix, func(b *testing.B) {
			x, h, w, nb := f32(b, VT, VH), f32(b, VT, VH), bf16(b, 1, VH), bf16(b, 1, VH)
			ws, biases, dsts := make([]backend.Tensor, 3), make([]backend.Tensor, 3), make([]backend.Tensor, 3)
			for i := range ws {
				ws[i], biases[i], dsts[i] = bf16(b, 0.05, VH, VH), bf16(b, 1, VH), f32(b, VT, VH)
			}
			gpuBench(b, be, benchWork{bytes: 4 * 4 * VT * VH, flops: 3 * 2 * VT * VH * VH}, func() error {
				if fused {
					return be.LayerNormMatMuls(dsts, h, x, w, nb, 1e-6, ws, biases)
				}
				return backend.LayerNormMatMulsSeq(be, dsts, h, x, w, nb, 1e-6, ws, biases)
			})
		})
		b.Run("layernorm_mlp_11520x1152x4304"+suffix, func(b *testing.B) {
			x, h, mid, w, nb := f32(b, VT, VH), f32(b, VT, VH), f32(b, VT, VF), bf16(b, 1, VH), bf16(b, 1, VH)
			w1, b1, w2, b2 := bf16(b, 0.05, VF, VH), bf16(b, 1, VF), bf16(b, 0.05, VH, VF), bf16(b, 1, VH)
			gpuBench(b, be, benchWork{bytes: 3 * 4 * VT * VH, flops: 2 * 2 * VT * VH * VF}, func() error {
				if fused {
					return be.LayerNormGELUMLP(x, h, mid, w, nb, 1e-6, w1, b1, w2, b2, true)
				}
				return backend.LayerNormGELUMLPSeq(be, x, h, mid, w, nb, 1e-6, w1, b1, w2, b2, true)
			})
		})
	}
}

// BenchmarkGPUDecodeMLP compares a decode layer's MLP block as its
// sequence (RMSNorm, SwiGLU, MatMul, Add) with RMSNormMLP (the down GEMV
// adding to x itself), Qwen3-VL-8B sizes, four layers' weights in turn so
// that none stays in L2, replayed from a graph. µs are per layer.
func BenchmarkGPUDecodeMLP(b *testing.B) {
	be := gpuBackend(b)
	const H, FF, layers = 4096, 12288, 4
	type layer struct{ nw, g, u, d backend.Tensor }
	ls := make([]layer, layers)
	for i := range ls {
		ls[i] = layer{devRandom(b, be, tensor.BF16, 1, H), devRandom(b, be, tensor.BF16, 0.02, FF, H),
			devRandom(b, be, tensor.BF16, 0.02, FF, H), devRandom(b, be, tensor.BF16, 0.02, H, FF)}
	}
	x, h := devRandom(b, be, tensor.F32, 1, 1, H), devRandom(b, be, tensor.F32, 1, 1, H)
	g, u := devRandom(b, be, tensor.F32, 1, 1, FF), devRandom(b, be, tensor.F32, 1, 1, FF)
	for _, c := range []struct {
		name string
		step func(l layer) error
	}{
		{"sequence", func(l layer) error { return backend.RMSNormMLPSeq(be, x, h, g, u, l.nw, 1e-6, l.g, l.u, l.d) }},
		{"fused", func(l layer) error { return be.RMSNormMLP(x, h, g, u, l.nw, 1e-6, l.g, l.u, l.d) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			gr, err := be.Capture(func() error {
				for i := range 3 * layers {
					if err := c.step(ls[i%layers]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			defer gr.Close()
			med := gpuBench(b, be, benchWork{}, gr.Launch)
			b.ReportMetric(float64(med.Nanoseconds())/1e3/(3*layers), "us/layer")
		})
	}
}

// BenchmarkGPUStepUploads measures a decode step's host-to-device
// preparation: four small uploads (its token id, two rotary rows of 64
// floats, its position) then a wait for the GPU. "queued": through the
// staging ring, each upload queued behind the last without waiting;
// "waited": the GPU waited for after each upload, as the single staging
// buffer did before the ring (each upload waited for the previous copy).
func BenchmarkGPUStepUploads(b *testing.B) {
	be := gpuBackend(b)
	ts := make([]backend.Tensor, 4)
	vals := make([][]float32, 4)
	for i, n := range []int{1, 64, 64, 1} {
		ts[i] = devRandom(b, be, tensor.F32, 1, n)
		defer be.Free(ts[i])
		vals[i] = make([]float32, n)
	}
	for _, waited := range []bool{false, true} {
		name := "queued"
		if waited {
			name = "waited"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				for i, t := range ts {
					if err := be.Upload(t, vals[i]); err != nil {
						b.Fatal(err)
					}
					if waited {
						if err := be.Sync(); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGPUExpertProducts times the action expert's products as a
// layer queues them (64 tokens, Alpamayo's expert sizes: RMSNorm with q, k
// and v; o with the residual; RMSNorm with gate, up, SiLU and down), four
// layers' weights in turn so that none stays in L2, replayed from a
// graph, on each kernel of vla_gemm_rows (wgmma, where it is built; mma.sync)
// and on cuBLAS. µs are per layer.
func BenchmarkGPUExpertProducts(b *testing.B) {
	be := gpuBackend(b)
	needCeilings(b, be)
	const M, H, Q, KV, F, layers, eps = 64, 2048, 2048, 1024, 8256, 4, 1e-6
	var all []backend.Tensor
	mk := func(dt tensor.DType, scale float32, shape ...int) backend.Tensor {
		t := devRandom(b, be, dt, scale, shape...)
		all = append(all, t)
		return t
	}
	defer func() {
		for _, t := range all {
			be.Free(t)
		}
	}()
	type layer struct{ norm1, norm2, wq, wk, wv, wo, wg, wu, wd backend.Tensor }
	var ls []layer
	bytes := 0.0
	w := func(n, k int) backend.Tensor {
		bytes += 2 * float64(n) * float64(k)
		return mk(tensor.BF16, float32(1/math.Sqrt(float64(k))), n, k)
	}
	for range layers {
		ls = append(ls, layer{mk(tensor.BF16, 1, H), mk(tensor.BF16, 1, H), w(Q, H), w(KV, H), w(KV, H), w(H, Q), w(F, H), w(F, H), w(H, F)})
	}
	x, h := mk(tensor.F32, 1, M, H), mk(tensor.F32, 1, M, H)
	q, k, v := mk(tensor.F32, 1, M, Q), mk(tensor.F32, 1, M, KV), mk(tensor.F32, 1, M, KV)
	gate, up := mk(tensor.F32, 1, M, F), mk(tensor.F32, 1, M, F)
	if err := be.Sync(); err != nil {
		b.Fatal(err)
	}
	for _, l := range ls { // written by nothing from now on, as loaded weights
		for _, t := range []backend.Tensor{l.norm1, l.norm2, l.wq, l.wk, l.wv, l.wo, l.wg, l.wu, l.wd} {
			t.(*Tensor).readOnly = true
		}
	}
	step := func() error {
		for _, l := range ls {
			if err := backend.RMSNormMatMuls(be, []backend.Tensor{q, k, v}, h, x, l.norm1, eps, []backend.Tensor{l.wq, l.wk, l.wv}, nil); err != nil {
				return err
			}
			if err := backend.MatMulResidual(be, x, h, q, l.wo, nil); err != nil {
				return err
			}
			if err := backend.RMSNormMLP(be, x, h, gate, up, l.norm2, eps, l.wg, l.wu, l.wd); err != nil {
				return err
			}
		}
		return nil
	}
	for _, kind := range []string{"wgmma", "mma", "cublas"} {
		b.Run(kind, func(b *testing.B) {
			if err := be.SetRowProducts(kind != "cublas"); err != nil {
				b.Fatal(err)
			}
			defer be.SetRowProducts(true)
			if err := be.SetRowsWGMMA(kind == "wgmma"); err != nil {
				b.Fatal(err)
			}
			defer be.SetRowsWGMMA(true)
			gr := warmCapture(b, be, step)
			med := gpuBench(b, be, benchWork{bytes: bytes}, gr.Launch)
			b.ReportMetric(float64(med.Nanoseconds())/1e3/layers, "us/layer")
		})
	}
}

// warmCapture runs fn once (which sizes the scratch buffers a capture may
// not grow) and returns it captured in a graph, closed when b ends.
func warmCapture(b *testing.B, be *Backend, fn func() error) *Graph {
	b.Helper()
	if err := fn(); err != nil {
		b.Fatal(err)
	}
	gr, err := be.Capture(fn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gr.Close() })
	return gr
}
