// decode.cu: attention for a few queries over a long KV cache (decoding),
// split over the keys (flash decoding) so that 8 KV heads × 1 query still
// fill every SM, and the merge of split results (also used by flash.cu).
// Float32 arithmetic throughout: decoding moves bytes, not FLOPs; K and V
// are float or bf16 (vla_attn_decode_bf16).
//
// vla_attn_decode: grid (split, kv head, query). A block takes 32 keys
// [32·split, ...) of one KV head for one query row and all G =
// heads/kvheads query heads that read that KV head (GQA: the cache is read
// once for the group). Each of its 4 warps loads the K and V rows of 8
// keys at once (lane l holds dims 4l..4l+3: 16 float4 loads in flight, one
// memory round trip per block), scores them against the G query heads,
// and after a softmax over the block's 32 keys adds its share of P·V; the
// warps' sums meet in shared memory. The block writes its unnormalized O
// and its maximum (base 2) and sum; vla_attn_combine merges the splits.
// Visibility is that of vla_attention (attention.cu). hd <= 128,
// hd % 4 == 0, G <= 8 (checked in Go).

#define VLA_DEC_THREADS 128
// Blocks an SM must hold at once: the 768 blocks of a 3,072-key cache × 8
// KV heads then run in one wave on an H100/H200 (132 SMs; at 95 registers a
// thread, 5 fit and a second wave took 2/5 of the kernel's time).
#define VLA_DEC_MIN_BLOCKS 6
#define VLA_DEC_WARPS (VLA_DEC_THREADS / 32)
#define VLA_DEC_MAX_G 8
#define VLA_DEC_KEYS 8                               // keys per warp
#define VLA_DEC_CHUNK (VLA_DEC_WARPS * VLA_DEC_KEYS) // keys per block: 32, one per lane in the softmax

// vla_dec_raw holds 4 loaded K or V elements as they are in memory until
// their use (bf16 in half the registers of float: the kernel then fits
// its register cap without spilling); vla_dec_f4 turns them into floats,
// exactly.
template <typename T> struct vla_dec_raw {
	typedef float4 type;
};
template <> struct vla_dec_raw<u16> {
	typedef uint2 type;
};
__device__ __forceinline__ float4 vla_ld_raw(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ uint2 vla_ld_raw(const u16 *p) { return *(const uint2 *)p; }
__device__ __forceinline__ float4 vla_dec_f4(float4 x) { return x; }
__device__ __forceinline__ float4 vla_dec_f4(uint2 w) {
	float4 r;
	r.x = __uint_as_float(w.x << 16);
	r.y = __uint_as_float(w.x & 0xffff0000u);
	r.z = __uint_as_float(w.y << 16);
	r.w = __uint_as_float(w.y & 0xffff0000u);
	return r;
}

// vla_dec_scatter_sum sums each of the C values of v over the warp's 32
// lanes, as vla_warp_sum would (the same pairs in the same order: xor 16,
// 8, 4, 2, 1), but reduce-scatter: at each step a lane keeps half of its
// values and sends the other half, so the sums take about C shuffles, not
// 5·C. Afterwards value k's sum is in v[0] of the lanes whose bits above
// the last log2(C) steps' select it (see vla_attn_decode_t).
template <int C> __device__ __forceinline__ void vla_dec_scatter_sum(float *v, int lane) {
	int c = C;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		if (c > 1) {
			const bool up = lane & o;
#pragma unroll
			for (int i = 0; i < C / 2; i++) {
				if (i < c / 2) {
					const float keep = up ? v[i + c / 2] : v[i], send = up ? v[i] : v[i + c / 2];
					v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
				}
			}
			c /= 2;
		} else {
			v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
		}
	}
}

