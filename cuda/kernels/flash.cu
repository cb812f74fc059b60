// flash.cu: attention on the tensor cores (flash attention 2). A block of
// 4 warps takes 64 query rows of one head; each warp holds 16 rows of Q as
// bf16 fragments in registers and streams the visible keys in tiles of
// 64, as bf16 in shared memory: either copied asynchronously (cp.async)
// from bf16 copies of K and V that vla_kv_to_bf16 made, V of a tile during
// its S and K of the next during its P·V (vla_flash_pipe_*), or read as
// float and rounded through registers, then computed (vla_flash_*).
// S = Q·Kᵀ and O += P·V run as mma.sync m16n8k16 with float accumulators,
// and an online softmax (base 2, the scale folded in) keeps S out of
// memory. Only Q, K, V and P are rounded to bf16; scores, the softmax and
// O stay float32.
//
// Semantics are those of vla_attention (attention.cu): GQA, causal from
// qpos0, segments, and the hidden key range [mask_from, mask_to). With
// segments a block's 64 rows lie in one segment (the grid counts tiles
// segment by segment). Keys past a tile's end are zero-filled, never read,
// and masked to -inf; a row that sees no key gets zeros.
//
// With one split, out16 (when not null) gets the output rounded to bf16
// as well: the next product's input (gpu.twin in Go).
//
// Split mode (gridDim.z > 1): split z takes its share of the key tiles and
// writes its unnormalized O, running maximum (base 2) and sum to part_o and
// part_ml; vla_attn_combine (decode.cu) merges the splits. Heads ×
// query tiles too few to fill the GPU (the action expert's 64 queries over
// a long cache) are split this way.
//
// The head dim is padded with zeros to HDP (80 or 128), so Q·Kᵀ is
// exact for any hd <= HDP with hd % 4 == 0 (float4 loads).
//
// vla_flash_wg_80 and _128 (below) are vla_flash_pipe_80 and _128 on the
// asynchronous warpgroup MMA, for sm_90a.

#define VLA_FA_BQ 64
#define VLA_FA_BK 64
#define VLA_FA_THREADS 128

// The rows and keys of one block.
struct vla_fa_tile {
	int q0, q1;   // query rows [q0, q1)
	int klo, khi; // keys of their segment (all keys without segments)
};

// vla_fa_find_tile maps tile index t to its rows: tiles of 64 rows over
// tq, or segment by segment.
__device__ __forceinline__ vla_fa_tile vla_fa_find_tile(int t, int tq, int nkv, const vla_segments &segs) {
	vla_fa_tile r;
	r.q0 = t * VLA_FA_BQ;
	r.q1 = min(r.q0 + VLA_FA_BQ, tq);
	r.klo = 0;
	r.khi = nkv;
	if (segs.n > 1) {
		for (int s = 0; s + 1 < segs.n; s++) {
			const int lo = segs.b[s], hi = segs.b[s + 1];
			const int cnt = (hi - lo + VLA_FA_BQ - 1) / VLA_FA_BQ;
			if (t < cnt) {
				r.q0 = lo + t * VLA_FA_BQ;
				r.q1 = min(r.q0 + VLA_FA_BQ, hi);
				r.klo = lo;
				r.khi = hi;
				break;
			}
			t -= cnt;
		}
	}
	return r;
}

// vla_fa_load rounds rows [r0, r0+64) of a float matrix (row stride
// stride, hd columns used) to bf16 into dst [64][HDP+8]; rows from r1 on
// and columns from hd on are zeros. With rotary tables rc and rs ([rows,
// hd/2], not null) each row is first rotated as vla_rope rotates it (the
// queries of RopeAttention).
template <int HDP>
__device__ __forceinline__ void vla_fa_load(u16 *dst, const float *__restrict__ src, u64 stride, int r0, int r1,
                                            int hd, const float *__restrict__ rc = 0, const float *__restrict__ rs = 0) {
	constexpr int C4 = HDP / 4, LD = HDP + 8;
#pragma unroll
	for (int e = threadIdx.x; e < VLA_FA_BK * C4; e += VLA_FA_THREADS) {
		const int r = e / C4, c = (e % C4) * 4;
		float4 x;
		x.x = x.y = x.z = x.w = 0.0f;
		if (r0 + r < r1 && c < hd) {
			const float *row = src + (u64)(r0 + r) * stride;
			const u64 t = (u64)(r0 + r) * (hd / 2);
			x = rc ? vla_rope4_at(row, rc + t, rs + t, c, hd) : *(const float4 *)(row + c);
		}
		uint2 pk;
		pk.x = vla_pack_bf16x2(x.x, x.y);
		pk.y = vla_pack_bf16x2(x.z, x.w);
		*(uint2 *)(dst + r * LD + c) = pk;
	}
}

// vla_fa_softmax turns a warp's scores of key tile [j0, j0+8·NT) (s, the
// m16n8 accumulator fragments of its 16 rows) into the weights P: scaled
// to base 2, what the row may not see hidden, the running maximum and sum
// updated, and corr set to the factor O must be rescaled by (see
// vla_fa_rescale). FOLD: the scale rides in the exponent's argument (one
// fused multiply-add an element: the maximum is taken over the unscaled
// scores and then scaled, the same value since the scale is positive and
// rounding monotonic) instead of a multiply of its own.
template <int NT, bool FOLD = false>
__device__ __forceinline__ void vla_fa_softmax(float (&s)[NT][4], float (&corr)[2], float (&mrow)[2],
                                               float (&lrow)[2], float sl2, int j0, int khi, int hia, int hib,
                                               int causal, int qpos0, int q0, int mask_from, int mask_to) {
	const int t4 = threadIdx.x & 3;
	const bool hasmask = mask_to > mask_from;
	// Scale to base 2, hide what the row may not see, and update the
	// running maximum and sum.
	const bool needmask = j0 + 8 * NT > khi || (causal && j0 + 8 * NT - 1 > qpos0 + q0) ||
	                      (hasmask && j0 < mask_to && j0 + 8 * NT > mask_from);
	// The mask in a pass of its own, only on the tiles that need it (the
	// others then carry no test an element); the hidden range as one
	// unsigned compare.
	if (needmask) {
		const int jb = j0 + t4 * 2;
		const u32 mlen = hasmask ? (u32)(mask_to - mask_from) : 0u;
#pragma unroll
		for (int nt = 0; nt < NT; nt++) {
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int j = jb + nt * 8 + (e & 1);
				const bool hide = j >= (e < 2 ? hia : hib) || (u32)(j - mask_from) < mlen;
				s[nt][e] = hide ? VLA_NEG_INF : s[nt][e];
			}
		}
	}
	float mx[2] = {VLA_NEG_INF, VLA_NEG_INF};
