// gemv_stream.cu: the decode GEMVs of gemv.cu (one row of x, a 16-bit
// weight) with the weight brought into shared memory by bulk copies
// (cp.async.bulk and mbarrier transaction counts, sm_90) instead of loaded
// by the warps. Every column is computed exactly as vla_gemv computes it
// (the same chunks for each lane, summed in the same order), so the bits
// are vla_gemv's, vla_gemv3's and vla_gemv_swiglu's.
//
// Why: a warp-per-column kernel can load only what its registers hold, and
// only once it is placed on an SM; its blocks are placed as the kernel
// ahead ends. Here one block an SM takes a range of columns and each warp
// keeps two steps of copies in flight (16 KB), issued by one lane and
// landing in shared memory without the warp waiting. With early (weights
// that no kernel writes), a block issues its first copies before it waits
// for the kernel ahead, so the first bytes arrive during the norm or
// attention kernel before it; and a warp lets the next kernel be placed
// once its last copy is issued. On the H200 the standard workload's decode
// took 104 ms against 111 ms with vla_gemv (bench/results/cuda-kernels.md
// run 13); alone, each product runs at about vla_gemv's speed.
//
// Work: the columns go in groups of two rows (a pair of columns; for
// gate·up, a column's gate and up rows), and a warp reads both rows of a
// group at once, each 16-byte chunk of x (read once from shared memory,
// rounded by the block up front) serving both: two independent sums for
// each lane, half the reads of x. A block takes a contiguous range of
// groups, its warp w every eighth from w. A group's rows go through in
// steps of one VLA_GSTREAM_PIECE of each row (a multiple of a warp's 32 ×
// 16 bytes, so a lane's chunks keep their order across steps); a warp's
// steps take its buffers in turn, and lane 0 refills a buffer with the
// step depth ahead once the warp has read it.

#define VLA_GSTREAM_WARPS 8    // warps a block
#define VLA_GSTREAM_ROWS 2     // rows a warp reads at once
#define VLA_GSTREAM_PIECE 4096 // bytes of a row a step (a slot)
#define VLA_GSTREAM_OPS 3
#define VLA_GSTREAM_THREADS (32 * VLA_GSTREAM_WARPS)
#define VLA_GSTREAM_NW_HELD 2 // chunks of 8 of a norm weight a thread loads ahead (K <= 4096)

// vla_gstream_args: up to three weights of one K that share x. Mode 0:
// y[i][n] = x·w[i][n] + bias[i][n]; mode 1: the same added to y (the
// residual stream; one op); mode 2: y[0][n] = silu(x·w[0][n])·(x·w[1][n])
// (gate and up, n[0] columns; no bias).
struct vla_gstream_args {
	const uint4 *w[VLA_GSTREAM_OPS];
	float *y[VLA_GSTREAM_OPS];
	const void *bias[VLA_GSTREAM_OPS];
	int bdt[VLA_GSTREAM_OPS];
	int n[VLA_GSTREAM_OPS];
	int mode;
	int slots; // ring slots, a multiple of VLA_GSTREAM_WARPS × VLA_GSTREAM_ROWS
	int pad;
};

#if __CUDACC_VER_MAJOR__ >= 12 && __CUDA_ARCH__ >= 900
#define VLA_HAS_BULK 1