// vla_dec_qk is a decode step's q/k norms, rotary embedding and cache
// store, done by vla_attn_decode_bf16_g4_qk itself (QKNormRopeCache ahead
// of AttentionAt, fused): k and v are the step's rows as the products left
// them ([kvheads · 128] floats; q, the kernel's q, likewise), qw and kw the
// norms' weights (loaded before the wait for the kernel ahead with wearly:
// no kernel or copy writes them), cs and sn the step's rotary tables (64
// floats each).
struct vla_dec_qk {
	const float *k, *v;
	const void *qw, *kw;
	int qwdt, kwdt;
	const float *cs, *sn;
	float eps;
	int wearly;
};

// vla_attn_decode_t waits for the kernel ahead itself (vla_pdl_enter):
// first, or, with early (only with pos_at), once it has issued the loads of
// the K and V rows below the queries' position. With QKF (one query at
// *pos_at, hd 128, bf16 caches; checked in Go), q and the new key and value
// come raw and this kernel does vla_qk_norm_rope_cache's work on them (f):
// warp r normalizes and rotates query head r of the group into shared
// memory, and the block whose split holds the position does the group's K
// head, stores its K and V rows into the caches k and v and uses them as
// the cache would give them: every value the bits that kernel would leave.
template <typename T, int GT, bool QKF = false>
__device__ __forceinline__ void vla_attn_decode_t(float *__restrict__ part_o, float *__restrict__ part_ml,
                                                  const float *__restrict__ q, const T *__restrict__ k,
                                                  const T *__restrict__ v, int heads, int kvheads, int hd, int tq,
                                                  int nkv, float sl2, int causal, int qpos0, int mask_from,
                                                  int mask_to, const vla_segments &segs, const int *pos_at,
                                                  int early, const vla_dec_qk &f) {
	constexpr int QG = GT > 0 ? GT : VLA_DEC_MAX_G;        // query heads held
	__shared__ float s[QG][VLA_DEC_CHUNK];                        // scores, then weights
	__shared__ __align__(16) float red[VLA_DEC_WARPS][QG][128]; // the warps' partial P·V
	__shared__ float ms[VLA_DEC_MAX_G], ls[VLA_DEC_MAX_G];
	__shared__ __align__(16) float qkn[QKF ? QG + 1 : 1][QKF ? 128 : 1]; // QKF: the group's q heads, then its k head
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int split = blockIdx.x, kvh = blockIdx.y, i = blockIdx.z;
	const int G = GT > 0 ? GT : heads / kvheads; // GT: the group size at compile time
	const u64 qstride = (u64)heads * hd, kstride = (u64)kvheads * hd;
	if (!early) vla_pdl_enter();
	const int ncap = nkv; // with pos_at, the rows of the caches
	if (pos_at) {
		// The queries' position comes from device memory (one graph serves
		// every decode step): the grid covers the largest nkv, and the
		// splits past this step's keys have nothing to do (nor does
		// vla_attn_combine read them). With early, the rows below it
		// (earlier steps') are loaded before the wait for the kernel ahead,
		// which writes the queries and the rows from qpos0 on; no kernel
		// writes *pos_at (AttentionAt).
		qpos0 = *pos_at;
		nkv = qpos0 + tq;
		if (split * VLA_DEC_CHUNK >= nkv) {
			if (early) vla_pdl_enter();
			return;
		}
	}

	int lo = 0, hi = nkv;
	if (segs.n > 1) {
		int a = 0, z = segs.n - 1; // find a with b[a] <= i < b[a+1]
		while (z - a > 1) {
			const int m = (a + z) / 2;
			if (segs.b[m] <= i) a = m;
			else z = m;
		}
		lo = segs.b[a];
		hi = segs.b[a + 1];
	}
	if (causal) hi = min(hi, qpos0 + i + 1);
	const bool hasmask = mask_to > mask_from;
	const bool dl = lane * 4 < hd; // this lane holds dims 4·lane..4·lane+3
	float4 zero4;
	zero4.x = zero4.y = zero4.z = zero4.w = 0.0f;

	// All of this warp's loads first: its 8 keys' K and V rows, then q.
	const int jw = split * VLA_DEC_CHUNK + warp * VLA_DEC_KEYS;
	const T *kb = k + (u64)kvh * hd + lane * 4, *vb = v + (u64)kvh * hd + lane * 4;
	typedef typename vla_dec_raw<T>::type raw;
	raw kv[VLA_DEC_KEYS], vv[VLA_DEC_KEYS];
	const raw zraw{}; // zeros
	bool vis[VLA_DEC_KEYS];
	const int jnow = early ? qpos0 : nkv; // rows below jnow are loaded before the wait
#pragma unroll
	for (int u = 0; u < VLA_DEC_KEYS; u++) {
		const int j = jw + u;
		vis[u] = j < nkv && j >= lo && j < hi && !(hasmask && j >= mask_from && j < mask_to);
		kv[u] = (vis[u] && dl && j < jnow) ? vla_ld_raw(kb + (u64)j * kstride) : zraw;
		vv[u] = (vis[u] && dl && j < jnow) ? vla_ld_raw(vb + (u64)j * kstride) : zraw;
	}
	float4 qr[QG];
	if (QKF) {
		// The norms' weights (before the wait with wearly); then the query
		// heads, and the new key and value where this split holds them
		// (the warp whose keys they are).
		float wq[4], wk[4];
		const auto loadW = [&]() {
#pragma unroll
			for (int u = 0; u < 4; u++) {
				wq[u] = vla_load(f.qw, f.qwdt, lane + 32 * u);
				wk[u] = vla_load(f.kw, f.kwdt, lane + 32 * u);
			}
		};
		if (f.wearly) loadW();
		vla_pdl_enter();
		if (!f.wearly) loadW();
		float c[2], sv[2];
#pragma unroll
		for (int u = 0; u < 2; u++) {
			c[u] = f.cs[lane + 32 * u];
			sv[u] = f.sn[lane + 32 * u];
		}
		for (int r = warp; r < G; r += VLA_DEC_WARPS) {
			float e[4];
#pragma unroll
			for (int u = 0; u < 4; u++) e[u] = q[(u64)(kvh * G + r) * 128 + lane + 32 * u];
			vla_qk_head128(e, wq, c, sv, f.eps);
#pragma unroll
			for (int u = 0; u < 4; u++) qkn[r][lane + 32 * u] = e[u];
		}
		const int un = qpos0 - jw; // the new key's place among the warp's keys
		if (un >= 0 && un < VLA_DEC_KEYS) {
			float e[4], ev[4];
#pragma unroll
			for (int u = 0; u < 4; u++) {
				e[u] = f.k[(u64)kvh * 128 + lane + 32 * u];
				ev[u] = f.v[(u64)kvh * 128 + lane + 32 * u];
			}
			vla_qk_head128(e, wk, c, sv, f.eps);
			u16 *kr = (u16 *)k + (u64)qpos0 * kstride + (u64)kvh * 128, *vr = (u16 *)v + (u64)qpos0 * kstride + (u64)kvh * 128;
#pragma unroll
			for (int u = 0; u < 4; u++) {
				qkn[QG][lane + 32 * u] = e[u];
				if (qpos0 < ncap) { // as vla_qk_norm_rope_cache: no row past the caches
					kr[lane + 32 * u] = vla_f32_to_bf16(e[u]);
					vr[lane + 32 * u] = vla_f32_to_bf16(ev[u]);
				}
			}
		}
		__syncthreads();
#pragma unroll
		for (int r = 0; r < QG; r++) qr[r] = r < G ? *(const float4 *)&qkn[r][lane * 4] : zero4;
		if (un >= 0 && un < VLA_DEC_KEYS) {
			// The new key and value as the cache holds them now.
			const float4 kf = *(const float4 *)&qkn[QG][lane * 4];
			const float4 vf = *(const float4 *)(f.v + (u64)kvh * 128 + lane * 4);
			const uint2 kp = make_uint2((u32)vla_f32_to_bf16(kf.x) | (u32)vla_f32_to_bf16(kf.y) << 16,
			                            (u32)vla_f32_to_bf16(kf.z) | (u32)vla_f32_to_bf16(kf.w) << 16);
			const uint2 vp = make_uint2((u32)vla_f32_to_bf16(vf.x) | (u32)vla_f32_to_bf16(vf.y) << 16,
			                            (u32)vla_f32_to_bf16(vf.z) | (u32)vla_f32_to_bf16(vf.w) << 16);
#pragma unroll
			for (int u = 0; u < VLA_DEC_KEYS; u++) {
				if (u == un && vis[u]) {
					kv[u] = *(const raw *)&kp;
					vv[u] = *(const raw *)&vp;
				}
			}
		}
	} else {
		if (early) {
			vla_pdl_enter();
#pragma unroll
			for (int u = 0; u < VLA_DEC_KEYS; u++) {
				const int j = jw + u;
				if (vis[u] && dl && j >= jnow) {
					kv[u] = vla_ld_raw(kb + (u64)j * kstride);
					vv[u] = vla_ld_raw(vb + (u64)j * kstride);
				}
			}
		}
#pragma unroll
		for (int r = 0; r < QG; r++)
			qr[r] = (r < G && dl) ? *(const float4 *)(q + (u64)i * qstride + (u64)(kvh * G + r) * hd + lane * 4) : zero4;
	}

	if (GT > 0 && VLA_DEC_KEYS * GT <= 32) {
		// Every lane's partial products of the 8 keys × GT heads, then
		// their sums over the warp scattered: value u·GT + r ends in the
		// lanes whose top bits are u·GT + r (32 / (8·GT) lanes each).
		constexpr int C = VLA_DEC_KEYS * (GT > 0 ? GT : 1);
		float d[C];
#pragma unroll
		for (int u = 0; u < VLA_DEC_KEYS; u++) {
			const float4 kf = vla_dec_f4(kv[u]);
#pragma unroll
			for (int r = 0; r < C / VLA_DEC_KEYS; r++)
				d[u * (C / VLA_DEC_KEYS) + r] = qr[r].x * kf.x + qr[r].y * kf.y + qr[r].z * kf.z + qr[r].w * kf.w;
		}
		vla_dec_scatter_sum<C>(d, lane);
		constexpr int per = 32 / C; // lanes holding each sum
		if (lane % per == 0) {
			const int idx = lane / per, u = idx / (C / VLA_DEC_KEYS), r = idx % (C / VLA_DEC_KEYS);
			s[r][warp * VLA_DEC_KEYS + u] = vis[u] ? d[0] * sl2 : VLA_NEG_INF;
		}
	} else {
#pragma unroll
		for (int u = 0; u < VLA_DEC_KEYS; u++) {
#pragma unroll
			for (int r = 0; r < QG; r++) {
				if (r < G) {
					const float4 kf = vla_dec_f4(kv[u]);
					float d = qr[r].x * kf.x + qr[r].y * kf.y + qr[r].z * kf.z + qr[r].w * kf.w;
					d = vla_warp_sum(d);
					if (lane == 0) s[r][warp * VLA_DEC_KEYS + u] = vis[u] ? d * sl2 : VLA_NEG_INF;
				}
			}
		}
	}
	__syncthreads();

	// Softmax over the block's 32 keys: one warp per query head, one key
	// per lane.
	for (int r = warp; r < G; r += VLA_DEC_WARPS) {
		const float x = s[r][lane];
		const float m = vla_warp_max(x);
		const float p = exp2f(x - (m == VLA_NEG_INF ? 0.0f : m));
		s[r][lane] = p;
		const float l = vla_warp_sum(p);
		if (lane == 0) {
			ms[r] = m;
			ls[r] = l;
		}
	}
	__syncthreads();

#pragma unroll
	for (int r = 0; r < QG; r++) {
		if (r < G) {
			float4 acc = zero4;
#pragma unroll
			for (int u = 0; u < VLA_DEC_KEYS; u++) {
				const float p = s[r][warp * VLA_DEC_KEYS + u];
				const float4 vf = vla_dec_f4(vv[u]);
				acc.x += p * vf.x;
				acc.y += p * vf.y;
				acc.z += p * vf.z;
				acc.w += p * vf.w;
			}
			*(float4 *)&red[warp][r][lane * 4] = acc;
		}
	}
	__syncthreads();
	const u64 rows = (u64)tq * heads;
	for (int e = tid; e < G * hd; e += VLA_DEC_THREADS) {
		const int r = e / hd, d = e % hd;
		float sum = 0.0f;
#pragma unroll
		for (int w = 0; w < VLA_DEC_WARPS; w++) sum += red[w][r][d];
		part_o[((u64)split * rows + (u64)i * heads + kvh * G + r) * hd + d] = sum;
	}
	if (tid < G) {
		const u64 row = (u64)split * rows + (u64)i * heads + kvh * G + tid;
		part_ml[2 * row] = ms[tid];
		part_ml[2 * row + 1] = ls[tid];
	}
}

