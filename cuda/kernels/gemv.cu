// gemv.cu: y[M,N] = x[M,K] · w[N,K]ᵀ (+ bias) for one row of x (decode)
// and a bf16 or f16 weight: one pass over the weight at memory speed, with
// no conversion kernel and no cuBLAS call. (The template takes M rows; on
// the H200, M = 4 ran at half cuBLAS's speed, so only M = 1 is built.) x is float and is
// rounded to the weight's type as it is read, exactly as the GEMM path
// rounds it, so every product is exact in float and only the order of the
// float32 sums differs from cuBLAS.
//
// One warp per output column n: each lane streams 16-byte chunks (8
// weights) of row n of w, eight chunks in flight, and multiplies them with
// the matching 8 values of each row of x (read through the caches: x is
// small and every warp reads it). K must be a multiple of 8 and w and x
// 16-byte aligned (checked in Go).

#define VLA_GEMV_THREADS 256
#define VLA_GEMV_UNROLL 8

// vla_ld_stream reads 16 bytes of a weight that is read once: through the
// non-coherent path, not kept in L1. volatile keeps the loads of a batch
// issued together, ahead of the arithmetic that uses them.
__device__ __forceinline__ uint4 vla_ld_stream(const uint4 *p) {
	uint4 r;
	asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
	             : "l"(p));
	return r;
}

// vla_unpack8 widens 8 packed 16-bit weights to float.
template <bool F16> __device__ __forceinline__ void vla_unpack8(uint4 c, float *f) {
	const u32 w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (F16) {
			f[2 * i] = vla_f16_to_f32((u16)(w[i] & 0xffffu));
			f[2 * i + 1] = vla_f16_to_f32((u16)(w[i] >> 16));
		} else {
			f[2 * i] = __uint_as_float(w[i] << 16);
			f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
		}
	}
}

// vla_round8v rounds 8 floats v to the weight's type (as floats in f).
template <bool F16> __device__ __forceinline__ void vla_round8v(const float *v, float *f) {
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (F16) {
			const u32 p = vla_pack_f16x2(v[2 * i], v[2 * i + 1]);
			f[2 * i] = vla_f16_to_f32((u16)(p & 0xffffu));
			f[2 * i + 1] = vla_f16_to_f32((u16)(p >> 16));
		} else {
			const u32 p = vla_pack_bf16x2(v[2 * i], v[2 * i + 1]);
			f[2 * i] = __uint_as_float(p << 16);
			f[2 * i + 1] = __uint_as_float(p & 0xffff0000u);
		}
	}
}

// vla_round8 reads 8 floats of x and rounds them to the weight's type.
template <bool F16> __device__ __forceinline__ void vla_round8(const float *__restrict__ x, float *f) {
	const float4 a = ((const float4 *)x)[0], b = ((const float4 *)x)[1];
	const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
	vla_round8v<F16>(v, f);
}

// vla_gemv_chunk adds the products of one 16-byte weight chunk (index c
// of the row) to acc.
template <int M, bool F16>
__device__ __forceinline__ void vla_gemv_chunk(uint4 wc, const float *__restrict__ x, int K, int c, float *acc) {
	float wf[8];
	vla_unpack8<F16>(wc, wf);
#pragma unroll
	for (int m = 0; m < M; m++) {
		float xf[8];
		vla_round8<F16>(x + (u64)m * K + 8 * c, xf);
#pragma unroll
		for (int i = 0; i < 8; i++) acc[m] = fmaf(wf[i], xf[i], acc[m]);
	}
}

// vla_gemv_first loads the lane's first batch of row wr (its chunks c =
// lane + 32u, u < VLA_GEMV_UNROLL, those below kc) into wc: the loads that
// a kernel issues before vla_pdl_enter when its weights are written by no
// kernel (early), so that they overlap the kernel ahead.
__device__ __forceinline__ void vla_gemv_first(const uint4 *__restrict__ wr, int kc, int lane, uint4 *wc) {
#pragma unroll
	for (int u = 0; u < VLA_GEMV_UNROLL; u++)
		if (lane + 32 * u < kc) wc[u] = vla_ld_stream(wr + lane + 32 * u);
}

