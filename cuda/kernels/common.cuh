// common.cuh: definitions shared by every vlanode kernel. The kernels are
// compiled by NVRTC at run time (see kernels.go) as one program: this file
// first, then every *.cu file in name order. No CUDA header is included, so
// NVRTC needs no include path; bf16 and f16 are handled as raw bits.
//
// Conventions: every kernel is extern "C" and named vla_*; tensors are
// row-major; element counts are unsigned long long; activations are float.
// Launch shapes are chosen in Go (kernelset.go); kernels use blockDim.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// Element types, numbered as tensor.DType in Go.
#define VLA_F32 1
#define VLA_F16 2
#define VLA_BF16 3

// -infinity (math.h's INFINITY is not there without headers).
#define VLA_NEG_INF __int_as_float(0xff800000)

// bf16 <-> f32. The rounding is to nearest, ties to even, exactly as
// tensor.F32ToBF16 in Go.
__device__ __forceinline__ float vla_bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

__device__ __forceinline__ u16 vla_f32_to_bf16(float f) {
	u32 u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u); // NaN stays NaN
	u += 0x7fffu + ((u >> 16) & 1u);
	return (u16)(u >> 16);
}

// f16 <-> f32 with the PTX conversions (round to nearest even).
__device__ __forceinline__ float vla_f16_to_f32(u16 h) {
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}

__device__ __forceinline__ u16 vla_f32_to_f16(float f) {
	u16 h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

// vla_load reads element i of a tensor of type dt as float.
__device__ __forceinline__ float vla_load(const void *p, int dt, u64 i) {
	switch (dt) {
	case VLA_BF16: return vla_bf16_to_f32(((const u16 *)p)[i]);
	case VLA_F16: return vla_f16_to_f32(((const u16 *)p)[i]);
	default: return ((const float *)p)[i];
	}
}

// Grid-stride loop over [0, n).
#define VLA_FOR(i, n) for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

// vla_warp_sum adds v over the 32 lanes of a warp; every lane gets the sum.
__device__ __forceinline__ float vla_warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ double vla_warp_sum_d(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// vla_block_sum_d adds v over the block (at most 32 warps); every thread
// gets the sum. sh holds 32 doubles of shared memory, reusable after return.
__device__ double vla_block_sum_d(double v, double *sh) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int nwarps = (blockDim.x + 31) >> 5;
	v = vla_warp_sum_d(v);
	__syncthreads(); // sh may still be read by a previous call
	if (lane == 0) sh[warp] = v;
	__syncthreads();
	v = lane < nwarps ? sh[lane] : 0.0;
	return vla_warp_sum_d(v);
}