#pragma unroll
	for (int nt = 0; nt < NT; nt++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const float x = FOLD ? s[nt][e] : s[nt][e] * sl2;
			s[nt][e] = x;
			mx[e >> 1] = fmaxf(mx[e >> 1], x);
		}
	}
	float muse[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
		mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
		if (FOLD) mx[r] *= sl2;
		const float mnew = fmaxf(mrow[r], mx[r]);
		muse[r] = mnew == VLA_NEG_INF ? 0.0f : mnew; // a row with nothing visible yet stays at 0
		corr[r] = vla_ex2(mrow[r] - muse[r]);
		mrow[r] = mnew;
	}
	float rs[2] = {0.0f, 0.0f};
#pragma unroll
	for (int nt = 0; nt < NT; nt++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const float p = vla_ex2(FOLD ? fmaf(s[nt][e], sl2, -muse[e >> 1]) : s[nt][e] - muse[e >> 1]);
			s[nt][e] = p;
			rs[e >> 1] += p;
		}
	}
#pragma unroll
	for (int r = 0; r < 2; r++) lrow[r] = lrow[r] * corr[r] + rs[r];
}

// vla_fa_rescale multiplies a warp's O (ND n8-tiles of its 16 rows) by the
// factors vla_fa_softmax gave. O is rescaled only when some row's maximum
// moved: a factor of 1 leaves it as it is (and O is all zeros before the
// first visible key).
template <int ND> __device__ __forceinline__ void vla_fa_rescale(float (&o)[ND][4], const float (&corr)[2]) {
	if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
		for (int nd = 0; nd < ND; nd++) {
			o[nd][0] *= corr[0];
			o[nd][1] *= corr[0];
			o[nd][2] *= corr[1];
			o[nd][3] *= corr[1];
		}
	}
}

// vla_fa_scores starts one key tile [j0, j0+64) for a warp's 16 rows: S =
// Q·Kᵀ from the bf16 K tile in shared memory, scaled to base 2 and masked,
// the online softmax update (O rescaled), and the weights P left in s.
template <int HDP>
__device__ __forceinline__ void vla_fa_scores(u32 ks, const u32 (&qf)[HDP / 16][4], float (&s)[VLA_FA_BK / 8][4],
                                              float (&o)[HDP / 8][4], float (&mrow)[2], float (&lrow)[2], float sl2,
                                              int j0, int khi, int hia, int hib, int causal, int qpos0, int q0,
                                              int mask_from, int mask_to) {
	constexpr int LD = HDP + 8, KS = HDP / 16, NT = VLA_FA_BK / 8;
	const int lane = threadIdx.x & 31;
	// K's B fragments by ldmatrix: matrix i of lane group i = lane/8 is
	// keys nt·8 + lane%8 × dims kk·16 + 8i (two k-steps a load). Shared
	// addresses in bytes: the lane's base plus constants.
	const int mi = lane >> 3, r8 = lane & 7;
	const u32 kbase = ks + (u32)(r8 * LD + mi * 8) * 2;
#pragma unroll
	for (int nt = 0; nt < NT; nt++) {
		s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < KS; kk += 2) {
			u32 b[4];
			const u32 a = kbase + (u32)(nt * 8 * LD + kk * 16) * 2;
			if (kk + 1 < KS) {
				vla_ldmatrix_x4(b, a);
				vla_mma_bf16(s[nt], qf[kk], b[0], b[1]);
				vla_mma_bf16(s[nt], qf[kk + 1], b[2], b[3]);
			} else { // an odd last k-step (HDP 80): lanes 0-15 give its rows
				vla_ldmatrix_x2(b, a);
				vla_mma_bf16(s[nt], qf[kk], b[0], b[1]);
			}
		}
	}

	float corr[2];
	vla_fa_softmax<VLA_FA_BK / 8>(s, corr, mrow, lrow, sl2, j0, khi, hia, hib, causal, qpos0, q0, mask_from, mask_to);
	vla_fa_rescale<HDP / 8>(o, corr);
}

// vla_fa_pv ends a key tile: O += P·V with the bf16 V tile in shared
// memory.
template <int HDP>
__device__ __forceinline__ void vla_fa_pv(u32 vs, const float (&s)[VLA_FA_BK / 8][4], float (&o)[HDP / 8][4]) {
	constexpr int LD = HDP + 8, ND = HDP / 8;
	const int lane = threadIdx.x & 31;
	// O += P·V: the S accumulators of key tiles 2kk and 2kk+1 are the A
	// fragment of keys [16kk, 16kk+16); V comes transposed by ldmatrix.
	const int mat = lane >> 3, r8 = lane & 7;
	const u32 vbase = vs + (u32)(((mat & 1) * 8 + r8) * LD + (mat >> 1) * 8) * 2;
#pragma unroll
	for (int kk = 0; kk < VLA_FA_BK / 16; kk++) {
		u32 a[4];
		a[0] = vla_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
		a[1] = vla_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
		a[2] = vla_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
		a[3] = vla_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
		for (int np = 0; np < ND / 2; np++) {
			u32 b[4];
			vla_ldmatrix_x4_trans(b, vbase + (u32)(kk * 16 * LD + np * 16) * 2);
			vla_mma_bf16(o[2 * np], a, b[0], b[1]);
			vla_mma_bf16(o[2 * np + 1], a, b[2], b[3]);
		}
	}
}

