// fused.cu: sequences of ops that every decoder layer repeats, in one
// kernel each (backend.Fused). Each computes the same bits as its
// sequence: the same per-thread loops, sums and roundings as the kernels
// it replaces (norm.cu, rope.cu, elementwise.cu, gemv.cu).

// x = x + d; y = w · (x · rsqrt(mean(x²) + eps)): vla_add then
// vla_rmsnorm, one block per row of n (launched with vla_rmsnorm's block
// size, so that the sum of squares runs in its order). y may be d: each
// element is read and written by one thread.
extern "C" __global__ void vla_add_rmsnorm(float *y, float *x, const float *d, const void *__restrict__ w, int wdt,
                                           int n, float eps) {
	vla_pdl_launch_enter(); // ahead of a GEMV
	__shared__ double sh[32];
	float *xr = x + (u64)blockIdx.x * n;
	const float *dr = d + (u64)blockIdx.x * n;
	float *yr = y + (u64)blockIdx.x * n;
	double ss = vla_norm_sumsq<true>(xr, dr, n);
	ss = vla_block_sum_d(ss, sh);
	const float ms = (float)(ss / (double)n);
	const float s = (float)(1.0 / sqrt((double)(ms + eps)));
	vla_norm_scale(yr, xr, w, wdt, n, s);
}

// vla_cache_store writes n floats to a KV cache row of type cdt (F32, or
// BF16 rounded as vla_f32_to_bf16 does), lane-strided.
__device__ __forceinline__ void vla_cache_store(void *c, int cdt, u64 off, const float *r, int n, int lane) {
	if (cdt == VLA_BF16) {
		u16 *d = (u16 *)c + off;
		for (int i = lane; i < n; i += 32) d[i] = vla_f32_to_bf16(r[i]);
	} else {
		float *d = (float *)c + off;
		for (int i = lane; i < n; i += 32) d[i] = r[i];
	}
}

// Per-head RMSNorm then rotary embedding of q [rows, qh·hd] and k [rows,
// kh·hd], in place: vla_rmsnorm_rows on each head (qw for q, kw for k),
// then vla_rope, a warp per head of a row. cos and sin are [rows, hd/2].
// With CACHE, the k heads are then also stored into kc, and kh more warps
// a row copy v's heads into vc: rows at + t of caches of crows rows, at
// being *pos_at when pos_at is not null (no row is stored when they would
// pass crows, as vla_rows_at_* do).
//
// Head dim 128, the usual head, from registers: a lane holds its four
// elements lane + 32u, every load (x, w, cos, sin) issued at once, and
// each rotation pair (i, i + 64) in one lane: the same sums, products and
// roundings as the loops below, without their round trips. A warp then
// takes per heads in a row of the items (heads of rows, in order; per is
// 1 or VLA_QK_PER), all their loads issued before the first is used: a
// warp of one head left the memory idle while it summed and stored (the
// prefill's heads, 3,030 rows of 48: 65-70 µs against 83,
// bench/results/cuda-kernels.md run 18).
#define VLA_QK_PER 4
// vla_qk_item locates the item of head h of row t: the row it reads and
// rewrites (r: q, k, or for a v head of CACHE the value row), and the
// norm's weight. A warp's items follow one another: it divides its first
// item's index by the heads a row once, then steps (h + 1, or head 0 of
// row t + 1), a 64-bit division costing ~70 instructions.
struct vla_qk_item {
	u64 t;
	int h;
	float *r;
	const void *w;
	int wdt;
};
__device__ __forceinline__ vla_qk_item vla_qk_at(u64 t, int h, int qh, int kh, int hd, float *q, float *k,
                                                  const float *v, const void *qw, int qwdt, const void *kw,
                                                  int kwdt) {
	vla_qk_item it;
	it.t = t;
	it.h = h;
	it.w = kw;
	it.wdt = kwdt;
	if (it.h < qh) {
		it.r = q + (it.t * qh + it.h) * hd;
		it.w = qw;
		it.wdt = qwdt;
	} else if (it.h < qh + kh) {
		it.r = k + (it.t * kh + (it.h - qh)) * hd;
	} else {
		it.r = (float *)v + (it.t * kh + (it.h - qh - kh)) * hd; // read only
	}
	return it;
}

