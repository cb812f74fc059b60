// rope.cu: rotate-half (NeoX) rotary embeddings in place. x is
// [rows, heads*hd], cos and sin are [rows, hd/2]. Each product is rounded
// before the sum (no fused multiply-add), as the cpu backend computes it.

extern "C" __global__ void vla_rope(float *x, const float *__restrict__ cs, const float *__restrict__ sn, u64 rows,
                                    int heads, int hd) {
	const int half = hd / 2;
	VLA_FOR(idx, rows * heads * half) {
		const u64 i = idx % half;
		const u64 th = idx / half; // row * heads + head
		const u64 t = th / heads;
		float *r = x + th * hd;
		const float c = cs[t * half + i], s = sn[t * half + i];
		const float u = r[i], v = r[i + half];
		r[i] = __fsub_rn(__fmul_rn(u, c), __fmul_rn(v, s));
		r[i + half] = __fadd_rn(__fmul_rn(v, c), __fmul_rn(u, s));
	}
}