// vla_attn_decode reads float K and V; vla_attn_decode_bf16 bf16 ones.
// With pos_at (not null), qpos0 is *pos_at and nkv is *pos_at + tq; the
// nkv argument is then the largest it may be, which sized the grid.
extern "C" __global__ void __launch_bounds__(VLA_DEC_THREADS)
    vla_attn_decode(float *__restrict__ part_o, float *__restrict__ part_ml, const float *__restrict__ q,
                    const float *__restrict__ k, const float *__restrict__ v, int heads, int kvheads, int hd, int tq,
                    int nkv, float sl2, int causal, int qpos0, int mask_from, int mask_to, vla_segments segs,
                    const int *pos_at, int early) {
	vla_attn_decode_t<float, 0>(part_o, part_ml, q, k, v, heads, kvheads, hd, tq, nkv, sl2, causal, qpos0, mask_from,
	                            mask_to, segs, pos_at, early, vla_dec_qk{});
}

// vla_attn_decode_bf16_gN are for G = heads/kvheads = N (checked in Go),
// with N query heads' registers instead of VLA_DEC_MAX_G and the dot
// products' sums scattered over the lanes; the same bits as the generic
// kernels.
#define VLA_DEC_BF16_KERNEL(name, GT, MINB)                                                                            \
	extern "C" __global__ void __launch_bounds__(VLA_DEC_THREADS, MINB)                                                   \
	    name(float *__restrict__ part_o, float *__restrict__ part_ml, const float *__restrict__ q,                  \
	         const u16 *__restrict__ k, const u16 *__restrict__ v, int heads, int kvheads, int hd, int tq, int nkv,  \
	         float sl2, int causal, int qpos0, int mask_from, int mask_to, vla_segments segs, const int *pos_at,    \
	         int early) {                                                                                       \
		vla_attn_decode_t<u16, GT>(part_o, part_ml, q, k, v, heads, kvheads, hd, tq, nkv, sl2, causal, qpos0,     \
		                           mask_from, mask_to, segs, pos_at, early, vla_dec_qk{});                          \
	}

