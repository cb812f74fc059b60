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

// Short rows (n <= 1024: per-head q/k norms; the vision encoder's 1152
// takes vla_layernorm_reg below): one warp per row, 8 rows per block of
// 256 threads, the same float and double steps as above without a
// block-wide reduction.

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

// Rows of warpRowMax < n <= 1536 (the vision encoder's LayerNorms of
// 1152), n a multiple of 4 and 16-byte aligned rows: one warp per row, 8
// rows per block of 256 threads, the row held in registers. Lane l loads
// float4s l, l+32, ... of the row (NV4 = ceil(n/128) of them), every load
// issued before the first is used, so x is read from memory once and not
// three times; the sums are the warp's, in double, and each element is
// then computed as vla_layernorm does. vla_layernorm took 69 µs for
// [11520, 1152] on the H200 (three passes over the row, two block-wide
// double reductions), where reading and writing 53 MB each takes ~30.
// The sums are in a different order from vla_layernorm's, so the two
// agree to float rounding, not bit for bit.
//
// y16, when not null, also receives each output rounded to bf16
// (vla_f32_to_bf16) at the same index: the next product's input (four a
// store where y16 is 8-byte aligned); y may then be null, for a norm that
// only the products read (backend.Fused's LayerNormMatMuls and
// LayerNormGELUMLP). 70 to 84 registers a thread for NV4 = 9 to 12, no
// local memory.

// vla_layernorm1w is one output element of vla_layernorm before its bias
// (added with __fadd_rn): x normalized, times its weight wi.
__device__ __forceinline__ float vla_layernorm1w(float x, double mean, double r, float wi) {
	return __fmul_rn((float)(((double)x - mean) * r), wi);
}

template <int NV4>
__device__ __forceinline__ void vla_layernorm_reg(float *y, u16 *y16, const float *x, const void *__restrict__ w,
                                                  int wdt, const void *__restrict__ b, int bdt, int n, float eps,
                                                  u64 rows) {
	const u64 row = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31, n4 = n >> 2;
	if (row >= rows) return;
	const float4 *xr = (const float4 *)(x + row * n);
	float4 v[NV4];
#pragma unroll
	for (int j = 0; j < NV4; j++) {
		const int k = j * 32 + lane;
		if (k < n4) {
			v[j] = xr[k];
		} else {
			v[j].x = v[j].y = v[j].z = v[j].w = 0.0f; // adds nothing to the sum
		}
	}
	// One double sum per component (four independent chains of adds).
	double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma unroll
	for (int j = 0; j < NV4; j++) {
		s0 += (double)v[j].x;
		s1 += (double)v[j].y;
		s2 += (double)v[j].z;
		s3 += (double)v[j].w;
	}
	const double mean = vla_warp_sum_d((s0 + s1) + (s2 + s3)) / (double)n;
	// An empty asm that "changes" the row: without it the compiler keeps
	// the sum's 4·NV4 conversions to double live across the shuffles (two
	// registers each) rather than convert again, 105 registers a thread
	// instead of 70 for NV4 = 9 (2 blocks an SM instead of 3).
#pragma unroll
	for (int j = 0; j < NV4; j++) asm volatile("" : "+f"(v[j].x), "+f"(v[j].y), "+f"(v[j].z), "+f"(v[j].w));
	s0 = s1 = s2 = s3 = 0.0;
#pragma unroll
	for (int j = 0; j < NV4; j++) {
		if (j * 32 + lane < n4) {
			const double dx = (double)v[j].x - mean, dy = (double)v[j].y - mean;
			const double dz = (double)v[j].z - mean, dw = (double)v[j].w - mean;
			s0 += dx * dx;
			s1 += dy * dy;
			s2 += dz * dz;
			s3 += dw * dw;
		}
	}
	const double var = vla_warp_sum_d((s0 + s1) + (s2 + s3));
	const double r = (double)(float)(1.0 / sqrt((double)((float)(var / (double)n) + eps)));
	float4 *yr = y != 0 ? (float4 *)(y + row * n) : 0;
	u16 *hr = y16 != 0 ? y16 + row * n : 0;
	const bool h8 = ((u64)y16 & 7) == 0; // 4 bf16 in one 8-byte store
	// The weight and bias four at a time (n is a multiple of 4).
	const bool w4 = vla_load4_ok(w, wdt), b4 = b == 0 || vla_load4_ok(b, bdt);
#pragma unroll
	for (int j = 0; j < NV4; j++) {
		const int k = j * 32 + lane, i = 4 * k;
		if (k < n4) {
			const float4 wv = vla_load4(w, wdt, i, w4);
			float4 o;
			o.x = vla_layernorm1w(v[j].x, mean, r, wv.x);
			o.y = vla_layernorm1w(v[j].y, mean, r, wv.y);
			o.z = vla_layernorm1w(v[j].z, mean, r, wv.z);
			o.w = vla_layernorm1w(v[j].w, mean, r, wv.w);
			if (b != 0) {
				const float4 bv = vla_load4(b, bdt, i, b4);
				o.x = __fadd_rn(o.x, bv.x);
				o.y = __fadd_rn(o.y, bv.y);
				o.z = __fadd_rn(o.z, bv.z);
				o.w = __fadd_rn(o.w, bv.w);
			}
			if (yr != 0) yr[k] = o;
			if (hr != 0) {
				const u16 hx = vla_f32_to_bf16(o.x), hy = vla_f32_to_bf16(o.y);
				const u16 hz = vla_f32_to_bf16(o.z), hw = vla_f32_to_bf16(o.w);
				if (h8) {
					uint2 p;
					p.x = (u32)hx | ((u32)hy << 16);
					p.y = (u32)hz | ((u32)hw << 16);
					*(uint2 *)(hr + i) = p;
				} else {
					hr[i] = hx;
					hr[i + 1] = hy;
					hr[i + 2] = hz;
					hr[i + 3] = hw;
				}
			}
		}
	}
}

// vla_layernorm_reg_<NV4> is vla_layernorm_reg for rows of n with
// ceil(n/128) = NV4 (9 to 12: 1028 <= n <= 1536).
#define VLA_LAYERNORM_REG_KERNEL(name, NV4)                                                                        \
	extern "C" __global__ void name(float *y, u16 *y16, const float *x, const void *__restrict__ w, int wdt,       \
	                                const void *__restrict__ b, int bdt, int n, float eps, u64 rows) {             \
		vla_pdl_enter();                                                                                           \
		vla_layernorm_reg<NV4>(y, y16, x, w, wdt, b, bdt, n, eps, rows);                                           \
	}

VLA_LAYERNORM_REG_KERNEL(vla_layernorm_reg_9, 9)
VLA_LAYERNORM_REG_KERNEL(vla_layernorm_reg_10, 10)
VLA_LAYERNORM_REG_KERNEL(vla_layernorm_reg_11, 11)
VLA_LAYERNORM_REG_KERNEL(vla_layernorm_reg_12, 12)