template <bool CACHE>
__device__ __forceinline__ void vla_qk_norm_rope_t(float *q, float *k, const float *v, const void *__restrict__ qw,
                                                   int qwdt, const void *__restrict__ kw, int kwdt,
                                                   const float *__restrict__ cs, const float *__restrict__ sn,
                                                   u64 rows, int qh, int kh, int hd, float eps, void *kc, void *vc,
                                                   int cdt, u64 at, const int *pos_at, u64 crows, int per) {
	const u64 wid = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31, hpr = qh + kh + (CACHE ? kh : 0);
	const u64 items = rows * (u64)hpr;
	if (CACHE) {
		if (pos_at) at = (u64)*pos_at;
		if (at + rows > crows) kc = vc = 0;
	}
	if (hd == 128) {
		if (wid * per >= items) return;
		// The warp's first item: row t0, head h0; the next ones in turn.
		const u64 t0 = wid * per / hpr;
		const int h0 = (int)(wid * per - t0 * hpr);
		float e[VLA_QK_PER][4], wv[VLA_QK_PER][4], c[VLA_QK_PER][2], sv[VLA_QK_PER][2];
		u64 t = t0;
		int h = h0;
#pragma unroll
		for (int p = 0; p < VLA_QK_PER; p++) {
			const u64 i = wid * per + p;
			if (p >= per || i >= items) break;
			const vla_qk_item it = vla_qk_at(t, h, qh, kh, hd, q, k, v, qw, qwdt, kw, kwdt);
			if (++h == hpr) h = 0, t++;
#pragma unroll
			for (int u = 0; u < 4; u++) {
				e[p][u] = it.r[lane + 32 * u];
				wv[p][u] = vla_load(it.w, it.wdt, lane + 32 * u);
			}
#pragma unroll
			for (int u = 0; u < 2; u++) {
				c[p][u] = cs[it.t * 64 + lane + 32 * u];
				sv[p][u] = sn[it.t * 64 + lane + 32 * u];
			}
		}
		t = t0;
		h = h0;
#pragma unroll
		for (int p = 0; p < VLA_QK_PER; p++) {
			const u64 i = wid * per + p;
			if (p >= per || i >= items) break;
			// located again rather than held from the loads: holding the
			// four items took vla_qk_norm_rope_cache from 74 registers to
			// 91 (ptxas, NVRTC 11.8, sm_90)
			const vla_qk_item it = vla_qk_at(t, h, qh, kh, hd, q, k, v, qw, qwdt, kw, kwdt);
			if (++h == hpr) h = 0, t++;
			if (CACHE && it.h >= qh + kh) { // a head of v: only copied
				if (vc) {
					const u64 off = ((at + it.t) * kh + (it.h - qh - kh)) * hd;
#pragma unroll
					for (int u = 0; u < 4; u++) {
						if (cdt == VLA_BF16) ((u16 *)vc)[off + lane + 32 * u] = vla_f32_to_bf16(e[p][u]);
						else ((float *)vc)[off + lane + 32 * u] = e[p][u];
					}
				}
				continue;
			}
			vla_qk_head128(e[p], wv[p], c[p], sv[p], eps);
#pragma unroll
			for (int u = 0; u < 4; u++) it.r[lane + 32 * u] = e[p][u];
			if (CACHE && it.h >= qh && kc) {
				const u64 off = ((at + it.t) * kh + (it.h - qh)) * hd;
#pragma unroll
				for (int u = 0; u < 4; u++) {
					if (cdt == VLA_BF16) ((u16 *)kc)[off + lane + 32 * u] = vla_f32_to_bf16(e[p][u]);
					else ((float *)kc)[off + lane + 32 * u] = e[p][u];
				}
			}
		}
		return;
	}
	if (wid >= items) return; // other head dims: a head a warp (per is 1)
	const u64 t = wid / hpr;
	const int h = (int)(wid - t * hpr);
	if (CACHE && h >= qh + kh) { // a head of v: only copied
		const int hv = h - qh - kh;
		if (vc) vla_cache_store(vc, cdt, ((at + t) * kh + hv) * hd, v + (t * kh + hv) * hd, hd, lane);
		return;
	}
	float *r;
	const void *w;
	int wdt;
	if (h < qh) {
		r = q + (t * qh + h) * hd;
		w = qw;
		wdt = qwdt;
	} else {
		r = k + (t * kh + (h - qh)) * hd;
		w = kw;
		wdt = kwdt;
	}
	vla_rmsnorm_warp(r, r, w, wdt, hd, eps, lane);
	__syncwarp(); // the rotation pairs elements other lanes normalized
	const int half = hd / 2;
	const float *ct = cs + t * half, *st = sn + t * half;
	for (int i = lane; i < half; i += 32) {
		const float c = ct[i], sv = st[i];
		const float u = r[i], v2 = r[i + half];
		r[i] = __fsub_rn(__fmul_rn(u, c), __fmul_rn(v2, sv));
		r[i + half] = __fadd_rn(__fmul_rn(v2, c), __fmul_rn(u, sv));
	}
	if (CACHE && h >= qh && kc) {
		__syncwarp(); // the row as rotated by every lane
		vla_cache_store(kc, cdt, ((at + t) * kh + (h - qh)) * hd, r, hd, lane);
	}
}

extern "C" __global__ void vla_qk_norm_rope(float *q, float *k, const void *__restrict__ qw, int qwdt,
                                            const void *__restrict__ kw, int kwdt, const float *__restrict__ cs,
                                            const float *__restrict__ sn, u64 rows, int qh, int kh, int hd,
                                            float eps, int per) {
	vla_pdl_enter();
	vla_qk_norm_rope_t<false>(q, k, 0, qw, qwdt, kw, kwdt, cs, sn, rows, qh, kh, hd, eps, 0, 0, 0, 0, 0, 0, per);
}

extern "C" __global__ void vla_qk_norm_rope_cache(float *q, float *k, const float *v, const void *__restrict__ qw,
                                                  int qwdt, const void *__restrict__ kw, int kwdt,
                                                  const float *__restrict__ cs, const float *__restrict__ sn,
                                                  u64 rows, int qh, int kh, int hd, float eps, void *kc, void *vc,
                                                  int cdt, u64 at, const int *pos_at, u64 crows, int launch,
                                                  int per) {
	vla_pdl_launch_enter_if(launch); // a decode step's attention loads its old rows while this runs
	vla_qk_norm_rope_t<true>(q, k, v, qw, qwdt, kw, kwdt, cs, sn, rows, qh, kh, hd, eps, kc, vc, cdt, at, pos_at,
	                         crows, per);
}