// vla_gemv_dot adds row wr of w times each row of x into acc (lane's
// share), then sums acc over the warp: every lane gets the dot products.
// wc holds the lane's first batch (vla_gemv_first). The chunks are summed
// in the same order however they were loaded.
template <int M, bool F16>
__device__ __forceinline__ void vla_gemv_dot(const float *__restrict__ x, const uint4 *__restrict__ wr, int K, int lane,
                                             const uint4 *wc0, float *acc) {
	const int kc = K >> 3;
#pragma unroll
	for (int m = 0; m < M; m++) acc[m] = 0.0f;
	int c = lane;
	if (c + 32 * (VLA_GEMV_UNROLL - 1) < kc) {
#pragma unroll
		for (int u = 0; u < VLA_GEMV_UNROLL; u++) vla_gemv_chunk<M, F16>(wc0[u], x, K, c + 32 * u, acc);
		c += 32 * VLA_GEMV_UNROLL;
		for (; c + 32 * (VLA_GEMV_UNROLL - 1) < kc; c += 32 * VLA_GEMV_UNROLL) {
			uint4 wc[VLA_GEMV_UNROLL];
#pragma unroll
			for (int u = 0; u < VLA_GEMV_UNROLL; u++) wc[u] = vla_ld_stream(wr + c + 32 * u);
#pragma unroll
			for (int u = 0; u < VLA_GEMV_UNROLL; u++) vla_gemv_chunk<M, F16>(wc[u], x, K, c + 32 * u, acc);
		}
		for (; c < kc; c += 32) vla_gemv_chunk<M, F16>(vla_ld_stream(wr + c), x, K, c, acc);
	} else { // the row is shorter than one batch: wc0 holds all of it
#pragma unroll
		for (int u = 0; u < VLA_GEMV_UNROLL; u++)
			if (c + 32 * u < kc) vla_gemv_chunk<M, F16>(wc0[u], x, K, c + 32 * u, acc);
	}
#pragma unroll
	for (int m = 0; m < M; m++) acc[m] = vla_warp_sum(acc[m]);
}

// vla_gemv_enter is vla_pdl_enter for a GEMV warp: with early, it loads
// the warp's first batch of row wr before it waits for the kernel ahead
// (the weights being no kernel's output), else after. A warp with no row
// (wr == 0) only waits. A GEMV lets the next kernel be placed
// (vla_pdl_launch) once its products are summed, before it stores them.
__device__ __forceinline__ void vla_gemv_enter(const uint4 *__restrict__ wr, int kc, int lane, int early, uint4 *wc) {
	if (early && wr != 0) vla_gemv_first(wr, kc, lane, wc);
	vla_pdl_enter();
	if (!early && wr != 0) vla_gemv_first(wr, kc, lane, wc);
}

// vla_gemv_store writes output column n of each row of x, plus its bias;
// with accum, adds it to what y holds there (the residual stream: the same
// float additions as a product into scratch, then Add).
template <int M>
__device__ __forceinline__ void vla_gemv_store(float *__restrict__ y, const float *acc, const void *__restrict__ bias,
                                               int bdt, int N, int n, int accum) {
	const float b = bias != 0 ? vla_load(bias, bdt, n) : 0.0f;
#pragma unroll
	for (int m = 0; m < M; m++) {
		const float v = bias != 0 ? acc[m] + b : acc[m];
		float *p = y + (u64)m * N + n;
		*p = accum ? *p + v : v;
	}
}

template <int M, bool F16>
__device__ __forceinline__ void vla_gemv(float *__restrict__ y, const float *__restrict__ x,
                                         const uint4 *__restrict__ w, const void *__restrict__ bias, int bdt, int N,
                                         int K, int accum, int early) {
	const int lane = threadIdx.x & 31;
	const int n = blockIdx.x * (VLA_GEMV_THREADS / 32) + (threadIdx.x >> 5);
	const uint4 *wr = n < N ? w + (u64)n * (K >> 3) : 0;
	uint4 wc[VLA_GEMV_UNROLL];
	vla_gemv_enter(wr, K >> 3, lane, early, wc);
	if (n >= N) return;
	float acc[M];
	vla_gemv_dot<M, F16>(x, wr, K, lane, wc, acc);
	vla_pdl_launch();
	if (lane == 0) vla_gemv_store<M>(y, acc, bias, bdt, N, n, accum);
}

