// convert.cu: float activations to a weight's element type, so that cuBLAS
// can multiply them (cublasGemmEx needs A and B of one type).

extern "C" __global__ void vla_f32_to_bf16(u16 *__restrict__ y, const float *__restrict__ x, u64 n) {
	VLA_FOR(i, n) y[i] = vla_f32_to_bf16(x[i]);
}

extern "C" __global__ void vla_f32_to_f16(u16 *__restrict__ y, const float *__restrict__ x, u64 n) {
	VLA_FOR(i, n) y[i] = vla_f32_to_f16(x[i]);
}

// vla_add_bias adds bias [cols] (of type bdt) to every row of y [rows, cols].
extern "C" __global__ void vla_add_bias(float *__restrict__ y, const void *__restrict__ bias, int bdt, u64 rows,
                                        u64 cols) {
	VLA_FOR(i, rows * cols) y[i] += vla_load(bias, bdt, i % cols);
}
