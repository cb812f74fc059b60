// elementwise.cu: Add, SiLU, SiLUMul and GELU. SiLU is evaluated in double
// and rounded to float, as the cpu backend does; GELU in float (vla_gelu1).
//
// Each kernel moves 16 bytes per load (four elements a thread and step)
// when n is a multiple of 4 and every pointer is 16-byte aligned (the
// launch grid is sized for that in Go), else one element at a time: the
// same arithmetic either way.

// vla_vec4 says whether n and the pointers allow float4 accesses.
__device__ __forceinline__ bool vla_vec4(u64 n, const void *a, const void *b, const void *c) {
	return n % 4 == 0 && (((u64)a | (u64)b | (u64)c) & 15) == 0;
}

__device__ __forceinline__ float vla_silu1(float x) {
	const double v = x;
	return (float)(v / (1.0 + exp(-v)));
}

// vla_gelu1 is evaluated in float, as PyTorch evaluates GELU for bf16
// tensors: in double (the cpu backend) the vision tower's 27 GELUs of
// 11,520 × 4,304 elements took 6.6 ms of its 56 on the H200. It agrees
// with the cpu backend within 2e-6 relative (TestGPUElementwise).
__device__ __forceinline__ float vla_gelu1(float x, int tanh_approx) {
	const float sqrt_2_over_pi = 0.7978845608028654f;
	const float inv_sqrt2 = 0.7071067811865476f;
	if (tanh_approx) return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
	return 0.5f * x * erfcf(-x * inv_sqrt2);
}

extern "C" __global__ void vla_add(float *d, const float *a, const float *b, u64 n) {
	vla_pdl_enter();
	if (vla_vec4(n, d, a, b)) {
		VLA_FOR(i, n / 4) {
			const float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
			float4 r;
			r.x = x.x + y.x;
			r.y = x.y + y.y;
			r.z = x.z + y.z;
			r.w = x.w + y.w;
			((float4 *)d)[i] = r;
		}
		return;
	}
	VLA_FOR(i, n) d[i] = a[i] + b[i];
}

// d = silu(x) = x / (1 + e^-x).
extern "C" __global__ void vla_silu(float *d, const float *x, u64 n) {
	vla_pdl_enter();
	if (vla_vec4(n, d, x, x)) {
		VLA_FOR(i, n / 4) {
			const float4 v = ((const float4 *)x)[i];
			float4 r;
			r.x = vla_silu1(v.x);
			r.y = vla_silu1(v.y);
			r.z = vla_silu1(v.z);
			r.w = vla_silu1(v.w);
			((float4 *)d)[i] = r;
		}
		return;
	}
	VLA_FOR(i, n) d[i] = vla_silu1(x[i]);
}

// vla_silu_mul: d = silu(g) * u, silu(g) = g / (1 + e^-g). vla_silu_mul_bf16
// and vla_silu_mul_f16 round the result to 16 bits as vla_f32_to_bf16
// (f16) rounds it: the input of the next cuBLAS product (backend.Fused's
// SwiGLUDown). When n is a multiple of 4 and the pointers are aligned for
// it (g and u 16 bytes; d 16 bytes, or 8 in 16 bits), a thread takes four
// elements at a time, VLA_SILU_U groups of them a step with every load
// issued before the first is used (gate and up are read once: streamed past
// the caches); else one element at a time.
#define VLA_SILU_U 4
struct vla_silu_mul4_f32 {
	__device__ __forceinline__ float4 operator()(float4 x, float4 y) const {
		float4 r;
		r.x = vla_silu1(x.x) * y.x;
		r.y = vla_silu1(x.y) * y.y;
		r.z = vla_silu1(x.z) * y.z;
		r.w = vla_silu1(x.w) * y.w;
		return r;
	}
};
template <bool F16> struct vla_silu_mul4_16 {
	__device__ __forceinline__ uint2 operator()(float4 x, float4 y) const {
		uint2 o;
		o.x = vla_round16<F16>(vla_silu1(x.x) * y.x) | (vla_round16<F16>(vla_silu1(x.y) * y.y) << 16);
		o.y = vla_round16<F16>(vla_silu1(x.z) * y.z) | (vla_round16<F16>(vla_silu1(x.w) * y.w) << 16);
		return o;
	}
};
// vla_silu_mul_steps writes d[i] = op(g4[i], u4[i]) for i < n4 in the
// steps above (the grid covers about n4 / VLA_SILU_U threads).
template <typename O, typename F>
__device__ __forceinline__ void vla_silu_mul_steps(O *d, const float4 *g4, const float4 *u4, u64 n4, F op) {
	const u64 step = (u64)gridDim.x * blockDim.x;
	u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
	for (; i + (VLA_SILU_U - 1) * step < n4; i += VLA_SILU_U * step) {
		float4 x[VLA_SILU_U], y[VLA_SILU_U];
#pragma unroll
		for (int k = 0; k < VLA_SILU_U; k++) {
			x[k] = __ldcs(g4 + i + k * step);
			y[k] = __ldcs(u4 + i + k * step);
		}
#pragma unroll
		for (int k = 0; k < VLA_SILU_U; k++) d[i + k * step] = op(x[k], y[k]);
	}
	for (; i < n4; i += step) d[i] = op(__ldcs(g4 + i), __ldcs(u4 + i));
}