// early: the weights are written by no kernel (Go: gemvEarly), so the
// first loads may go before the wait for the kernel ahead (vla_gemv_enter).
#define VLA_GEMV_KERNEL(name, M, F16)                                                                              \
	extern "C" __global__ void __launch_bounds__(VLA_GEMV_THREADS)                                                 \
	    name(float *__restrict__ y, const float *__restrict__ x, const uint4 *__restrict__ w,                    \
	         const void *__restrict__ bias, int bdt, int N, int K, int accum, int early) {                         \
		vla_gemv<M, F16>(y, x, w, bias, bdt, N, K, accum, early);                                                   \
	}

VLA_GEMV_KERNEL(vla_gemv_bf16_1, 1, false)
VLA_GEMV_KERNEL(vla_gemv_f16_1, 1, true)

// Up to three projections of one row of x in one launch (backend.Fused's
// MatMuls: q, k and v): warps [0, N0) take w0's columns, the next N1 w1's,
// the next N2 w2's, each exactly as vla_gemv computes it.
struct vla_gemv3_args {
	float *y[3];
	const uint4 *w[3];
	const void *bias[3];
	int bdt[3];
	int n[3];
};

template <bool F16>
__device__ __forceinline__ void vla_gemv3(const vla_gemv3_args &a, const float *__restrict__ x, int K, int early) {
	const int lane = threadIdx.x & 31;
	int n = blockIdx.x * (VLA_GEMV_THREADS / 32) + (threadIdx.x >> 5);
	int j = 0;
	while (j < 3 && n >= a.n[j]) n -= a.n[j++];
	const uint4 *wr = j < 3 ? a.w[j] + (u64)n * (K >> 3) : 0;
	uint4 wc[VLA_GEMV_UNROLL];
	vla_gemv_enter(wr, K >> 3, lane, early, wc);
	if (j == 3) return;
	float acc[1];
	vla_gemv_dot<1, F16>(x, wr, K, lane, wc, acc);
	vla_pdl_launch();
	if (lane == 0) vla_gemv_store<1>(a.y[j], acc, a.bias[j], a.bdt[j], a.n[j], n, 0);
}

extern "C" __global__ void __launch_bounds__(VLA_GEMV_THREADS)
    vla_gemv3_bf16(vla_gemv3_args a, const float *__restrict__ x, int K, int early) {
	vla_gemv3<false>(a, x, K, early);
}
extern "C" __global__ void __launch_bounds__(VLA_GEMV_THREADS)
    vla_gemv3_f16(vla_gemv3_args a, const float *__restrict__ x, int K, int early) {
	vla_gemv3<true>(a, x, K, early);
}

// y = silu(x·wgᵀ) · (x·wuᵀ) for one row of x (backend.Fused's SwiGLU): a
// warp takes column n of both weights, each dot product as vla_gemv
// computes it and the product as vla_silu_mul does.
template <bool F16>
__device__ __forceinline__ void vla_gemv_swiglu(float *__restrict__ y, const float *__restrict__ x,
                                                const uint4 *__restrict__ wg, const uint4 *__restrict__ wu, int N,
                                                int K, int early) {
	const int lane = threadIdx.x & 31;
	const int n = blockIdx.x * (VLA_GEMV_THREADS / 32) + (threadIdx.x >> 5);
	const int kc = K >> 3;
	const uint4 *gr = n < N ? wg + (u64)n * kc : 0;
	uint4 wc[VLA_GEMV_UNROLL];
	vla_gemv_enter(gr, kc, lane, early, wc);
	if (n >= N) return;
	float g[1], u[1];
	vla_gemv_dot<1, F16>(x, gr, K, lane, wc, g);
	const uint4 *ur = wu + (u64)n * kc;
	vla_gemv_first(ur, kc, lane, wc);
	vla_gemv_dot<1, F16>(x, ur, K, lane, wc, u);
	vla_pdl_launch();
	if (lane == 0) y[n] = vla_silu1(g[0]) * u[0];
}

extern "C" __global__ void __launch_bounds__(VLA_GEMV_THREADS)
    vla_gemv_swiglu_bf16(float *__restrict__ y, const float *__restrict__ x, const uint4 *__restrict__ wg,
                         const uint4 *__restrict__ wu, int N, int K, int early) {
	vla_gemv_swiglu<false>(y, x, wg, wu, N, K, early);
}
extern "C" __global__ void __launch_bounds__(VLA_GEMV_THREADS)
    vla_gemv_swiglu_f16(float *__restrict__ y, const float *__restrict__ x, const uint4 *__restrict__ wg,
                        const uint4 *__restrict__ wu, int N, int K, int early) {
	vla_gemv_swiglu<true>(y, x, wg, wu, N, K, early);
}
