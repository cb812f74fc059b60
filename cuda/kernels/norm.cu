// norm.cu: RMSNorm and LayerNorm, one block per row of n elements. The
// weight and bias may be F32, F16 or BF16 (wdt, bdt); a null bias is none.
// y may be x (each element is read and written by the same thread after
// the reductions). Sums are accumulated in double and the scale rounded to
// float as the cpu backend does, so the two agree to the last bit or two.

// y = w · (x · rsqrt(mean(x²) + eps))
extern "C" __global__ void vla_rmsnorm(float *y, const float *x, const void *__restrict__ w, int wdt, int n,
                                       float eps) {
	__shared__ double sh[32];
	const float *xr = x + (u64)blockIdx.x * n;
	float *yr = y + (u64)blockIdx.x * n;
	double ss = 0.0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
	ss = vla_block_sum_d(ss, sh);
	const float ms = (float)(ss / (double)n);
	const float s = (float)(1.0 / sqrt((double)(ms + eps)));
	for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __fmul_rn(vla_load(w, wdt, i), __fmul_rn(xr[i], s));
}

// y = (x - mean) · rsqrt(var + eps) · w + b, with the biased variance.
extern "C" __global__ void vla_layernorm(float *y, const float *x, const void *__restrict__ w, int wdt,
                                         const void *__restrict__ b, int bdt, int n, float eps) {
	__shared__ double sh[32];
	const float *xr = x + (u64)blockIdx.x * n;
	float *yr = y + (u64)blockIdx.x * n;
	double s = 0.0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) s += (double)xr[i];
	const double mean = vla_block_sum_d(s, sh) / (double)n;
	double v = 0.0;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		const double d = (double)xr[i] - mean;
		v += d * d;
	}
	v = vla_block_sum_d(v, sh);
	const double r = (double)(float)(1.0 / sqrt((double)((float)(v / (double)n) + eps)));
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float o = __fmul_rn((float)(((double)xr[i] - mean) * r), vla_load(w, wdt, i));
		if (b != 0) o = __fadd_rn(o, vla_load(b, bdt, i));
		yr[i] = o;
	}
}
