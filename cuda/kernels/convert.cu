// convert.cu: float activations to a weight's element type, so that cuBLAS
// can multiply them (cublasGemmEx needs A and B of one type).

// vla_f32_to_bf16 and vla_f32_to_f16 round n floats: four a thread and
// step (16 bytes in, 8 out) when n is a multiple of 4 and x 16-byte and y
// 8-byte aligned, else one; the launch grid is sized for that in Go.
template <bool F16> __device__ __forceinline__ u32 vla_round16(float f) {
	return F16 ? (u32)vla_f32_to_f16(f) : (u32)vla_f32_to_bf16(f);
}

template <bool F16> __device__ __forceinline__ void vla_f32_to_16(u16 *__restrict__ y, const float *__restrict__ x, u64 n) {
	if (n % 4 == 0 && ((u64)x & 15) == 0 && ((u64)y & 7) == 0) {
		VLA_FOR(i, n / 4) {
			const float4 v = ((const float4 *)x)[i];
			uint2 o;
			o.x = vla_round16<F16>(v.x) | (vla_round16<F16>(v.y) << 16);
			o.y = vla_round16<F16>(v.z) | (vla_round16<F16>(v.w) << 16);
			((uint2 *)y)[i] = o;
		}
		return;
	}
	VLA_FOR(i, n) y[i] = (u16)vla_round16<F16>(x[i]);
}

extern "C" __global__ void vla_f32_to_bf16(u16 *__restrict__ y, const float *__restrict__ x, u64 n) {
	vla_pdl_enter();
	vla_f32_to_16<false>(y, x, n);
}

extern "C" __global__ void vla_f32_to_f16(u16 *__restrict__ y, const float *__restrict__ x, u64 n) {
	vla_pdl_enter();
	vla_f32_to_16<true>(y, x, n);
}

// vla_to_f32 widens n elements of type dt to float (exactly): a 16-bit
// bias as a float product's cuBLASLt epilogue takes it.
extern "C" __global__ void vla_to_f32(float *__restrict__ y, const void *__restrict__ x, int dt, u64 n) {
	vla_pdl_enter();
	VLA_FOR(i, n) y[i] = vla_load(x, dt, i);
}

// vla_rows_at_bf16 and vla_rows_at_f32 copy rows × cols floats into dst
// [dst_rows, cols] from row *pos on (the decode step's KV cache rows, at a
// position in device memory); rows that would pass dst_rows are dropped
// (the caller checks the position where it sets it).
extern "C" __global__ void vla_rows_at_bf16(u16 *__restrict__ dst, const float *__restrict__ src,
                                            const int *__restrict__ pos, u64 rows, u64 cols, u64 dst_rows) {
	vla_pdl_enter();
	const u64 at = (u64)*pos;
	if (at + rows > dst_rows) return;
	VLA_FOR(i, rows * cols) dst[at * cols + i] = vla_f32_to_bf16(src[i]);
}

extern "C" __global__ void vla_rows_at_f32(float *__restrict__ dst, const float *__restrict__ src,
                                           const int *__restrict__ pos, u64 rows, u64 cols, u64 dst_rows) {
	vla_pdl_enter();
	const u64 at = (u64)*pos;
	if (at + rows > dst_rows) return;
	VLA_FOR(i, rows * cols) dst[at * cols + i] = src[i];
}

// vla_add_bias adds bias [cols] (of type bdt) to every row of y [rows,
// cols]; with act 1 (2) it then applies the exact (tanh) GELU, as
// vla_gelu computes it. Four elements a thread and step when cols is a
// multiple of 4 and y 16-byte aligned, else one: the same arithmetic.
__device__ __forceinline__ float vla_bias_act1(float y, const void *__restrict__ bias, int bdt, u64 c, int act);

extern "C" __global__ void vla_add_bias(float *__restrict__ y, const void *__restrict__ bias, int bdt, u64 rows,
                                        u64 cols, int act) {
	vla_pdl_enter();
	const u64 n = rows * cols;
	if (cols % 4 == 0 && ((u64)y & 15) == 0) {
		const u64 c4 = cols / 4;
		VLA_FOR(i, n / 4) {
			const u64 c = 4 * (i % c4);
			float4 v = ((float4 *)y)[i];
			v.x = vla_bias_act1(v.x, bias, bdt, c, act);
			v.y = vla_bias_act1(v.y, bias, bdt, c + 1, act);
			v.z = vla_bias_act1(v.z, bias, bdt, c + 2, act);
			v.w = vla_bias_act1(v.w, bias, bdt, c + 3, act);
			((float4 *)y)[i] = v;
		}
		return;
	}
	VLA_FOR(i, n) y[i] = vla_bias_act1(y[i], bias, bdt, i % cols, act);
}

// vla_bias_residual adds h + bias (by row; a null bias is none) to the
// residual stream x [rows, cols]: x = x + (h + b), the two sums rounded
// as MatMul's bias and Add round them.
extern "C" __global__ void vla_bias_residual(float *__restrict__ x, const float *__restrict__ h,
                                             const void *__restrict__ bias, int bdt, u64 rows, u64 cols) {
	vla_pdl_enter();
	const u64 n = rows * cols;
	if (cols % 4 == 0 && (((u64)x | (u64)h) & 15) == 0) {
		const u64 c4 = cols / 4;
		VLA_FOR(i, n / 4) {
			const u64 c = 4 * (i % c4);
			float4 v = ((const float4 *)h)[i], r = ((float4 *)x)[i];
			if (bias != 0) {
				v.x += vla_load(bias, bdt, c);
				v.y += vla_load(bias, bdt, c + 1);
				v.z += vla_load(bias, bdt, c + 2);
				v.w += vla_load(bias, bdt, c + 3);
			}
			r.x += v.x;
			r.y += v.y;
			r.z += v.z;
			r.w += v.w;
			((float4 *)x)[i] = r;
		}
		return;
	}
	VLA_FOR(i, n) {
		float v = h[i];
		if (bias != 0) v += vla_load(bias, bdt, i % cols);
		x[i] += v;
	}
}
