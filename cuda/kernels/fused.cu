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

// Per-head RMSNorm then rotary embedding of q [rows, qh·hd] and k [rows,
// kh·hd], in place: vla_rmsnorm_rows on each head (qw for q, kw for k),
// then vla_rope, one warp per head of a row. cos and sin are [rows, hd/2].
extern "C" __global__ void vla_qk_norm_rope(float *q, float *k, const void *__restrict__ qw, int qwdt,
                                            const void *__restrict__ kw, int kwdt, const float *__restrict__ cs,
                                            const float *__restrict__ sn, u64 rows, int qh, int kh, int hd,
                                            float eps) {
	const u64 wid = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31, hpr = qh + kh;
	if (wid >= rows * (u64)hpr) return;
	const u64 t = wid / hpr;
	const int h = (int)(wid - t * hpr);
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
	double ss = 0.0;
	for (int i = lane; i < hd; i += 32) ss += (double)r[i] * (double)r[i];
	ss = vla_warp_sum_d(ss);
	const float ms = (float)(ss / (double)hd);
	const float s = (float)(1.0 / sqrt((double)(ms + eps)));
	for (int i = lane; i < hd; i += 32) r[i] = __fmul_rn(vla_load(w, wdt, i), __fmul_rn(r[i], s));
	__syncwarp(); // the rotation pairs elements other lanes normalized
	const int half = hd / 2;
	const float *ct = cs + t * half, *st = sn + t * half;
	for (int i = lane; i < half; i += 32) {
		const float c = ct[i], sv = st[i];
		const float u = r[i], v = r[i + half];
		r[i] = __fsub_rn(__fmul_rn(u, c), __fmul_rn(v, sv));
		r[i + half] = __fadd_rn(__fmul_rn(v, c), __fmul_rn(u, sv));
	}
}