extern "C" __global__ void vla_silu_mul(float *d, const float *g, const float *u, u64 n) {
	vla_pdl_enter();
	if (vla_vec4(n, d, g, u)) {
		vla_silu_mul_steps((float4 *)d, (const float4 *)g, (const float4 *)u, n / 4, vla_silu_mul4_f32());
		return;
	}
	VLA_FOR(i, n) d[i] = vla_silu1(g[i]) * u[i];
}

template <bool F16> __device__ __forceinline__ void vla_silu_mul_16(u16 *d, const float *g, const float *u, u64 n) {
	if (n % 4 == 0 && (((u64)g | (u64)u) & 15) == 0 && ((u64)d & 7) == 0) {
		vla_silu_mul_steps((uint2 *)d, (const float4 *)g, (const float4 *)u, n / 4, vla_silu_mul4_16<F16>());
		return;
	}
	VLA_FOR(i, n) d[i] = (u16)vla_round16<F16>(vla_silu1(g[i]) * u[i]);
}

extern "C" __global__ void vla_silu_mul_bf16(u16 *d, const float *g, const float *u, u64 n) {
	vla_pdl_enter();
	vla_silu_mul_16<false>(d, g, u, n);
}

extern "C" __global__ void vla_silu_mul_f16(u16 *d, const float *g, const float *u, u64 n) {
	vla_pdl_enter();
	vla_silu_mul_16<true>(d, g, u, n);
}

// d = gelu(x): exact x/2·erfc(-x/√2), or with tanh_approx set
// x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
extern "C" __global__ void vla_gelu(float *d, const float *x, u64 n, int tanh_approx) {
	vla_pdl_enter();
	if (vla_vec4(n, d, x, x)) {
		VLA_FOR(i, n / 4) {
			const float4 v = ((const float4 *)x)[i];
			float4 r;
			r.x = vla_gelu1(v.x, tanh_approx);
			r.y = vla_gelu1(v.y, tanh_approx);
			r.z = vla_gelu1(v.z, tanh_approx);
			r.w = vla_gelu1(v.w, tanh_approx);
			((float4 *)d)[i] = r;
		}
		return;
	}
	VLA_FOR(i, n) d[i] = vla_gelu1(x[i], tanh_approx);
}

// vla_bias_act1 is one element of vla_add_bias (convert.cu): y + bias[c]
// (a null bias is none), then GELU for act 1 (exact) or 2 (tanh).
__device__ __forceinline__ float vla_bias_act1(float y, const void *__restrict__ bias, int bdt, u64 c, int act) {
	if (bias != 0) y += vla_load(bias, bdt, c);
	return act == 0 ? y : vla_gelu1(y, act == 2);
}

// vla_add_bias_bf16 and vla_add_bias_f16 are vla_add_bias with the result
// written to d, rounded to 16 bits as vla_f32_to_bf16 (f16) rounds it, and
// y left as it is: the input of the next cuBLAS product (backend.Fused's
// GELUMLP). Four elements a thread and step when cols is a multiple of 4,
// y 16-byte and d 8-byte aligned, else one.
template <bool F16>
__device__ __forceinline__ void vla_add_bias_16(u16 *__restrict__ d, const float *__restrict__ y,
                                                const void *__restrict__ bias, int bdt, u64 rows, u64 cols, int act) {
	const u64 n = rows * cols;
	if (cols % 4 == 0 && ((u64)y & 15) == 0 && ((u64)d & 7) == 0) {
		const u64 c4 = cols / 4;
		VLA_FOR(i, n / 4) {
			const u64 c = 4 * (i % c4);
			const float4 v = ((const float4 *)y)[i];
			uint2 o;
			o.x = vla_round16<F16>(vla_bias_act1(v.x, bias, bdt, c, act)) |
			      (vla_round16<F16>(vla_bias_act1(v.y, bias, bdt, c + 1, act)) << 16);
			o.y = vla_round16<F16>(vla_bias_act1(v.z, bias, bdt, c + 2, act)) |
			      (vla_round16<F16>(vla_bias_act1(v.w, bias, bdt, c + 3, act)) << 16);
			((uint2 *)d)[i] = o;
		}
		return;
	}
	VLA_FOR(i, n) d[i] = (u16)vla_round16<F16>(vla_bias_act1(y[i], bias, bdt, i % cols, act));
}