// vla_fa_issue starts the asynchronous copy of rows [j0, j0+64) of one KV
// head's bf16 rows of HDP (row j at src + j·rs) into dst [64][HDP+8]; rows
// from khi on are zero-filled, not read. Commit and wait with
// vla_cp_async_*.
template <int HDP>
__device__ __forceinline__ void vla_fa_issue(u32 dst, const u16 *__restrict__ src, int j0, int khi, int rs) {
	constexpr int C8 = HDP / 8, LD = HDP + 8;
	static_assert(VLA_FA_BK * C8 % VLA_FA_THREADS == 0, "a tile's 16-byte chunks must split evenly over the threads");
#pragma unroll
	for (int i = 0; i < VLA_FA_BK * C8 / VLA_FA_THREADS; i++) {
		const int e = threadIdx.x + i * VLA_FA_THREADS;
		const int r = e / C8, c = (e % C8) * 8;
		const bool ok = j0 + r < khi;
		vla_cp_async16(dst + (u32)(r * LD + c) * 2, src + (u64)(ok ? j0 + r : 0) * rs + c, ok);
	}
}

// vla_fa_store ends a warp's 16 rows (ia = its row g, ib = ia + 8): the
// sums l gathered from the quad, then with one split O/l to out (and
// rounded to bf16 to out16 when not null), else the unnormalized O, the
// maximum and the sum to split z's slots of part_o and part_ml. Rows from
// q1 on are not written.
template <int HDP>
__device__ __forceinline__ void vla_fa_store(const float (&o)[HDP / 8][4], const float (&mrow)[2], float (&lrow)[2],
                                             int ia, int ib, int q1, int h, int heads, int hd, int tq,
                                             float *__restrict__ out, u16 *__restrict__ out16,
                                             float *__restrict__ part_o, float *__restrict__ part_ml) {
	constexpr int ND = HDP / 8;
	const int t4 = threadIdx.x & 3;
	const int nsplit = gridDim.z, split = blockIdx.z;
	const u64 qstride = (u64)heads * hd;
#pragma unroll
	for (int r = 0; r < 2; r++) {
		lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
		lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
	}
#pragma unroll
	for (int r = 0; r < 2; r++) {
		const int i = r == 0 ? ia : ib;
		if (i >= q1) continue;
		if (nsplit == 1) {
			const float inv = lrow[r] > 0.0f ? 1.0f / lrow[r] : 0.0f;
			float *orow = out + (u64)i * qstride + (u64)h * hd;
#pragma unroll
			for (int nd = 0; nd < ND; nd++) {
				const int c = nd * 8 + t4 * 2;
				if (c < hd) {
					float2 w;
					w.x = o[nd][2 * r] * inv;
					w.y = o[nd][2 * r + 1] * inv;
					*(float2 *)(orow + c) = w;
					if (out16)
						*(u32 *)(out16 + (u64)i * qstride + (u64)h * hd + c) =
						    (u32)vla_f32_to_bf16(w.x) | ((u32)vla_f32_to_bf16(w.y) << 16);
				}
			}
		} else {
			const u64 row = ((u64)split * tq + i) * heads + h;
			float *orow = part_o + row * hd;
#pragma unroll
			for (int nd = 0; nd < ND; nd++) {
				const int c = nd * 8 + t4 * 2;
				if (c < hd) {
					float2 w;
					w.x = o[nd][2 * r];
					w.y = o[nd][2 * r + 1];
					*(float2 *)(orow + c) = w;
				}
			}
			if (t4 == 0) {
				part_ml[2 * row] = mrow[r];
				part_ml[2 * row + 1] = lrow[r];
			}
		}
	}
}