VLA_DEC_BF16_KERNEL(vla_attn_decode_bf16, 0, 1) // any G up to 8: too many registers to fit 6
VLA_DEC_BF16_KERNEL(vla_attn_decode_bf16_g1, 1, VLA_DEC_MIN_BLOCKS)
VLA_DEC_BF16_KERNEL(vla_attn_decode_bf16_g2, 2, VLA_DEC_MIN_BLOCKS)
VLA_DEC_BF16_KERNEL(vla_attn_decode_bf16_g4, 4, VLA_DEC_MIN_BLOCKS)

// vla_attn_decode_bf16_g4_qk is vla_attn_decode_bf16_g4 for one query at
// *pos_at (early) that also does vla_qk_norm_rope_cache's work (f): q, f.k
// and f.v as the products left them, the K and V rows at *pos_at written
// into k and v (vla_dec_qk).
extern "C" __global__ void __launch_bounds__(VLA_DEC_THREADS, VLA_DEC_MIN_BLOCKS)
    vla_attn_decode_bf16_g4_qk(float *__restrict__ part_o, float *__restrict__ part_ml, const float *__restrict__ q,
                               u16 *k, u16 *v, int heads, int kvheads, int hd, int tq, int nkv, float sl2, int causal,
                               int qpos0, int mask_from, int mask_to, vla_segments segs, const int *pos_at, int early,
                               vla_dec_qk f) {
	vla_attn_decode_t<u16, 4, true>(part_o, part_ml, q, k, v, heads, kvheads, hd, tq, nkv, sl2, causal, qpos0, mask_from,
	                                mask_to, segs, pos_at, early, f);
}

