// attention.cu: softmax(q·kᵀ·scale + mask)·v without a Tq×NKV score matrix.
// One block per (query row, head) streams over its visible keys in tiles:
// a warp per key computes the scores of a tile, then every thread keeps a
// running maximum, a running sum of weights and its share of the weighted
// values, rescaled whenever the maximum grows (online softmax).
//
// q is [Tq, heads*hd], k and v [>= nkv, kvheads*hd], out [Tq, heads*hd].
// Query head h reads KV head h / (heads/kvheads) (grouped-query attention).
// Visible keys of query i: those of its segment when segments are given,
// with causal set at most qpos0+i, and never those of [mask_from, mask_to)
// (when mask_to > mask_from): at most two ranges of keys.

#define VLA_ATT_THREADS 128
#define VLA_ATT_TILE 64         // keys scored per step
#define VLA_ATT_DIMS_PER_THREAD 4 // head dims up to 4*128 = 512
#define VLA_ATT_MAX_BOUNDS 513    // segment boundaries: up to 512 segments

// Segment boundaries [0, s1, ..., nkv], passed by value (n == 0: none).
struct vla_segments {
	int n;
	int b[VLA_ATT_MAX_BOUNDS];
};

extern "C" __global__ void __launch_bounds__(VLA_ATT_THREADS)
    vla_attention(float *__restrict__ out, const float *__restrict__ q, const float *__restrict__ k,
                  const float *__restrict__ v, int heads, int kvheads, int hd, int nkv, float scale, int causal,
                  int qpos0, int mask_from, int mask_to, vla_segments segs) {
	vla_pdl_enter();
	extern __shared__ float sh[];
	float *qs = sh;     // [hd]: this query row and head
	float *s = sh + hd; // [VLA_ATT_TILE]: scores, then weights, of a tile

	const int i = blockIdx.x, h = blockIdx.y;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int nwarps = VLA_ATT_THREADS / 32;
	const int kvh = h / (heads / kvheads);
	const u64 qstride = (u64)heads * hd, kstride = (u64)kvheads * hd;

	const float *qrow = q + (u64)i * qstride + (u64)h * hd;
	for (int d = tid; d < hd; d += VLA_ATT_THREADS) qs[d] = qrow[d];

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
	// The visible keys less the mask: [lo, hi0) and [lo1, hi).
	int hi0 = hi, lo1 = hi;
	if (mask_to > mask_from && mask_to > lo && mask_from < hi) {
		hi0 = max(lo, mask_from);
		lo1 = min(hi, mask_to);
	}
	__syncthreads();

	float m = VLA_NEG_INF, l = 0.0f;
	float acc[VLA_ATT_DIMS_PER_THREAD];
#pragma unroll
	for (int c = 0; c < VLA_ATT_DIMS_PER_THREAD; c++) acc[c] = 0.0f;

	const float *kbase = k + (u64)kvh * hd;
	const float *vbase = v + (u64)kvh * hd;
	for (int part = 0; part < 2; part++) { // the keys before the mask, then after it
		const int plo = part == 0 ? lo : lo1, phi = part == 0 ? hi0 : hi;
		for (int j0 = plo; j0 < phi; j0 += VLA_ATT_TILE) {
			const int nb = min(VLA_ATT_TILE, phi - j0);
			for (int jj = warp; jj < nb; jj += nwarps) {
				const float *krow = kbase + (u64)(j0 + jj) * kstride;
				float dot = 0.0f;
				for (int d = lane; d < hd; d += 32) dot += qs[d] * krow[d];
				dot = vla_warp_sum(dot);
				if (lane == 0) s[jj] = dot * scale;
			}
			__syncthreads();
			float mt = VLA_NEG_INF;
			for (int jj = 0; jj < nb; jj++) mt = fmaxf(mt, s[jj]);
			const float mnew = fmaxf(m, mt);
			const float corr = expf(m - mnew); // 0 on the first tile
			__syncthreads();                   // every thread has read the scores
			if (tid < nb) s[tid] = expf(s[tid] - mnew);
			__syncthreads();
			float ps = 0.0f;
			for (int jj = 0; jj < nb; jj++) ps += s[jj];
			l = l * corr + ps;
#pragma unroll
			for (int c = 0; c < VLA_ATT_DIMS_PER_THREAD; c++) {
				const int d = tid + c * VLA_ATT_THREADS;
				if (d < hd) {
					float a = acc[c] * corr;
					const float *vcol = vbase + (u64)j0 * kstride + d;
					for (int jj = 0; jj < nb; jj++) a += s[jj] * vcol[(u64)jj * kstride];
					acc[c] = a;
				}
			}
			m = mnew;
			__syncthreads(); // before the next tile overwrites s
		}
	}

	const float inv = l > 0.0f ? 1.0f / l : 0.0f;
	float *orow = out + (u64)i * qstride + (u64)h * hd;
#pragma unroll
	for (int c = 0; c < VLA_ATT_DIMS_PER_THREAD; c++) {
		const int d = tid + c * VLA_ATT_THREADS;
		if (d < hd) orow[d] = acc[c] * inv;
	}
}