__device__ __forceinline__ void vla_mbar_init(u32 bar, u32 count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// vla_mbar_expect arrives on bar, telling it to expect bytes more of copies.
__device__ __forceinline__ void vla_mbar_expect(u32 bar, u32 bytes) {
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// vla_mbar_wait waits until phase parity of bar has completed.
__device__ __forceinline__ void vla_mbar_wait(u32 bar, u32 parity) {
	asm volatile("{\n"
	             ".reg .pred p;\n"
	             "WAIT_%=:\n"
	             "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
	             "@!p bra WAIT_%=;\n"
	             "}" ::"r"(bar),
	             "r"(parity)
	             : "memory");
}

// vla_bulk_load copies bytes (a multiple of 16) from global src to shared
// dst, completing them on bar.
__device__ __forceinline__ void vla_bulk_load(u32 dst, const void *src, u32 bytes, u32 bar) {
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
	             "l"(src), "r"(bytes), "r"(bar)
	             : "memory");
}
#endif

// vla_gstream_op is the weight of a that column n, numbered across w[0],
// w[1] and w[2] in turn, belongs to; n becomes its column there.
__device__ __forceinline__ int vla_gstream_op(const vla_gstream_args &a, int &n) {
	int j = 0;
	while (j < VLA_GSTREAM_OPS - 1 && n >= a.n[j]) n -= a.n[j++];
	return j;
}

// vla_gstream_row is row r (< VLA_GSTREAM_ROWS) of group g's rows in the
// weights of a: for modes 0 and 1 columns 2g and 2g + 1 (vla_gstream_op's
// numbering); for mode 2 the gate row of column g, then its up row.
__device__ __forceinline__ const uint4 *vla_gstream_row(const vla_gstream_args &a, int g, int r, int kc) {
	if (a.mode == 2) return a.w[r] + (u64)g * kc;
	int n = 2 * g + r;
	const int j = vla_gstream_op(a, n);
	return a.w[j] + (u64)n * kc;
}

// vla_gstream_chunk adds the products of one 16-byte chunk of each of two
// rows (wa, wb) with x's 8 values at xa (x rounded to the weight's type:
// with XH, 8 packed 16-bit values at xa[0]; else as float, in two planes,
// xa[0] and xa[kc], so that a warp's reads of consecutive chunks meet no
// bank conflict) to acc: the products and order of vla_gemv_chunk, for
// each row.
template <bool F16, bool XH>
__device__ __forceinline__ void vla_gstream_chunk(uint4 wa, uint4 wb, const uint4 *xa, int kc, float *acc) {
	float xf[8];
	if (XH) {
		vla_unpack8<F16>(xa[0], xf);
	} else {
		const float4 a = *(const float4 *)xa, b = *(const float4 *)(xa + kc);
		xf[0] = a.x, xf[1] = a.y, xf[2] = a.z, xf[3] = a.w;
		xf[4] = b.x, xf[5] = b.y, xf[6] = b.z, xf[7] = b.w;
	}
	float fa[8], fb[8];
	vla_unpack8<F16>(wa, fa);
	vla_unpack8<F16>(wb, fb);
#pragma unroll
	for (int i = 0; i < 8; i++) {
		acc[0] = fmaf(fa[i], xf[i], acc[0]);
		acc[1] = fmaf(fb[i], xf[i], acc[1]);
	}
}

// vla_gstream_dot adds the products of one piece of two rows (pc chunks
// in shared memory at sa and sb, the rows' chunks from cb on) to acc[0]
// and acc[1], the lane's chunks in vla_gemv_dot's order. A whole piece
// (the common case) takes the unrolled path: constant offsets, no loop.
template <bool F16, bool XH>
__device__ __forceinline__ void vla_gstream_dot(const uint4 *sa, const uint4 *sb, int pc, int cb, const uint4 *xs,
                                                int kc, int lane, float *acc) {
	constexpr int PC = VLA_GSTREAM_PIECE / 16; // chunks of a whole piece
	if (pc == PC) {
		const uint4 *xl = xs + cb + lane;
#pragma unroll
		for (int b = 0; b < PC / 32; b += VLA_GEMV_UNROLL / 2) {
			uint4 wa[VLA_GEMV_UNROLL / 2], wb[VLA_GEMV_UNROLL / 2];
#pragma unroll
			for (int u = 0; u < VLA_GEMV_UNROLL / 2; u++) {
				wa[u] = sa[lane + 32 * (b + u)];
				wb[u] = sb[lane + 32 * (b + u)];
			}
#pragma unroll
			for (int u = 0; u < VLA_GEMV_UNROLL / 2; u++)
				vla_gstream_chunk<F16, XH>(wa[u], wb[u], xl + 32 * (b + u), kc, acc);
		}
		return;
	}
	for (int c = lane; c < pc; c += 32) vla_gstream_chunk<F16, XH>(sa[c], sb[c], xs + cb + c, kc, acc);
}

// vla_gstream_store stores the sum v of column n (numbered across the
// weights of a) as vla_gemv_store does (modes 0 and 1).
__device__ __forceinline__ void vla_gstream_store(const vla_gstream_args &a, int n, float v) {
	const int j = vla_gstream_op(a, n);
	vla_gemv_store<1>(a.y[j], &v, a.bias[j], a.bdt[j], a.n[j], n, a.mode == 1);
}

template <bool F16, bool XH>
__device__ __forceinline__ void vla_gemv_stream(const vla_gstream_args &a, const float *__restrict__ x, int K,
                                                int early, const void *__restrict__ nw, int nwdt, float eps,
                                                int nw_early) {
#ifdef VLA_HAS_BULK
	extern __shared__ __align__(128) uint4 vla_gstream_smem[];
	constexpr int W = VLA_GSTREAM_WARPS, R = VLA_GSTREAM_ROWS, P = VLA_GSTREAM_PIECE;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	// Shared memory: the slots (P bytes each; R make a step's buffer, and
	// a warp has depth of those), a barrier a buffer, then x rounded.
	const int depth = a.slots / (W * R);
	const u32 base = vla_smem_addr(vla_gstream_smem);
	const u32 ring = base + warp * depth * R * P;
	const u32 full = base + a.slots * P + 8 * warp * depth;
	const uint4 *slot0 = vla_gstream_smem + warp * depth * R * (P / 16);
	uint4 *xs = (uint4 *)((char *)vla_gstream_smem + a.slots * P + 8 * (a.slots / R));
	const int xchunks = XH ? K >> 3 : K >> 2; // 16-byte entries of x there
	const int kc = K >> 3, rowBytes = 2 * K;
	const int ppr = (rowBytes + P - 1) / P; // pieces a row, steps a group
	// The columns in groups of R rows: for modes 0 and 1 pairs of columns
	// (the last may be one), for mode 2 a column's gate and up rows. A
	// block takes a range of groups; its warp takes groups warp, warp +
	// W, ...; its steps t = 0, 1, ... (piece pr of each of the group's
	// rows; each group's pieces in turn) go through its buffer t % depth,
	// in round t / depth. Lane 0 copies step t + depth into the buffer
	// once the warp has read step t there.
	const int items = a.mode == 2 ? a.n[0] : a.n[0] + a.n[1] + a.n[2];
	const int total = a.mode == 2 ? items : (items + 1) / 2; // groups
	const int g0 = (int)((u64)blockIdx.x * total / gridDim.x), groups = (int)((u64)(blockIdx.x + 1) * total / gridDim.x) - g0;
	const int steps = (groups > warp ? (groups - warp + W - 1) / W : 0) * ppr;
	// rows of group gi: R, but for an odd last column of modes 0 and 1
	const auto rows = [&](int gi) { return a.mode != 2 && 2 * (g0 + gi) + 1 >= items ? 1 : R; };
	int cg = warp, cp = 0, cs = 0; // the next step to copy: group, piece, buffer
	const auto copy = [&]() {
		const u32 bytes = (u32)min(P, rowBytes - cp * P), bar = full + 8 * cs;
		const int nr = rows(cg);
		vla_mbar_expect(bar, bytes * nr);
		for (int r = 0; r < nr; r++)
			vla_bulk_load(ring + (cs * R + r) * P, (const char *)vla_gstream_row(a, g0 + cg, r, kc) + (u64)cp * P, bytes,
			              bar);
		if (++cp == ppr) cp = 0, cg += W;
		if (++cs == depth) cs = 0;
	};
	if (lane == 0) {
		for (int s = 0; s < depth; s++) vla_mbar_init(full + 8 * s, 1);
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
		if (early)
			for (int t = 0; t < depth && t < steps; t++) copy();
	}
	// The norm weight's first chunks of this thread, before the wait where
	// no kernel writes it (nw_early).
	float nwv[VLA_GSTREAM_NW_HELD][8];
	const auto loadNW = [&]() {
#pragma unroll
		for (int u = 0; u < VLA_GSTREAM_NW_HELD; u++) {
			const int c = threadIdx.x + u * VLA_GSTREAM_THREADS;
#pragma unroll
			for (int i = 0; i < 8; i++) nwv[u][i] = c < kc ? vla_load(nw, nwdt, 8 * c + i) : 0.0f;
		}
	};
	if (nw && nw_early) loadNW();
	vla_pdl_enter(); // x is the kernel ahead's output
	if (nw && !nw_early) loadNW();
	if (lane == 0 && !early)
		for (int t = 0; t < depth && t < steps; t++) copy();
	// A warp lets the next kernel be placed once it has issued its last
	// copy (the next GEMV's blocks then start their own copies as this
	// one's last bytes arrive, where shared memory allows).
	bool triggered = steps <= depth;
	if (triggered) vla_pdl_launch();
	// With a norm weight, x is first normalized (vla_rmsnorm's sums in its
	// order: this block has its 256 threads) and then rounded.
	float rs = 0.0f;
	if (nw) {
		double ss = vla_norm_sumsq<false>((float *)x, 0, K);
		ss = vla_block_sum_d(ss, (double *)(xs + xchunks));
		const float ms = (float)(ss / (double)K);
		rs = (float)(1.0 / sqrt((double)(ms + eps)));
	}
	// Chunk c of x (normalized with weight chunk wv, or loaded from nw
	// where null) rounded into shared memory: packed (XH), or as floats
	// in two planes.
	const auto put = [&](int c, const float *wv) {
		const float4 a4 = ((const float4 *)(x + 8 * c))[0], b4 = ((const float4 *)(x + 8 * c))[1];
		float v[8] = {a4.x, a4.y, a4.z, a4.w, b4.x, b4.y, b4.z, b4.w};
		if (nw) {
#pragma unroll
			for (int i = 0; i < 8; i++)
				v[i] = __fmul_rn(wv ? wv[i] : vla_load(nw, nwdt, 8 * c + i), __fmul_rn(v[i], rs));
		}
		if (XH) {
			u32 p[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				p[i] = F16 ? vla_pack_f16x2(v[2 * i], v[2 * i + 1]) : vla_pack_bf16x2(v[2 * i], v[2 * i + 1]);
			xs[c] = make_uint4(p[0], p[1], p[2], p[3]);
			return;
		}
		float f[8];
		vla_round8v<F16>(v, f);
		float4 lo4, hi4;
		lo4.x = f[0], lo4.y = f[1], lo4.z = f[2], lo4.w = f[3];
		hi4.x = f[4], hi4.y = f[5], hi4.z = f[6], hi4.w = f[7];
		*(float4 *)(xs + c) = lo4;
		*(float4 *)(xs + c + kc) = hi4;
	};
#pragma unroll
	for (int u = 0; u < VLA_GSTREAM_NW_HELD; u++) {
		const int c = threadIdx.x + u * VLA_GSTREAM_THREADS;
		if (c < kc) put(c, nwv[u]);
	}
	for (int c = threadIdx.x + VLA_GSTREAM_NW_HELD * VLA_GSTREAM_THREADS; c < kc; c += VLA_GSTREAM_THREADS)
		put(c, nullptr);
	__syncthreads();
	float acc[R] = {0.0f, 0.0f};
	// s: the buffer of step t (t % depth), ph: its round's parity, pr: the
	// piece of the group's rows.
	for (int t = 0, pr = 0, gi = warp, s = 0, ph = 0; t < steps; t++) {
		const int pc = min(P, rowBytes - pr * P) >> 4;
		vla_mbar_wait(full + 8 * s, (u32)ph);
		const uint4 *sa = slot0 + s * R * (P / 16);
		vla_gstream_dot<F16, XH>(sa, sa + P / 16, pc, pr * (P / 16), xs, kc, lane, acc);
		__syncwarp(); // the buffer is read: lane 0 refills it
		if (lane == 0 && t + depth < steps) {
			asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
			copy(); // step t + depth
		}
		if (t + depth == steps - 1) {
			vla_pdl_launch(); // the warp's copies are all issued
			triggered = true;
		}
		if (++s == depth) s = 0, ph ^= 1;
		if (++pr < ppr) continue;
		pr = 0;
		acc[0] = vla_warp_sum(acc[0]);
		acc[1] = vla_warp_sum(acc[1]);
		if (lane == 0) {
			if (a.mode == 2) {
				a.y[0][g0 + gi] = vla_silu1(acc[0]) * acc[1];
			} else {
				vla_gstream_store(a, 2 * (g0 + gi), acc[0]);
				if (rows(gi) == R) vla_gstream_store(a, 2 * (g0 + gi) + 1, acc[1]);
			}
		}
		acc[0] = acc[1] = 0.0f;
		gi += W;
	}
	if (!triggered) vla_pdl_launch();
#else
	vla_pdl_enter(); // not built: the Go side never launches it (gpu.gstreamOK)
	__trap();
#endif
}

// With nw (not null), the products read RMSNorm(x) with weight nw (of type
// nwdt) and eps instead of x: the bits of vla_rmsnorm's output (its block of
// 256 threads, K > 1024: checked in Go) read by the kernel (RMSNormMatMuls,
// RMSNormMLP), without that kernel and its place in the chain. nw_early: no
// kernel writes nw, so it is loaded before the wait.
#define VLA_GSTREAM_KERNEL(name, F16, XH)                                                                         \
	extern "C" __global__ void __launch_bounds__(VLA_GSTREAM_THREADS)                                              \
	    name(vla_gstream_args a, const float *__restrict__ x, int K, int early, const void *__restrict__ nw,      \
	         int nwdt, float eps, int nw_early) {                                                              \
		vla_gemv_stream<F16, XH>(a, x, K, early, nw, nwdt, eps, nw_early);                                    \
	}
VLA_GSTREAM_KERNEL(vla_gemv_stream_bf16, false, false)
VLA_GSTREAM_KERNEL(vla_gemv_stream_f16, true, false)
// x held packed in 16 bits (half the shared memory of the floats).
VLA_GSTREAM_KERNEL(vla_gemv_stream_bf16_xh, false, true)
VLA_GSTREAM_KERNEL(vla_gemv_stream_f16_xh, true, true)