// vla_attn_combine merges nsplit partial results of rows (query, head):
// out = Σ_z 2^(m_z - M)·o_z / Σ_z 2^(m_z - M)·l_z with M = max_z m_z; a row
// no split saw a key of gets zeros. One block of 256 threads per row: the
// weights first, then each warp sums every 8th split (lane l holds dims
// 4l..4l+3, four splits' loads in flight) and the 8 warps' sums meet in
// shared memory. out is [tq, heads*hd], part_o [nsplit][tq*heads][hd],
// part_ml [nsplit][tq*heads][2]; hd <= 128, hd % 4 == 0, nsplit <=
// VLA_COMB_MAX_SPLITS. With pos_at (vla_attn_decode's), only the splits
// that hold keys [0, *pos_at + tq) are merged: the same splits, in the
// same order, as a launch with that nkv. out16, when not null, gets out
// rounded to bf16 too (the next product's input: gpu.twin).
#define VLA_COMB_THREADS 256
#define VLA_COMB_WARPS (VLA_COMB_THREADS / 32)
#define VLA_COMB_MAX_SPLITS 4096
#define VLA_COMB_HELD 16 // splits a warp holds in registers (the one-round-trip path)

extern "C" __global__ void __launch_bounds__(VLA_COMB_THREADS)
    vla_attn_combine(float *__restrict__ out, u16 *__restrict__ out16, const float *__restrict__ part_o,
                     const float *__restrict__ part_ml, int nsplit, int tq, int heads, int hd, const int *pos_at) {
	vla_pdl_launch_enter(); // ahead of a GEMV
	__shared__ float w[VLA_COMB_MAX_SPLITS];
	__shared__ __align__(16) float acc[VLA_COMB_WARPS][128];
	__shared__ float red[VLA_COMB_WARPS];
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const u64 rows = (u64)tq * heads, row = blockIdx.x;
	const bool dl = lane * 4 < hd;
	float4 zero4;
	zero4.x = zero4.y = zero4.z = zero4.w = 0.0f;

	// Up to VLA_COMB_WARPS·VLA_COMB_HELD splits (a 4,096-key cache), every
	// load is issued at once, before the position is known: the thread's
	// split's m and l, the warp's splits' partial O (the buffers hold
	// nsplit splits; those past the position are loaded and not used).
	const int nmax = nsplit;
	const bool held = nmax <= VLA_COMB_WARPS * VLA_COMB_HELD;
	float4 o[VLA_COMB_HELD];
	float mt = VLA_NEG_INF, lt = 0.0f;
	if (held) {
#pragma unroll
		for (int u = 0; u < VLA_COMB_HELD; u++) {
			const int z = warp + u * VLA_COMB_WARPS;
			o[u] = z < nmax && dl ? *(const float4 *)(part_o + (z * rows + row) * hd + lane * 4) : zero4;
		}
		if (tid < nmax) {
			mt = part_ml[2 * (tid * rows + row)];
			lt = part_ml[2 * (tid * rows + row) + 1];
		}
	}
	if (pos_at) nsplit = min(nsplit, (*pos_at + tq + VLA_DEC_CHUNK - 1) / VLA_DEC_CHUNK);

	float m = VLA_NEG_INF;
	if (held) m = tid < nsplit ? mt : VLA_NEG_INF;
	else
		for (int z = tid; z < nsplit; z += VLA_COMB_THREADS) m = fmaxf(m, part_ml[2 * (z * rows + row)]);
	m = vla_warp_max(m);
	if (lane == 0) red[warp] = m;
	__syncthreads();
	float M = VLA_NEG_INF;
#pragma unroll
	for (int i = 0; i < VLA_COMB_WARPS; i++) M = fmaxf(M, red[i]);
	__syncthreads(); // red is reused below

	float L = 0.0f;
	if (held) {
		if (tid < nsplit) {
			const float wz = mt == VLA_NEG_INF ? 0.0f : exp2f(mt - M);
			w[tid] = wz;
			L = wz * lt;
		}
	} else {
		for (int z = tid; z < nsplit; z += VLA_COMB_THREADS) {
			const float mz = part_ml[2 * (z * rows + row)];
			const float wz = mz == VLA_NEG_INF ? 0.0f : exp2f(mz - M);
			w[z] = wz;
			L += wz * part_ml[2 * (z * rows + row) + 1];
		}
	}
	L = vla_warp_sum(L);
	if (lane == 0) red[warp] = L;
	__syncthreads(); // also publishes w
	L = 0.0f;
#pragma unroll
	for (int i = 0; i < VLA_COMB_WARPS; i++) L += red[i];
	const float inv = L > 0.0f ? 1.0f / L : 0.0f;

	// The warp's splits in increasing order, each weighted.
	float4 a = zero4;
	if (held) {
#pragma unroll
		for (int u = 0; u < VLA_COMB_HELD; u++) {
			const int z = warp + u * VLA_COMB_WARPS;
			if (z < nsplit) {
				const float wz = w[z];
				a.x += wz * o[u].x;
				a.y += wz * o[u].y;
				a.z += wz * o[u].z;
				a.w += wz * o[u].w;
			}
		}
	} else {
		for (int z0 = warp; z0 < nsplit; z0 += 4 * VLA_COMB_WARPS) {
			float4 p[4];
			float wz[4];
#pragma unroll
			for (int u = 0; u < 4; u++) {
				const int z = z0 + u * VLA_COMB_WARPS;
				wz[u] = z < nsplit ? w[z] : 0.0f;
				p[u] = z < nsplit && dl ? *(const float4 *)(part_o + (z * rows + row) * hd + lane * 4) : zero4;
			}
#pragma unroll
			for (int u = 0; u < 4; u++) {
				a.x += wz[u] * p[u].x;
				a.y += wz[u] * p[u].y;
				a.z += wz[u] * p[u].z;
				a.w += wz[u] * p[u].w;
			}
		}
	}
	*(float4 *)&acc[warp][lane * 4] = a;
	__syncthreads();
	for (int d = tid; d < hd; d += VLA_COMB_THREADS) {
		float sum = 0.0f;
#pragma unroll
		for (int i = 0; i < VLA_COMB_WARPS; i++) sum += acc[i][d];
		out[row * hd + d] = sum * inv;
		if (out16) out16[row * hd + d] = vla_f32_to_bf16(sum * inv);
	}
}

