// rope.cu: rotate-half (NeoX) rotary embeddings in place. x is
// [rows, heads*hd], cos and sin are [rows, hd/2]. Each product is rounded
// before the sum (no fused multiply-add), as the cpu backend computes it.
//
// When hd/2 is a multiple of 4 and x, cos and sin are 16-byte aligned (Go
// sizes the grid for that, as for the elementwise kernels), a thread takes
// 4 consecutive i of one (row, head): four float4 loads (u, v, cos, sin)
// in flight, two float4 stores, over a grid-stride loop of (row, head,
// i/4) items. One block per row with one (head, i) pair per thread and
// scalar loads took 48.8 µs for the vision encoder's x [11520, 1152] (hd
// 72) on the H200, ~2.2 TB/s of the ~4 this pass could reach: 576 pairs a
// row on 256 threads is three passes, the last a quarter busy, with 4
// bytes a load in flight a thread.
// Other shapes take that path still: blocks take rows in turn
// (grid-stride), threads the (head, i) pairs of a row.

// vla_rope4 is the float4 path over items = rows·heads·(half/4), the index
// arithmetic in I: u32 where the items fit, as they do for every model
// here (a division by a runtime value takes a few times the instructions
// in u64).
template <typename I>
__device__ __forceinline__ void vla_rope4(float *x, const float *__restrict__ cs, const float *__restrict__ sn, I items,
                                          int heads, int hd) {
	const int half = hd / 2, q4 = half / 4;
	const I per_row = (I)heads * q4;
	for (I k = (I)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += (I)gridDim.x * blockDim.x) {
		const I t = k / per_row;
		const int rem = (int)(k - t * per_row), h = rem / q4, i = 4 * (rem - h * q4);
		float *r = x + ((u64)t * heads + h) * hd + i;
		float4 u = *(const float4 *)r, v = *(const float4 *)(r + half);
		const float4 c = *(const float4 *)(cs + (u64)t * half + i), s = *(const float4 *)(sn + (u64)t * half + i);
		vla_rope_pair(u.x, v.x, c.x, s.x);
		vla_rope_pair(u.y, v.y, c.y, s.y);
		vla_rope_pair(u.z, v.z, c.z, s.z);
		vla_rope_pair(u.w, v.w, c.w, s.w);
		*(float4 *)r = u;
		*(float4 *)(r + half) = v;
	}
}

extern "C" __global__ void vla_rope(float *x, const float *__restrict__ cs, const float *__restrict__ sn, u64 rows,
                                    int heads, int hd) {
	vla_pdl_enter();
	const int half = hd / 2, per_row = heads * half;
	if (half % 4 == 0 && (((u64)x | (u64)cs | (u64)sn) & 15) == 0) {
		const u64 items = rows * (u64)(per_row / 4);
		if (items <= 0x7fffffffu) // k + the grid's stride stays below 2^32
			vla_rope4<u32>(x, cs, sn, (u32)items, heads, hd);
		else
			vla_rope4<u64>(x, cs, sn, items, heads, hd);
		return;
	}
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