// vla_flash is the kernel body. PIPE = false: k and v are the float K and
// V, each tile rounded to bf16 through registers, then computed (load and
// compute in turn). PIPE = true: k and v are bf16, head h's row j at
// k + h·hs + j·rs — copies [kvheads][nkv][HDP] made by vla_kv_to_bf16 (hs
// = nkv·HDP, rs = HDP), or bf16 caches [nkv][kvheads·HDP] read in place (hs
// = HDP, rs = kvheads·HDP) — and tiles arrive by cp.async while the
// previous step computes: V of tile t during S of tile t, K of tile t+1
// during P·V of tile t.
template <int HDP, bool PIPE>
__device__ __forceinline__ void vla_flash(float *__restrict__ out, u16 *__restrict__ out16, float *__restrict__ part_o,
                                          float *__restrict__ part_ml, const float *__restrict__ q,
                                          const void *__restrict__ kp, const void *__restrict__ vp, int heads,
                                          int kvheads, int hd, int tq, int nkv, float sl2, int causal, int qpos0,
                                          int mask_from, int mask_to, const vla_segments &segs, u64 hs, int rs,
                                          const float *__restrict__ rc, const float *__restrict__ rsn) {
	constexpr int LD = HDP + 8; // shared row stride in bf16: conflict-free fragment loads
	constexpr int KS = HDP / 16; // k-steps of Q·Kᵀ
	constexpr int ND = HDP / 8;  // n-tiles of O
	__shared__ __align__(16) u16 ks[VLA_FA_BK * LD];
	__shared__ __align__(16) u16 vs[VLA_FA_BK * LD];

	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int g = lane >> 2, t4 = lane & 3;
	const int h = blockIdx.y, kvh = h / (heads / kvheads);
	const int nsplit = gridDim.z, split = blockIdx.z;
	const int tile = causal ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x; // the longest rows first
	const vla_fa_tile T = vla_fa_find_tile(tile, tq, nkv, segs);
	const u64 qstride = (u64)heads * hd, kstride = (u64)kvheads * hd;
	const int khi = causal ? min(T.khi, qpos0 + T.q1) : T.khi;
	const int ntiles = khi > T.klo ? (khi - T.klo + VLA_FA_BK - 1) / VLA_FA_BK : 0;
	const int tt0 = (int)((long long)ntiles * split / nsplit), tt1 = (int)((long long)ntiles * (split + 1) / nsplit);
	const bool hasmask = mask_to > mask_from;

	const u16 *kb = (const u16 *)kp + kvh * hs, *vb = (const u16 *)vp + kvh * hs;
	const u32 kss = vla_smem_addr(ks), vss = vla_smem_addr(vs); // shared-space addresses
	// tile t is not hidden by the mask as a whole (the same for every thread)
	auto live = [&](int t) {
		const int j0 = T.klo + t * VLA_FA_BK;
		return !(hasmask && j0 >= mask_from && j0 + VLA_FA_BK <= mask_to);
	};
	int tt = tt0;
	if (PIPE) {
		while (tt < tt1 && !live(tt)) tt++;
		if (tt < tt1) vla_fa_issue<HDP>(kss, kb, T.klo + tt * VLA_FA_BK, khi, rs); // the first K tile, during Q's load
		vla_cp_async_commit();
	}

	// Q: staged through vs, then held as A fragments.
	u16 *qs = vs;
	vla_fa_load<HDP>(qs, q + (u64)h * hd, qstride, T.q0, T.q1, hd, rc, rsn);
	__syncthreads();
	const int ra = warp * 16 + g; // this thread's rows of the tile: ra and ra+8
	u32 qf[KS][4];
#pragma unroll
	for (int kk = 0; kk < KS; kk++) {
		const u16 *p = qs + ra * LD + kk * 16 + t4 * 2;
		qf[kk][0] = *(const u32 *)p;
		qf[kk][1] = *(const u32 *)(p + 8 * LD);
		qf[kk][2] = *(const u32 *)(p + 8);
		qf[kk][3] = *(const u32 *)(p + 8 * LD + 8);
	}
	__syncthreads();

	const int ia = T.q0 + ra, ib = ia + 8; // query rows
	const int hia = causal ? min(khi, qpos0 + ia + 1) : khi;
	const int hib = causal ? min(khi, qpos0 + ib + 1) : khi;
	float o[ND][4];
#pragma unroll
	for (int nd = 0; nd < ND; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
	float mrow[2] = {VLA_NEG_INF, VLA_NEG_INF}, lrow[2] = {0.0f, 0.0f};

	if (!PIPE) {
		const float *k = (const float *)kp + (u64)kvh * hd, *v = (const float *)vp + (u64)kvh * hd;
		for (; tt < tt1; tt++) {
			if (!live(tt)) continue;
			const int j0 = T.klo + tt * VLA_FA_BK;
			vla_fa_load<HDP>(ks, k, kstride, j0, khi, hd);
			vla_fa_load<HDP>(vs, v, kstride, j0, khi, hd);
			__syncthreads();
			float p[VLA_FA_BK / 8][4];
			vla_fa_scores<HDP>(kss, qf, p, o, mrow, lrow, sl2, j0, khi, hia, hib, causal, qpos0, T.q0, mask_from,
			                   mask_to);
			vla_fa_pv<HDP>(vss, p, o);
			__syncthreads(); // before the next tile overwrites ks and vs
		}
	} else {
		while (tt < tt1) {
			int nxt = tt + 1;
			while (nxt < tt1 && !live(nxt)) nxt++;
			const int j0 = T.klo + tt * VLA_FA_BK;
			vla_cp_async_wait_all();
			__syncthreads(); // K(tt) is in; every warp is done with vs (Q, or V of the last tile)
			vla_fa_issue<HDP>(vss, vb, j0, khi, rs);
			vla_cp_async_commit();
			float p[VLA_FA_BK / 8][4];
			vla_fa_scores<HDP>(kss, qf, p, o, mrow, lrow, sl2, j0, khi, hia, hib, causal, qpos0, T.q0, mask_from,
			                   mask_to);
			vla_cp_async_wait_all();
			__syncthreads(); // V(tt) is in; every warp is done with ks
			if (nxt < tt1) vla_fa_issue<HDP>(kss, kb, T.klo + nxt * VLA_FA_BK, khi, rs);
			vla_cp_async_commit();
			vla_fa_pv<HDP>(vss, p, o);
			tt = nxt;
		}
	}

	vla_fa_store<HDP>(o, mrow, lrow, ia, ib, T.q1, h, heads, hd, tq, out, out16, part_o, part_ml);
}

#define VLA_FLASH_KERNEL(name, HDP, PIPE)                                                                            \
	extern "C" __global__ void __launch_bounds__(VLA_FA_THREADS)                                                    \
	    name(float *__restrict__ out, u16 *__restrict__ out16, float *__restrict__ part_o,                        \
	         float *__restrict__ part_ml,                                                                            \
	         const float *__restrict__ q, const void *__restrict__ k, const void *__restrict__ v, int heads,          \
	         int kvheads, int hd, int tq, int nkv, float sl2, int causal, int qpos0, int mask_from, int mask_to,      \
	         vla_segments segs, u64 hs, int rs, const float *__restrict__ rc, const float *__restrict__ rsn) {      \
		vla_pdl_enter();                                                                                          \
		vla_flash<HDP, PIPE>(out, out16, part_o, part_ml, q, k, v, heads, kvheads, hd, tq, nkv, sl2, causal, qpos0,        \
		                     mask_from, mask_to, segs, hs, rs, rc, rsn);                                             \
	}

VLA_FLASH_KERNEL(vla_flash_80, 80, false)
VLA_FLASH_KERNEL(vla_flash_128, 128, false)
VLA_FLASH_KERNEL(vla_flash_pipe_80, 80, true)
VLA_FLASH_KERNEL(vla_flash_pipe_128, 128, true)

// vla_flash_wg_128 and vla_flash_wg_80 are flash attention on the asynchronous
// warpgroup MMA (sm_90a): vla_flash_pipe_128's and vla_flash_pipe_80's
// semantics, splits included, over bf16 K and V rows of 128 (80) as those
// kernels read them (tiles hidden whole by the mask are computed and masked,
// not skipped). A block is one warpgroup (128 threads) and takes 64 query rows
// of one head; two blocks (three at 80) share an SM and overlap one another's
// softmax and products (at 128 three fit the shared memory, but at the 168
// registers a thread that leaves, ptxas serializes the wgmma:
// bench/results/cuda-kernels.md run 17). Q, rounded to bf16 (and rotated with
// rc and rsn), is staged in shared memory and then held as the A fragments of S
// = Q·Kᵀ in registers. Key tiles of 64 rows stream by cp.async through
// VLA_FW_KST stages of K (three) and two of V, laid out as wgmma reads them:
// the first 64 columns of the head dim in rows of 128 bytes, 16-byte chunk c of
// row r at c ^ (r & 7) (the 128-byte swizzle); 8 KB on, columns 64-127 the same
// way (HDP 128), or columns 64-79 in 8 × 8 core matrices of no swizzle (HDP 80:
// chunk c of row r at 256·(r / 8) + 128·c + 16·(r % 8)). For tile t the
// warpgroup issues S_t = Q·K_tᵀ (HDP / 16 k-steps, K-major B) and then O +=
// P_{t-1}·V_{t-1} (four k-steps × the column blocks of the head dim, P from
// registers, V read N-major: the same rows as K), and runs the softmax of S_t
// while the second product runs. The softmax is vla_flash's (vla_fa_softmax;
// its fragments are mma.sync's), with the scale folded into the exponent.
// K_{t+KST-1} is copied during tile t (into K_{t-1}'s stage), V_{t+1} once the
// products of V_{t-1} are done. Only the order in which the tensor cores add a
// row's products and that fold differ from vla_flash_pipe_*: the results agree
// with it to rounding.
#define VLA_FW_BQ VLA_FA_BQ // 64: vla_fa_find_tile's tiles
#define VLA_FW_BK 64
#define VLA_FW_THREADS 128
#define VLA_FW_RS (VLA_FW_THREADS / 16) // HDP 128: rows a round of a tile's copies covers (a multiple of 8)
#define VLA_FW_RS80 (VLA_FW_THREADS / 8) // HDP 80: rows a round of the first 64 columns' copies covers
// VLA_FW_TBYTES: a K or V tile, 16 KB at 128 and 10 KB at 80;
// VLA_FW_SMEM: VLA_FW_KST stages of K and two of V (Q staged in V's
// second) and 1,024 bytes of alignment.
#define VLA_FW_KST 3 // stages of K (two: slower on the attention benchmarks, cuda-kernels.md run 18)
#define VLA_FW_TBYTES(HDP) (HDP == 128 ? VLA_FW_BK * 128 * 2 : VLA_FW_BK * 80 * 2)
#define VLA_FW_SMEM(HDP) ((VLA_FW_KST + 2) * VLA_FW_TBYTES(HDP) + 1024)
#define VLA_FW_HALF 8192 // bytes from a tile's first 64 columns to the rest

#if defined(VLA_WG_BUILT)
// vla_fw_dst is this thread's offset in a stage at HDP 128: chunk tid % 16
// of row tid / 16 (the same swizzle for its rows RS·i further on).
__device__ __forceinline__ u32 vla_fw_dst() {
	const int ch = threadIdx.x & 15, r0 = threadIdx.x >> 4;
	return (u32)((ch >> 3) * VLA_FW_HALF + r0 * 128 + (((ch & 7) ^ (r0 & 7)) << 4));
}

// vla_fw_core is the offset in a stage of 16-byte chunk c (0 or 1) of
// columns 64-79 of row r at HDP 80: 8 × 8 core matrices, no swizzle.
__device__ __forceinline__ u32 vla_fw_core(int r, int c) {
	return (u32)(VLA_FW_HALF + (r >> 3) * 256 + c * 128 + (r & 7) * 16);
}

// vla_fw_issue queues this thread's copies of a tile at HDP 128: its chunk
// of the tile's row r0 at p and of rows RS·i further on (step apart) to
// dst (the stage plus vla_fw_dst) and on. Rows left and on (past khi) are
// zero-filled from safe, not read; a tile all of whose rows are below khi
// (every one but maybe the last) is an add and a copy a row.
__device__ __forceinline__ void vla_fw_issue(u32 dst, const u16 *__restrict__ p, u64 step, int left,
                                             const u16 *__restrict__ safe) {
	if (left >= VLA_FW_BK) {
#pragma unroll
		for (int i = 0; i < VLA_FW_BK / VLA_FW_RS; i++)
			asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + VLA_FW_RS * 128 * i), "l"(p + i * step)
			             : "memory");
	} else {
#pragma unroll
		for (int i = 0; i < VLA_FW_BK / VLA_FW_RS; i++) {
			const bool ok = VLA_FW_RS * i < left;
			vla_cp_async16(dst + VLA_FW_RS * 128 * i, ok ? p + i * step : safe, ok);
		}
	}
}

