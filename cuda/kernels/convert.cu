// convert.cu: float activations to a weight's element type, so that cuBLAS
// can multiply them (cublasGemmEx needs A and B of one type).

extern "C" __global__ void vla_f32_to_bf16(u16 *__restrict__ y, const float *__restrict__ x, u64 n) {
	VLA_FOR(i, n) y[i] = vla_f32_to_bf16(x[i]);
}

// vla_rows_at_bf16 and vla_rows_at_f32 copy rows × cols floats into dst
// [dst_rows, cols] from row *pos on (the decode step's KV cache rows, at a
// position in device memory); rows that would pass dst_rows are dropped
// (the caller checks the position where it sets it).
extern "C" __global__ void vla_rows_at_bf16(u16 *__restrict__ dst, const float *__restrict__ src,
                                            const int *__restrict__ pos, u64 rows, u64 cols, u64 dst_rows) {
	const u64 at = (u64)*pos;
	if (at + rows > dst_rows) return;
	VLA_FOR(i, rows * cols) dst[at * cols + i] = vla_f32_to_bf16(src[i]);
}

extern "C" __global__ void vla_rows_at_f32(float *__restrict__ dst, const float *__restrict__ src,
                                           const int *__restrict__ pos, u64 rows, u64 cols, u64 dst_rows) {
	const u64 at = (u64)*pos;
	if (at + rows > dst_rows) return;
	VLA_FOR(i, rows * cols) dst[at * cols + i] = src[i];
}

extern "C" __global__ void vla_f32_to_f16(u16 *__restrict__ y, const float *__restrict__ x, u64 n) {
	VLA_FOR(i, n) y[i] = vla_f32_to_f16(x[i]);
}

// vla_add_bias adds bias [cols] (of type bdt) to every row of y [rows, cols].
extern "C" __global__ void vla_add_bias(float *__restrict__ y, const void *__restrict__ bias, int bdt, u64 rows,
                                        u64 cols) {
	VLA_FOR(i, rows * cols) y[i] += vla_load(bias, bdt, i % cols);
}
