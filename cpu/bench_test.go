package cpu

import (
	"testing"

	"vlanode/backend"
	"vlanode/tensor"
)

// BenchmarkMatMulBF16 multiplies by BF16 weights [N, K]: M = 1 is the GEMV
// of decoding (bound by reading the weights: GB/s), M = 64 a small prefill
// (bound by arithmetic: GFLOP/s).
func BenchmarkMatMulBF16(b *testing.B) {
	for _, s := range []struct{ m, n, k int }{
		{1, 1024, 1024},
		{1, 4096, 1024},
		{1, 1024, 4096},
		{1, 4096, 4096},
		{64, 4096, 1024},
		{64, 1024, 4096},
	} {
		b.Run(name("M=", s.m, "/N=", s.n, "/K=", s.k), func(b *testing.B) {
			benchMatMul(b, tensor.BF16, s.m, s.n, s.k)
		})
	}
}

// BenchmarkMatMulF32 is BenchmarkMatMulBF16 with F32 weights.
func BenchmarkMatMulF32(b *testing.B) {
	for _, s := range []struct{ m, n, k int }{{1, 4096, 1024}, {64, 4096, 1024}} {
		b.Run(name("M=", s.m, "/N=", s.n, "/K=", s.k), func(b *testing.B) {
			benchMatMul(b, tensor.F32, s.m, s.n, s.k)
		})
	}
}

func benchMatMul(b *testing.B, dt tensor.DType, m, n, k int) {
	be := newBackend(b)
	rng := newRand(1)
	x := activation(b, be, randVals(rng, m*k, 1), m, k)
	w, _ := weight(b, be, dt, randVals(rng, n*k, 1), n, k)
	dst := alloc(b, be, m, n)
	b.ResetTimer()
	for b.Loop() {
		if err := be.MatMul(dst, x, w, nil); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(n*k*dt.Size())/sec/1e9, "GB/s")
	b.ReportMetric(2*float64(m*n*k)/sec/1e9, "GFLOP/s")
}

// BenchmarkAttentionDecode is one query over a KV cache of 3,000 rows, with
// Qwen3-8B's heads (32 query, 8 KV, head dim 128).
func BenchmarkAttentionDecode(b *testing.B) {
	const nkv, heads, kvHeads, hd = 3000, 32, 8, 128
	be := newBackend(b)
	rng := newRand(2)
	q := activation(b, be, randVals(rng, heads*hd, 1), 1, heads*hd)
	k := activation(b, be, randVals(rng, nkv*kvHeads*hd, 1), nkv, kvHeads*hd)
	v := activation(b, be, randVals(rng, nkv*kvHeads*hd, 1), nkv, kvHeads*hd)
	dst := alloc(b, be, 1, heads*hd)
	o := backend.AttnOpts{Heads: heads, KVHeads: kvHeads, HeadDim: hd, NKV: nkv, Scale: 0.088, Causal: true, QPos0: nkv - 1}
	b.ResetTimer()
	for b.Loop() {
		if err := be.Attention(dst, q, k, v, o); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(2*nkv*kvHeads*hd*4)/sec/1e9, "GB/s")
}

// BenchmarkPoolDispatch is the cost of one parallel loop that wakes every
// worker for an empty task: the overhead each parallel op pays.
func BenchmarkPoolDispatch(b *testing.B) {
	be := newBackend(b)
	for b.Loop() {
		if err := be.pool.run(be.Threads(), func(int, int) {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRMSNorm is one decode step's norm: small enough to run on the
// calling goroutine alone.
func BenchmarkRMSNorm(b *testing.B) {
	const n = 4096
	be := newBackend(b)
	rng := newRand(3)
	x := activation(b, be, randVals(rng, n, 1), 1, n)
	w, _ := weight(b, be, tensor.BF16, randVals(rng, n, 1), n)
	dst := alloc(b, be, 1, n)
	for b.Loop() {
		if err := be.RMSNorm(dst, x, w, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}
