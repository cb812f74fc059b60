// norm.cu: RMSNorm and LayerNorm, one block per row of n elements. The
// weight and bias may be F32, F16 or BF16 (wdt, bdt); a null bias is none.
// y may be x (each element is read and written by the same thread after
// the reductions). Sums are accumulated in double and the scale rounded to
// float as the cpu backend does, so the two agree to the last bit or two.

// y = w · (x · rsqrt(mean(x²) + eps)), as float (vla_rmsnorm) or rounded
// to bf16 / f16 (vla_rmsnorm_bf16, _f16: as vla_f32_to_bf16 / _f16 would
// round vla_rmsnorm's output; a norm whose only reader is a cuBLAS product
// writes that product's input directly: RMSNormMatMuls, RMSNormMLP).
template <typename T, bool F16>
__device__ __forceinline__ void vla_rmsnorm_t(T *y, const float *x, const void *__restrict__ w, int wdt, int n,
                                              float eps) {
	__shared__ double sh[32];
	const float *xr = x + (u64)blockIdx.x * n;
	T *yr = y + (u64)blockIdx.x * n;
	double ss = vla_norm_sumsq<false>((float *)xr, 0, n);
	ss = vla_block_sum_d(ss, sh);
	const float ms = (float)(ss / (double)n);
	const float s = (float)(1.0 / sqrt((double)(ms + eps)));
	vla_norm_scale<T, F16>(yr, xr, w, wdt, n, s);
}

extern "C" __global__ void vla_rmsnorm(float *y, const float *x, const void *__restrict__ w, int wdt, int n,
                                       float eps) {
	vla_pdl_launch_enter(); // ahead of a GEMV
	vla_rmsnorm_t<float, false>(y, x, w, wdt, n, eps);
}

extern "C" __global__ void vla_rmsnorm_bf16(u16 *y, const float *x, const void *__restrict__ w, int wdt, int n,
                                            float eps) {
	vla_pdl_launch_enter(); // ahead of a GEMV
	vla_rmsnorm_t<u16, false>(y, x, w, wdt, n, eps);
}

extern "C" __global__ void vla_rmsnorm_f16(u16 *y, const float *x, const void *__restrict__ w, int wdt, int n,
                                           float eps) {
	vla_pdl_launch_enter(); // ahead of a GEMV
	vla_rmsnorm_t<u16, true>(y, x, w, wdt, n, eps);
}

// y = (x - mean) · rsqrt(var + eps) · w + b, with the biased variance.
extern "C" __global__ void vla_layernorm(float *y, const float *x, const void *__restrict__ w, int wdt,
                                         const void *__restrict__ b, int bdt, int n, float eps) {
	vla_pdl_enter();
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

// Short rows (n <= 1024: per-head q/k norms, the vision encoder's 1152 is
// not one): one warp per row, 8 rows per block of 256 threads, the same
// float and double steps as above without a block-wide reduction.

// vla_rmsnorm_rows is vla_rmsnorm for `rows` rows of n, a warp each.
extern "C" __global__ void vla_rmsnorm_rows(float *y, const float *x, const void *__restrict__ w, int wdt, int n,
                                            float eps, u64 rows) {
	vla_pdl_enter();
	const u64 row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (row >= rows) return;
	vla_rmsnorm_warp(y + row * n, x + row * n, w, wdt, n, eps, lane);
}

// vla_layernorm_rows is vla_layernorm for `rows` rows of n, a warp each.
extern "C" __global__ void vla_layernorm_rows(float *y, const float *x, const void *__restrict__ w, int wdt,
                                              const void *__restrict__ b, int bdt, int n, float eps, u64 rows) {
	vla_pdl_enter();
	const u64 row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	if (row >= rows) return;
	const float *xr = x + row * n;
	float *yr = y + row * n;
	double s = 0.0;
	for (int i = lane; i < n; i += 32) s += (double)xr[i];
	const double mean = vla_warp_sum_d(s) / (double)n;
	double v = 0.0;
	for (int i = lane; i < n; i += 32) {
		const double d = (double)xr[i] - mean;
		v += d * d;
	}
	v = vla_warp_sum_d(v);
	const double r = (double)(float)(1.0 / sqrt((double)((float)(v / (double)n) + eps)));
	for (int i = lane; i < n; i += 32) {
		float o = __fmul_rn((float)(((double)xr[i] - mean) * r), vla_load(w, wdt, i));
		if (b != 0) o = __fadd_rn(o, vla_load(b, bdt, i));
		yr[i] = o;
	}
}