// vla_fw_issue80 is vla_fw_issue at HDP 80: chunk tid % 8 of rows tid / 8
// + RS80·i (p, step apart; left rows from the first) of the first 64
// columns to da and on, and chunk tid % 2 of columns 64-79 of row tid / 2
// (pb; leftb rows from it) to db.
__device__ __forceinline__ void vla_fw_issue80(u32 da, u32 db, const u16 *__restrict__ p, const u16 *__restrict__ pb,
                                               u64 step, int left, int leftb, const u16 *__restrict__ safe) {
	if (left >= VLA_FW_BK) { // then row tid / 2 is below khi too
#pragma unroll
		for (int i = 0; i < VLA_FW_BK / VLA_FW_RS80; i++)
			asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(da + VLA_FW_RS80 * 128 * i), "l"(p + i * step)
			             : "memory");
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(db), "l"(pb) : "memory");
	} else {
#pragma unroll
		for (int i = 0; i < VLA_FW_BK / VLA_FW_RS80; i++) {
			const bool ok = VLA_FW_RS80 * i < left;
			vla_cp_async16(da + VLA_FW_RS80 * 128 * i, ok ? p + i * step : safe, ok);
		}
		vla_cp_async16(db, leftb > 0 ? pb : safe, leftb > 0);
	}
}

