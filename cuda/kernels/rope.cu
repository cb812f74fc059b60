// rope.cu: rotate-half (NeoX) rotary embeddings in place. x is
// [rows, heads*hd], cos and sin are [rows, hd/2]. Each product is rounded
// before the sum (no fused multiply-add), as the cpu backend computes it.
// Blocks take rows in turn (grid-stride), threads the (head, i) pairs of a
// row: 32-bit index arithmetic only.

extern "C" __global__ void vla_rope(float *x, const float *__restrict__ cs, const float *__restrict__ sn, u64 rows,
                                    int heads, int hd) {
	vla_pdl_enter();
	const int half = hd / 2, per_row = heads * half;
	for (u64 t = blockIdx.x; t < rows; t += gridDim.x) {
		float *xr = x + t * (u64)heads * hd;
		const float *ct = cs + t * half, *st = sn + t * half;
		for (int k = threadIdx.x; k < per_row; k += blockDim.x) {
			const int h = k / half, i = k - h * half;
			float *r = xr + h * hd;
			const float c = ct[i], s = st[i];
			const float u = r[i], v = r[i + half];
			r[i] = __fsub_rn(__fmul_rn(u, c), __fmul_rn(v, s));
			r[i + half] = __fadd_rn(__fmul_rn(v, c), __fmul_rn(u, s));
		}
	}
}