// vla_attn_combine_rows_NS are vla_attn_combine for up to NS splits and no
// pos_at, one warp a row (VLA_COMB_WARPS rows a block) rather than a block:
// the many rows of few splits that flash attention leaves (the action
// expert's 64 queries × 16 heads over 16 splits). Lane z holds split z's
// maximum and sum; lane l dims 4l..4l+3 of every split's O, all loaded at
// once. The sums are vla_attn_combine's, in its order (warp i of its block
// summed splits i, i+8, …, then the warps' sums were added in order; its
// sum of weights was warp 0's): the same bits.
template <int NS>
__device__ __forceinline__ void vla_attn_combine_rows_t(float *__restrict__ out, u16 *__restrict__ out16,
                                                        const float *__restrict__ part_o,
                                                        const float *__restrict__ part_ml, int nsplit, int tq,
                                                        int heads, int hd) {
	static_assert(NS <= 32 && NS % VLA_COMB_WARPS == 0, "a lane holds one split's weight");
	const int lane = threadIdx.x & 31;
	const u64 rows = (u64)tq * heads, row = (u64)blockIdx.x * VLA_COMB_WARPS + (threadIdx.x >> 5);
	if (row >= rows) return;
	const bool dl = lane * 4 < hd;
	float4 zero4;
	zero4.x = zero4.y = zero4.z = zero4.w = 0.0f;
	float4 o[NS];
#pragma unroll
	for (int z = 0; z < NS; z++) o[z] = z < nsplit && dl ? *(const float4 *)(part_o + (z * rows + row) * hd + lane * 4) : zero4;
	float mt = VLA_NEG_INF, lt = 0.0f;
	if (lane < nsplit) {
		mt = part_ml[2 * (lane * rows + row)];
		lt = part_ml[2 * (lane * rows + row) + 1];
	}
	const float M = vla_warp_max(mt);
	float wz = 0.0f, L = 0.0f;
	if (lane < nsplit) {
		wz = mt == VLA_NEG_INF ? 0.0f : exp2f(mt - M);
		L = wz * lt;
	}
	L = vla_warp_sum(L);
	const float inv = L > 0.0f ? 1.0f / L : 0.0f;
	float4 sum = zero4;
#pragma unroll
	for (int i = 0; i < VLA_COMB_WARPS; i++) {
		float4 a = zero4;
#pragma unroll
		for (int z = i; z < NS; z += VLA_COMB_WARPS) {
			if (z < nsplit) {
				const float w = __shfl_sync(0xffffffffu, wz, z);
				a.x += w * o[z].x;
				a.y += w * o[z].y;
				a.z += w * o[z].z;
				a.w += w * o[z].w;
			}
		}
		sum.x += a.x;
		sum.y += a.y;
		sum.z += a.z;
		sum.w += a.w;
	}
	if (!dl) return;
	float4 r;
	r.x = sum.x * inv;
	r.y = sum.y * inv;
	r.z = sum.z * inv;
	r.w = sum.w * inv;
	*(float4 *)(out + row * hd + lane * 4) = r;
	if (out16) {
		uint2 pk;
		pk.x = (u32)vla_f32_to_bf16(r.x) | ((u32)vla_f32_to_bf16(r.y) << 16);
		pk.y = (u32)vla_f32_to_bf16(r.z) | ((u32)vla_f32_to_bf16(r.w) << 16);
		*(uint2 *)(out16 + row * hd + lane * 4) = pk;
	}
}

#define VLA_COMB_ROWS_KERNEL(name, NS)                                                                                \
	extern "C" __global__ void __launch_bounds__(VLA_COMB_THREADS)                                                    \
	    name(float *__restrict__ out, u16 *__restrict__ out16, const float *__restrict__ part_o,                     \
	         const float *__restrict__ part_ml, int nsplit, int tq, int heads, int hd) {                              \
		vla_pdl_launch_enter(); /* ahead of a product */                                                          \
		vla_attn_combine_rows_t<NS>(out, out16, part_o, part_ml, nsplit, tq, heads, hd);                            \
	}

VLA_COMB_ROWS_KERNEL(vla_attn_combine_rows_16, 16)
VLA_COMB_ROWS_KERNEL(vla_attn_combine_rows_32, 32)