// The descriptors of a stage's k-steps differ from the stage's by
// constants in their start address (bits 0-13, in 16-byte units, well
// below 2^14 for any shared address): lo is the low word of
// vla_wgmma_desc or vla_wgmma_desc_mn, the high word (stride 1,024, the
// 128-byte swizzle) is the same for both. vla_fw_desc_core describes the
// core matrices of columns 64-79 at HDP 80 (no swizzle): lo holds the
// start and the leading byte offset (the stride between core matrices
// along k), sbo the stride along n.
__device__ __forceinline__ u64 vla_fw_desc(u32 lo) { return ((u64)((1024 >> 4) | (1u << 30)) << 32) | lo; }
__device__ __forceinline__ u64 vla_fw_desc_core(u32 lo, u32 sbo) { return ((u64)(sbo >> 4) << 32) | lo; }

// The core matrices' strides at HDP 80: K-major (S's B), the two chunks of
// a row 128 bytes apart along k and 8-row groups 256 apart along n;
// N-major (V in P·V), 8-key groups 256 apart along k and the two chunks
// 128 apart along n.
#define VLA_FW_K_LBO 128
#define VLA_FW_K_SBO 256
#define VLA_FW_V_LBO 256
#define VLA_FW_V_SBO 128

// vla_fw_pv issues O += P·V for a V stage (vd, its descriptors' low word):
// four k-steps of 16 keys, each over the column blocks of the head dim
// (two of 64 at HDP 128; 64 and 16 at 80, vcd the low word of the second
// block's descriptor).
template <int HDP>
__device__ __forceinline__ void vla_fw_pv(float (&o)[HDP / 8][4], const u32 (&pa)[4][4], u32 vd, u32 vcd) {
#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		vla_wgmma_rs<1>(&o[0][0], pa[kk], vla_fw_desc(vd + ((kk * 2048) >> 4)));
		if constexpr (HDP == 128) vla_wgmma_rs<1>(&o[8][0], pa[kk], vla_fw_desc(vd + ((VLA_FW_HALF + kk * 2048) >> 4)));
		else vla_wgmma_rs_n16<1>(&o[8][0], pa[kk], vla_fw_desc_core(vcd + ((kk * 512) >> 4), VLA_FW_V_SBO));
	}
}

template <int HDP>
__device__ __forceinline__ void vla_flash_wg(float *__restrict__ out, u16 *__restrict__ out16,
                                             float *__restrict__ part_o, float *__restrict__ part_ml,
                                             const float *__restrict__ q, const u16 *__restrict__ kp,
                                             const u16 *__restrict__ vp, int heads, int kvheads, int hd, int tq,
                                             int nkv, float sl2, int causal, int qpos0, int mask_from, int mask_to,
                                             const vla_segments &segs, u64 hs, int rs, const float *__restrict__ rc,
                                             const float *__restrict__ rsn) {
	static_assert(HDP == 128 || HDP == 80, "head dims padded to 80 or 128");
	constexpr int TB = VLA_FW_TBYTES(HDP), KS = HDP / 16, ND = HDP / 8, C4 = HDP / 4;
	extern __shared__ __align__(128) unsigned char vla_fw_smem[];
	constexpr int KST = VLA_FW_KST;
	const u32 ks0 = (vla_smem_addr(vla_fw_smem) + 1023u) & ~1023u, vs0 = ks0 + KST * TB;
	const u32 qs = vs0 + TB; // Q, until the first tile's end
	const int tid = threadIdx.x, lane = tid & 31, wi = tid >> 5;
	const int g = lane >> 2, q4 = lane & 3;
	const int h = blockIdx.y, kvh = h / (heads / kvheads);
	const int tile = causal ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x; // the longest rows first
	const vla_fa_tile T = vla_fa_find_tile(tile, tq, nkv, segs);
	const int khi = causal ? min(T.khi, qpos0 + T.q1) : T.khi;
	const int ntiles = khi > T.klo ? (khi - T.klo + VLA_FW_BK - 1) / VLA_FW_BK : 0;
	// Split z of gridDim.z takes its share of the key tiles, from key jb.
	const int nsplit = gridDim.z, split = blockIdx.z;
	const int tt0 = (int)((long long)ntiles * split / nsplit), tt1 = (int)((long long)ntiles * (split + 1) / nsplit);
	const int nt = tt1 - tt0, jb = T.klo + tt0 * VLA_FW_BK;
	const u16 *kb = kp + kvh * hs, *vb = vp + kvh * hs;

	// The first tile's K and V, while Q is loaded. This thread's chunks
	// (HDP 128): column 8·(tid % 16) of rows tid / 16 + RS·i of a tile;
	// (HDP 80) column 8·(tid % 8) of rows tid / 8 + RS80·i and column 64 +
	// 8·(tid % 2) of row tid / 2. Tiles are 64 rows apart.
	const int r0 = HDP == 128 ? tid >> 4 : tid >> 3, rb = tid >> 1;
	const u32 dof = HDP == 128 ? vla_fw_dst() : (u32)(r0 * 128 + (((tid & 7) ^ (r0 & 7)) << 4));
	const u32 dofb = vla_fw_core(rb, tid & 1);
	const u64 rstep = (u64)(HDP == 128 ? VLA_FW_RS : VLA_FW_RS80) * rs, tstep = (u64)VLA_FW_BK * rs;
	const int col = HDP == 128 ? (tid & 15) * 8 : (tid & 7) * 8;
	const u16 *pk = kb + (u64)(jb + r0) * rs + col, *pv = vb + (u64)(jb + r0) * rs + col;
	// HDP 80: the chunk of columns 64-79 is this far from the first.
	const long long bdel = (long long)(rb - r0) * rs + 64 + (tid & 1) * 8 - col;
	const auto issue = [&](u32 stage, const u16 *p, int j0, const u16 *safe) {
		if constexpr (HDP == 128) vla_fw_issue(stage + dof, p, rstep, khi - j0 - r0, safe);
		else vla_fw_issue80(stage + dof, stage + dofb, p, p + bdel, rstep, khi - j0 - r0, khi - j0 - rb, safe);
	};
	if (nt > 0) issue(ks0, pk, jb, kb);
	vla_cp_async_commit();
	if (nt > 0) issue(vs0, pv, jb, vb);
	vla_cp_async_commit();
#pragma unroll
	for (int i = 1; i + 1 < KST; i++) { // K's further stages
		if (i < nt) issue(ks0 + i * TB, pk + i * tstep, jb + i * VLA_FW_BK, kb);
		vla_cp_async_commit();
	}

	// Q: 64 rows of HDP/4 float4, rounded (and rotated) into the layout of
	// a tile; rows past q1 and columns past hd are zeros. Then each
	// thread's A fragments: rows 16·warp + g and + 8, columns 16kk + 2·q4
	// (+1) and + 8 of k-step kk.
	const auto qaddr = [&](int r, int c) {
		if (HDP == 80 && c >= 64) return qs + vla_fw_core(r, (c - 64) >> 3) + (c & 7) * 2;
		return qs + (u32)((c >> 6) * VLA_FW_HALF + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) + (c & 7) * 2);
	};
	{
		const u64 qstride = (u64)heads * hd;
		const float *qh = q + (u64)h * hd;
#pragma unroll 4
		for (int e = tid; e < VLA_FW_BQ * C4; e += VLA_FW_THREADS) {
			const int r = e / C4, c = (e % C4) * 4;
			float4 x;
			x.x = x.y = x.z = x.w = 0.0f;
			if (T.q0 + r < T.q1 && c < hd) {
				const float *row = qh + (u64)(T.q0 + r) * qstride;
				const u64 t = (u64)(T.q0 + r) * (hd / 2);
				x = rc ? vla_rope4_at(row, rc + t, rsn + t, c, hd) : *(const float4 *)(row + c);
			}
			asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(qaddr(r, c)), "r"(vla_pack_bf16x2(x.x, x.y)),
			             "r"(vla_pack_bf16x2(x.z, x.w))
			             : "memory");
		}
	}
	__syncthreads();
	u32 qf[KS][4];