extern "C" __global__ void vla_add_bias_bf16(u16 *__restrict__ d, const float *__restrict__ y,
                                             const void *__restrict__ bias, int bdt, u64 rows, u64 cols, int act) {
	vla_pdl_enter();
	vla_add_bias_16<false>(d, y, bias, bdt, rows, cols, act);
}

extern "C" __global__ void vla_add_bias_f16(u16 *__restrict__ d, const float *__restrict__ y,
                                            const void *__restrict__ bias, int bdt, u64 rows, u64 cols, int act) {
	vla_pdl_enter();
	vla_add_bias_16<true>(d, y, bias, bdt, rows, cols, act);
}

// vla_argmax writes to *idx sample.Greedy's choice among x[0, n) with
// the values at [mlo, mhi] taken as -inf: the lowest index of the largest
// value, no NaN's, -1 when every value is NaN. Each block takes a
// contiguous chunk: each thread scans its elements in order with Greedy's
// rule, and pairs meet by the larger value, the lower index on a tie (a
// rule whose result does not depend on the order pairs meet in). The
// blocks' pairs go to out + 2 (value bits, index); the last block to
// arrive (the counter out[1], left at zero) meets them. One block read
// the 623 KB of a decode step's logits at 20 GB/s (30 µs); a hundred
// share them.
#define VLA_ARGMAX_THREADS 256
#define VLA_ARGMAX_BLOCKS 128
__device__ __forceinline__ void vla_argmax_pair(float &v, int &i, float v2, int i2) {
	if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) {
		v = v2;
		i = i2;
	}
}
// vla_argmax_block meets the block's pairs; thread 0 gets the result. sv
// and si hold a value and an index a warp.
__device__ __forceinline__ void vla_argmax_block(float &bv, int &bi, float *sv, int *si) {
	for (int o = 16; o > 0; o >>= 1) {
		const float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
		const int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
		vla_argmax_pair(bv, bi, v2, i2);
	}
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0) {
		sv[warp] = bv;
		si[warp] = bi;
	}
	__syncthreads();
	if (warp == 0) {
		bv = lane < VLA_ARGMAX_THREADS / 32 ? sv[lane] : VLA_NEG_INF;
		bi = lane < VLA_ARGMAX_THREADS / 32 ? si[lane] : -1;
		for (int o = 16; o > 0; o >>= 1) {
			const float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
			const int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
			vla_argmax_pair(bv, bi, v2, i2);
		}
	}
}
extern "C" __global__ void __launch_bounds__(VLA_ARGMAX_THREADS)
    vla_argmax(int *out, int *idx, const float *__restrict__ x, int n, int mlo, int mhi) {
	vla_pdl_enter();
	__shared__ float sv[VLA_ARGMAX_THREADS / 32];
	__shared__ int si[VLA_ARGMAX_THREADS / 32];
	__shared__ int last;
	const int chunk = (n + gridDim.x - 1) / gridDim.x, j0 = blockIdx.x * chunk, j1 = min(n, j0 + chunk);
	float bv = VLA_NEG_INF;
	int bi = -1;
	for (int j = j0 + threadIdx.x; j < j1; j += VLA_ARGMAX_THREADS) {
		const float v = j >= mlo && j <= mhi ? VLA_NEG_INF : x[j];
		if (v > bv || (bi < 0 && v == v)) {
			bv = v;
			bi = j;
		}
	}
	vla_argmax_block(bv, bi, sv, si);
	int *part = out + 2;
	if (threadIdx.x == 0) {
		part[2 * blockIdx.x] = __float_as_int(bv);
		part[2 * blockIdx.x + 1] = bi;
		__threadfence();
		last = atomicAdd(out + 1, 1) == (int)gridDim.x - 1;
	}
	__syncthreads();
	if (!last) return;
	__threadfence();
	bv = VLA_NEG_INF;
	bi = -1;
	if (threadIdx.x < gridDim.x) {
		bv = __int_as_float(__ldcg(part + 2 * threadIdx.x));
		bi = __ldcg(part + 2 * threadIdx.x + 1);
	}
	__syncthreads(); // sv and si are reused
	vla_argmax_block(bv, bi, sv, si);
	if (threadIdx.x == 0) {
		*idx = bi;
		out[1] = 0;
	}
}