#pragma unroll
	for (int kk = 0; kk < KS; kk++)
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int r = 16 * wi + g + 8 * (i & 1), c = kk * 16 + 8 * (i >> 1) + 2 * q4;
			asm volatile("ld.shared.u32 %0, [%1];" : "=r"(qf[kk][i]) : "r"(qaddr(r, c)));
		}

	const int ia = T.q0 + 16 * wi + g, ib = ia + 8; // this thread's query rows
	const int hia = causal ? min(khi, qpos0 + ia + 1) : khi;
	const int hib = causal ? min(khi, qpos0 + ib + 1) : khi;
	// descriptors' low words: K and V's first 64 columns, and at HDP 80
	// the core matrices of the rest
	const u32 klo = (ks0 >> 4) | (1u << 16), vlo = (vs0 >> 4) | ((8192u >> 4) << 16);
	const u32 kclo = ((ks0 + VLA_FW_HALF) >> 4) | ((VLA_FW_K_LBO >> 4) << 16);
	const u32 vclo = ((vs0 + VLA_FW_HALF) >> 4) | ((VLA_FW_V_LBO >> 4) << 16);
	float o[ND][4], s[8][4];
#pragma unroll
	for (int nd = 0; nd < ND; nd++) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
	float mrow[2] = {VLA_NEG_INF, VLA_NEG_INF}, lrow[2] = {0.0f, 0.0f};
	u32 pa[4][4]; // P of the last tile: the A fragments of its four k-steps

	for (int t = 0, kst = 0; t < nt; t++, kst = kst + 1 == KST ? 0 : kst + 1) { // kst: K_t's stage
		const int j0 = jb + t * VLA_FW_BK;
		vla_cp_async_wait<KST - 1>(); // K_t and V_{t-1} are in (K_{t+1}.. and V_t may still be under way)
		vla_fence_proxy_async();
		__syncthreads(); // ... for every thread; the products of K_{t-1} are done
		// K_{t+KST-1} into K_{t-1}'s stage
		if (t + KST - 1 < nt)
			issue(ks0 + (kst == 0 ? KST - 1 : kst - 1) * TB, pk + (t + KST - 1) * tstep, j0 + (KST - 1) * VLA_FW_BK, kb);
		vla_cp_async_commit();

		vla_wgmma_fence();
		const u32 kd = klo + kst * (TB >> 4);
#pragma unroll
		for (int kk = 0; kk < KS; kk++) {
			if (HDP == 80 && kk == 4)
				vla_wgmma_rs<0>(&s[0][0], qf[kk], vla_fw_desc_core(kclo + kst * (TB >> 4), VLA_FW_K_SBO));
			else
				vla_wgmma_rs<0>(&s[0][0], qf[kk], vla_fw_desc(kd + (((kk >> 2) * VLA_FW_HALF + (kk & 3) * 32) >> 4)),
				                kk > 0);
		}
		vla_wgmma_commit();
		if (t > 0) vla_fw_pv<HDP>(o, pa, vlo + ((t - 1) & 1) * (TB >> 4), vclo + ((t - 1) & 1) * (TB >> 4));
		vla_wgmma_commit();
		vla_wgmma_wait<1>(); // S_t
		vla_wgmma_regs<32>(&s[0][0]);
		float corr[2];
		vla_fa_softmax<8, true>(s, corr, mrow, lrow, sl2, j0, khi, hia, hib, causal, qpos0, T.q0, mask_from, mask_to);
		vla_wgmma_wait<0>(); // O += P_{t-1}·V_{t-1}
		vla_wgmma_regs<ND * 4>(&o[0][0]);
		vla_fa_rescale<ND>(o, corr);
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
			pa[kk][0] = vla_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
			pa[kk][1] = vla_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
			pa[kk][2] = vla_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
			pa[kk][3] = vla_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
		}
		__syncthreads(); // every thread is done with V_{t-1} (and, at t = 0, with Q)
		if (t + 1 < nt) issue(vs0 + ((t + 1) & 1) * TB, pv + (t + 1) * tstep, j0 + VLA_FW_BK, vb);
		vla_cp_async_commit();
	}
	if (nt > 0) { // the last tile's P·V
		vla_cp_async_wait<0>();
		vla_fence_proxy_async();
		__syncthreads();
		vla_wgmma_fence();
		vla_fw_pv<HDP>(o, pa, vlo + ((nt - 1) & 1) * (TB >> 4), vclo + ((nt - 1) & 1) * (TB >> 4));
		vla_wgmma_commit();
		vla_wgmma_wait<0>();
		vla_wgmma_regs<ND * 4>(&o[0][0]);
	}
	vla_fa_store<HDP>(o, mrow, lrow, ia, ib, T.q1, h, heads, hd, tq, out, out16, part_o, part_ml);
}
#endif

#define VLA_FLASH_WG_KERNEL(name, HDP, MINB)                                                                          \
	extern "C" __global__ void __launch_bounds__(VLA_FW_THREADS, MINB)                                              \
	    name(float *__restrict__ out, u16 *__restrict__ out16, float *__restrict__ part_o,                        \
	         float *__restrict__ part_ml, const float *__restrict__ q, const void *__restrict__ k,                    \
	         const void *__restrict__ v, int heads, int kvheads, int hd, int tq, int nkv, float sl2, int causal,      \
	         int qpos0, int mask_from, int mask_to, vla_segments segs, u64 hs, int rs, const float *__restrict__ rc,  \
	         const float *__restrict__ rsn) {                                                                      \
		vla_pdl_enter();                                                                                          \
		VLA_FLASH_WG_BODY(HDP)                                                                                    \
	}
#if defined(VLA_WG_BUILT)
#define VLA_FLASH_WG_BODY(HDP)                                                                                         \
	vla_flash_wg<HDP>(out, out16, part_o, part_ml, q, (const u16 *)k, (const u16 *)v, heads, kvheads, hd, tq, nkv, sl2, \
	                  causal, qpos0, mask_from, mask_to, segs, hs, rs, rc, rsn);
#else // not built (not sm_90a): the Go side never launches them (gpu.flashWG)
#define VLA_FLASH_WG_BODY(HDP)
#endif

VLA_FLASH_WG_KERNEL(vla_flash_wg_80, 80, 3)
VLA_FLASH_WG_KERNEL(vla_flash_wg_128, 128, 2)

// vla_kv_to_bf16 rounds K and V [nkv][kvheads*hd] (float) to bf16 copies
// kb, vb [kvheads][nkv][HDP], zero-padded from hd to HDP: the layout the
// pipelined flash kernels copy tiles from, 16 bytes at a time. hd % 4 == 0.
// With rotary tables rc and rs ([nkv, hd/2], not null; hd/2 % 4 == 0) the
// keys are first rotated as vla_rope rotates them (RopeAttention).
extern "C" __global__ void vla_kv_to_bf16(uint4 *__restrict__ kb, uint4 *__restrict__ vb, const float *__restrict__ k,
                                          const float *__restrict__ v, int kvheads, int hd, int hdp, int nkv,
                                          const float *__restrict__ rc, const float *__restrict__ rs) {
	vla_pdl_enter();
	const int c8 = hdp / 8;
	const u64 per = (u64)kvheads * nkv * c8; // chunks of 8 per tensor
	const u64 kstride = (u64)kvheads * hd;
	VLA_FOR(e, 2 * per) {
		const bool isv = e >= per;
		const u64 f = isv ? e - per : e;
		const int c = (int)(f % c8) * 8;
		const u64 hj = f / c8; // kvh * nkv + j
		const int j = (int)(hj % nkv), kvh = (int)(hj / nkv);
		const float *row = (isv ? v : k) + (u64)j * kstride + (u64)kvh * hd, *src = row + c;
		float4 a, b;
		a.x = a.y = a.z = a.w = b.x = b.y = b.z = b.w = 0.0f;
		if (rc && !isv) {
			const u64 t = (u64)j * (hd / 2);
			if (c < hd) a = vla_rope4_at(row, rc + t, rs + t, c, hd);
			if (c + 4 < hd) b = vla_rope4_at(row, rc + t, rs + t, c + 4, hd);
		} else {
			if (c < hd) a = *(const float4 *)src;
			if (c + 4 < hd) b = *(const float4 *)(src + 4);
		}
		uint4 o;
		o.x = vla_pack_bf16x2(a.x, a.y);
		o.y = vla_pack_bf16x2(a.z, a.w);
		o.z = vla_pack_bf16x2(b.x, b.y);
		o.w = vla_pack_bf16x2(b.z, b.w);
		(isv ? vb : kb)[f] = o;
	}
}

// vla_kv_bf16_to_bf16 is vla_kv_to_bf16 for K and V that are bf16 already
// (the CUDA backend's KV caches): the same layout change and zero padding,
// no rounding. hd % 8 == 0.
extern "C" __global__ void vla_kv_bf16_to_bf16(uint4 *__restrict__ kb, uint4 *__restrict__ vb, const u16 *__restrict__ k,
                                               const u16 *__restrict__ v, int kvheads, int hd, int hdp, int nkv) {
	vla_pdl_enter();
	const int c8 = hdp / 8;
	const u64 per = (u64)kvheads * nkv * c8;
	const u64 kstride = (u64)kvheads * hd;
	VLA_FOR(e, 2 * per) {
		const bool isv = e >= per;
		const u64 f = isv ? e - per : e;
		const int c = (int)(f % c8) * 8;
		const u64 hj = f / c8;
		const int j = (int)(hj % nkv), kvh = (int)(hj / nkv);
		uint4 o;
		o.x = o.y = o.z = o.w = 0u;
		if (c < hd) o = *(const uint4 *)((isv ? v : k) + (u64)j * kstride + (u64)kvh * hd + c);
		(isv ? vb : kb)[f] = o;
	}
}
