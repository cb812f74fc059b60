// gemm_rows.cu: y[M,N] = x[M,K] · w[N,K]ᵀ for 2 to 64 rows of x (the
// action expert's 64 tokens, short prompts) and a bf16 or f16 weight, on
// the tensor cores (mma.sync m16n8k16, float accumulators). Every block
// takes 64 columns of one weight and a slice of K (split-K), so that a
// launch spreads a weight over about 256 blocks; up to three weights that
// share x (q, k and v; gate and up) go in one launch, and gate and up can
// leave silu(gate)·up in 16 bits for the down product: an expert
// layer-step takes four launches instead of cuBLAS's six and a SiLU
// kernel. One product at a time it is slower than cuBLAS's wgmma kernels
// (bench/results/cuda-kernels.md run 12: bound by the latency of feeding
// mma.sync from shared memory); the fused launches make up for it.
//
// x arrives already rounded to the weight's type (as the cuBLAS path
// rounds it), so every product is exact in float and only the order of
// the float sums differs from cuBLAS. That order depends on N and K
// alone (the split count is chosen in Go from them), never on which
// block finishes first: each block writes its partial sums to its own
// slot of the workspace, and the last block of a tile to arrive (an
// atomic counter) adds the slots in slot order, then applies the
// epilogue. The counters are left at zero for the next launch.
//
// Modes: 0 y = x·wᵀ (+ bias); 1 y += x·wᵀ (+ bias), the residual add (as
// cuBLAS's beta = 1, then the bias); 2 two weights of one shape, gate and
// up: y16 = silu(gate)·up rounded to the weight's type, as
// vla_silu_mul_bf16 writes it (gate and up, the float products, are kept
// in y[0] and y[1] when a tile takes one block per weight).
//
// Tiles: 64 rows (those past M read as zeros) × 64 columns, K in stages
// of 128 through a 3-stage cp.async pipeline (96 KB of dynamic shared
// memory, two blocks an SM), rows of a stage XOR-swizzled by 16-byte chunk
// so that ldmatrix reads without bank conflicts. Eight warps: each 32
// rows × 32 columns of the tile and half of every stage's k, the halves
// added at the end (two warps a scheduler to hide the mma and ldmatrix
// latencies, in a block that is often alone on its SM). At most
// VLA_ROWS_MAX_SPLITS slices of K a tile: its last block loads all their
// partial sums at once. Once a block's weights are all read, the next
// kernel may be placed (vla_pdl_launch), to load its first weights while
// the tiles' last blocks add the partial sums.
//
// On sm_90a (vla_gemm_rows_wg_*, where NVRTC builds for it) the products
// run on the asynchronous warpgroup MMA instead: the same tiles, stages,
// splits, slots, counters, modes and epilogue, but the two warpgroups each
// take one 64-wide half of every stage's k for the whole 64 × 64 tile with
// four wgmma m64n64k16 straight from shared memory (no ldmatrix: a handful
// of instructions a stage instead of 48 a warp), the stages laid out in
// the 128-byte swizzle that wgmma reads. On the H200 it computes the same
// bits as the mma.sync kernel (the workload's hash is unchanged) and the
// expert's products run in 76 µs a layer against 84
// (bench/results/cuda-kernels.md run 14).

#define VLA_ROWS_BN 64
#define VLA_ROWS_BK 128
#define VLA_ROWS_STAGES 3
#define VLA_ROWS_THREADS 256
#define VLA_ROWS_MAX_SPLITS 8
#define VLA_ROWS_OPS 3
#define VLA_ROWS_TILE (64 * VLA_ROWS_BN) // floats of one partial tile
#define VLA_ROWS_ALIGN 1024               // the wgmma stages' alignment (the swizzle's period)

// vla_rows_args: the weights of one launch. Op i has n[i] columns in
// ceil(n[i]/64) tiles of splits[i] blocks each; its blocks start at
// block[i] (block[i] = the grid for i >= nops), its tiles' counters at
// tile[i] and their partial tiles at slot[i] (mode 2: op 0's for both).
struct vla_rows_args {
	const u16 *w[VLA_ROWS_OPS];
	float *y[VLA_ROWS_OPS];
	const void *bias[VLA_ROWS_OPS];
	int bdt[VLA_ROWS_OPS];
	int n[VLA_ROWS_OPS];
	int splits[VLA_ROWS_OPS];
	int block[VLA_ROWS_OPS + 1];
	int tile[VLA_ROWS_OPS];
	int slot[VLA_ROWS_OPS];
	int pad;
	u16 *y16;   // mode 2's output [M, n[0]]
	float *ws;  // partial tiles: a tile's arrivals, VLA_ROWS_TILE floats each
	u32 *count; // arrivals by tile
};

template <bool F16> __device__ __forceinline__ void vla_mma16(float *d, const u32 *a, u32 b0, u32 b1) {
	if (F16) {
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		             "{%0,%1,%2,%3};"
		             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
	} else {
		vla_mma_bf16(d, a, b0, b1);
	}
}

// A stage holds 64 rows of VLA_ROWS_BK 16-bit values (of x or of w),
// VLA_ROWS_CPR 16-byte chunks a row; chunk ch of row r sits at chunk
// ch ^ (r & 7) (the eight rows that one ldmatrix matrix reads land in
// eight different bank groups). With SW (wgmma) a stage is two halves of
// 64 k, 64 rows of 128 bytes each, chunk c of a half's row r at c ^ (r &
// 7): the canonical K-major layout with the 128-byte swizzle (rows of an
// 8-row group 128 bytes apart, groups 1,024 apart). Thread t copies chunk
// t % CPR of rows t / CPR + RS·i, i < NC, of each operand: the same
// chunk and swizzle in every stage, so that the addresses are worked out
// once (a stage's copies are then an add and a cp.async each).
#define VLA_ROWS_CPR (VLA_ROWS_BK / 8)                 // chunks a row
#define VLA_ROWS_RB (VLA_ROWS_BK * 2)                  // bytes a row
#define VLA_ROWS_RS (VLA_ROWS_THREADS / VLA_ROWS_CPR)  // rows one round of copies covers
#define VLA_ROWS_NC (64 / VLA_ROWS_RS)                 // rounds: copies a thread and stage
struct vla_rows_stream {
	const char *src[VLA_ROWS_NC]; // the thread's chunks at the slice's first k (a valid row where out of range)
	u32 size[VLA_ROWS_NC];        // 16, or 0 for a row out of range (read as zeros)
	u32 dst;                      // the first chunk's shared offset within a stage
	int kcol;                     // the chunk's column at the slice's first k
};

template <bool SW>
__device__ __forceinline__ vla_rows_stream vla_rows_stream_at(const u16 *__restrict__ a, int r0, int rows, int K, int k0) {
	const int r = threadIdx.x / VLA_ROWS_CPR, ch = threadIdx.x % VLA_ROWS_CPR;
	vla_rows_stream s;
#pragma unroll
	for (int i = 0; i < VLA_ROWS_NC; i++) {
		const int ri = r0 + r + VLA_ROWS_RS * i;
		const bool ok = ri < rows;
		s.src[i] = (const char *)(a + (u64)(ok ? ri : r0) * K + k0 + ch * 8);
		s.size[i] = ok ? 16 : 0;
	}
	if (SW) s.dst = (u32)((ch >> 3) * 64 * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
	else s.dst = (u32)(r * VLA_ROWS_RB + ((ch ^ (r & 7)) << 4));
	s.kcol = k0 + ch * 8;
	return s;
}

// vla_rows_copy queues this thread's copies of the stage kofs columns
// past the slice's first k into the stage at smem; columns from K on read
// as zeros (K's last stage may be part of one).
template <bool SW>
__device__ __forceinline__ void vla_rows_copy(const vla_rows_stream &s, u32 smem, int kofs, int K) {
	const bool kin = s.kcol + kofs < K;
	constexpr u32 step = VLA_ROWS_RS * (SW ? 128 : VLA_ROWS_RB); // a round's rows further on
#pragma unroll
	for (int i = 0; i < VLA_ROWS_NC; i++)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem + s.dst + step * i),
		             "l"(kin ? s.src[i] + 2 * kofs : s.src[i]), "r"(kin ? s.size[i] : 0u)
		             : "memory");
}

// vla_rows_sum sets v to the sum of the S partial tiles' float4 at p (the
// tiles TILE floats apart), added in slot order; every load is issued
// before the first add.
template <int TILE> __device__ __forceinline__ void vla_rows_sum(float *v, const float *p, int S) {
	float4 q[VLA_ROWS_MAX_SPLITS];
#pragma unroll
	for (int j = 0; j < VLA_ROWS_MAX_SPLITS; j++)
		if (j < S) q[j] = __ldcg((const float4 *)(p + (u64)j * TILE));
	float4 a = q[0];
#pragma unroll
	for (int j = 1; j < VLA_ROWS_MAX_SPLITS; j++)
		if (j < S) a.x += q[j].x, a.y += q[j].y, a.z += q[j].z, a.w += q[j].w;
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}

// vla_gemm_rows is the kernel (see the top of the file); early: the
// weights are written by no kernel, so the first stages' weight copies go
// before the wait for the kernel ahead. WG: the wgmma variant (sm_90a).
template <bool F16, bool WG>
__device__ __forceinline__ void vla_gemm_rows(const vla_rows_args &p, const u16 *__restrict__ x, int M, int K, int mode,
                                              int early) {
	constexpr int BN = VLA_ROWS_BN, STAGES = VLA_ROWS_STAGES; // columns a tile, the pipeline's depth
	constexpr int TILE = VLA_ROWS_TILE;                         // floats of a partial tile
	constexpr int NACC = 32;                                    // a thread's accumulators
	extern __shared__ __align__(128) u16 vla_rows_smem[]; // A's stages, then B's
	u16 *sa = vla_rows_smem;
	if (WG) { // the stages start at a multiple of VLA_ROWS_ALIGN (the launch asks for that much more)
		const u32 a0 = vla_smem_addr(sa);
		sa += (((a0 + VLA_ROWS_ALIGN - 1) & ~(u32)(VLA_ROWS_ALIGN - 1)) - a0) / 2;
	}
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int b = blockIdx.x;
	int op = 0;
#pragma unroll
	for (int i = 1; i < VLA_ROWS_OPS; i++)
		if (b >= p.block[i]) op = i;
	const int S = p.splits[op], N = p.n[op];
	const int local = b - p.block[op], t = local / S, s = local - t * S;
	const int n0 = t * BN;
	const int kb = (K + VLA_ROWS_BK - 1) / VLA_ROWS_BK;
	const int kb0 = (int)((long long)kb * s / S), nk = (int)((long long)kb * (s + 1) / S) - kb0;
	const u32 stageA = 64 * VLA_ROWS_RB, stageB = BN * VLA_ROWS_RB;
	const u32 sA = vla_smem_addr(sa), sB = sA + STAGES * stageA;

	const vla_rows_stream wb = vla_rows_stream_at<WG>(p.w[op], n0, N, K, kb0 * VLA_ROWS_BK);
	if (early) {
#pragma unroll
		for (int st = 0; st < STAGES - 1; st++)
			if (st < nk) vla_rows_copy<WG>(wb, sB + st * stageB, st * VLA_ROWS_BK, K);
	}
	vla_pdl_enter();
	const vla_rows_stream xa = vla_rows_stream_at<WG>(x, 0, M, K, kb0 * VLA_ROWS_BK);
#pragma unroll
	for (int st = 0; st < STAGES - 1; st++) {
		if (st < nk) {
			if (!early) vla_rows_copy<WG>(wb, sB + st * stageB, st * VLA_ROWS_BK, K);
			vla_rows_copy<WG>(xa, sA + st * stageA, st * VLA_ROWS_BK, K);
		}
		vla_cp_async_commit();
	}

	// Warp roles (mma.sync): rows 32wm.., columns 32wn.. of the tile, and
	// of each stage's 16-wide steps of k the half of group kg. (wgmma: the
	// warpgroup kg takes the whole tile and the stage's half kg of k.) The
	// groups' sums are added at the end, group 0's first.
	const int wm = warp & 1, wn = (warp >> 1) & 1, kg = warp >> 2;
	const bool active = WG || 32 * wm < M; // a warp whose rows are all past M only loads
	float acc[NACC];
#pragma unroll
	for (int i = 0; i < NACC; i++) acc[i] = 0.f;

	// ldmatrix addresses of this lane: A's matrices are (rows 0-7, k 0-7),
	// (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15), the
	// a0..a3 of mma; B's (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
	// (n 8-15, k 8-15), b0 b1 of two 8-column tiles. The lane's row r
	// has r & 7 = lane & 7, so chunk 2kk + c of it sits at chunk 2kk ^ (c
	// ^ (lane & 7)) (c is 0 or 1): byte (32kk) ^ xo, kk = KH·kg + h:
	// offA[h], offB[h].
	const int ar = (lane & 7) + ((lane >> 3) & 1) * 8, br = (lane & 7) + (lane >> 4) * 8;
	const u32 xoa = (u32)(((lane >> 4) ^ (lane & 7)) << 4), xob = (u32)((((lane >> 3) & 1) ^ (lane & 7)) << 4);
#define VLA_ROWS_KH (VLA_ROWS_BK / 32) // 16-wide steps of k a warp takes a stage
	u32 offA[VLA_ROWS_KH], offB[VLA_ROWS_KH];
#pragma unroll
	for (int h = 0; h < VLA_ROWS_KH; h++) {
		offA[h] = (u32)(32 * (VLA_ROWS_KH * kg + h)) ^ xoa;
		offB[h] = (u32)(32 * (VLA_ROWS_KH * kg + h)) ^ xob;
	}
	const u32 aRow0 = (u32)(32 * wm + ar) * VLA_ROWS_RB, bRow0 = (u32)(32 * wn + br) * VLA_ROWS_RB;

	u32 rd = 0, wr = STAGES - 1; // the stages read and refilled
	for (int i = 0; i < nk; i++) {
		vla_cp_async_wait<STAGES - 2>();
#if defined(VLA_WG_BUILT)
		if (WG) vla_fence_proxy_async();
#endif
		__syncthreads();
		if (i + STAGES - 1 < nk) {
			const int kofs = (i + STAGES - 1) * VLA_ROWS_BK;
			vla_rows_copy<WG>(wb, sB + wr * stageB, kofs, K);
			vla_rows_copy<WG>(xa, sA + wr * stageA, kofs, K);
		}
		vla_cp_async_commit();
		wr = wr + 1 == STAGES ? 0 : wr + 1;
		const u32 ra = sA + rd * stageA, rb = sB + rd * stageB;
		rd = rd + 1 == STAGES ? 0 : rd + 1;
		if (WG) {
#if defined(VLA_WG_BUILT)
			// The warpgroup's half of the stage: 4 steps of 16 k, 32
			// bytes apart in the swizzled rows. Waited for before the
			// next stage's copies may overwrite the stage.
			vla_wgmma_fence();
#pragma unroll
			for (int h = 0; h < VLA_ROWS_KH; h++)
				vla_wgmma<F16>(acc, vla_wgmma_desc(ra + kg * 64 * 128 + 32 * h),
				               vla_wgmma_desc(rb + kg * BN * 128 + 32 * h));
			vla_wgmma_commit_wait(acc);
#endif
			continue;
		}
		if (!active) continue;
#pragma unroll
		for (int h = 0; h < VLA_ROWS_KH; h++) {
			u32 a[2][4], bf[4][2];
#pragma unroll
			for (int mt = 0; mt < 2; mt++) vla_ldmatrix_x4(a[mt], ra + aRow0 + 16 * VLA_ROWS_RB * mt + offA[h]);
#pragma unroll
			for (int np = 0; np < 2; np++) {
				u32 q[4];
				vla_ldmatrix_x4(q, rb + bRow0 + 16 * VLA_ROWS_RB * np + offB[h]);
				bf[2 * np][0] = q[0];
				bf[2 * np][1] = q[1];
				bf[2 * np + 1][0] = q[2];
				bf[2 * np + 1][1] = q[3];
			}
#pragma unroll
			for (int mt = 0; mt < 2; mt++)
#pragma unroll
				for (int nt = 0; nt < 4; nt++) vla_mma16<F16>(acc + mt * 16 + nt * 4, a[mt], bf[nt][0], bf[nt][1]);
		}
	}

	// The block's weights are all read: the next kernel may be placed as
	// the blocks that are not a tile's last exit, and load its first
	// weights while the last ones add the partial sums (it still waits
	// for this kernel to finish before it reads what this one writes).
	vla_pdl_launch();

	// Group 1's sums to group 0 through the first stages (no copy is
	// pending: the last stages' groups were empty).
	vla_cp_async_wait<0>();
	__syncthreads();
	float *xs = (float *)sa + (warp & 3) * 32 * NACC + lane;
	if (kg == 1) {
#pragma unroll
		for (int i = 0; i < NACC; i++) xs[i * 32] = acc[i];
	}
	__syncthreads();
	if (kg == 0) {
#pragma unroll
		for (int i = 0; i < NACC; i++) acc[i] += xs[i * 32];
	}

	// Accumulator i of a group-0 thread: row vr(i), column vc(i) of the
	// tile; i and i + 1 (i even) are columns c and c + 1 of one row.
	// mma.sync: fragment (mt, nt) = (i / 16, i / 4 % 4), element e = i %
	// 4 at row 32wm + 16mt + g + 8(e/2), column 32wn + 8nt + 2tq + e%2.
	// wgmma: n8-tile j = i / 4, element e = i % 4 at row 16(warp) + g +
	// 8(e/2), column 8j + 2tq + e%2.
	const int g = lane >> 2, tq = lane & 3;
	auto vr = [&](int i) { return WG ? 16 * (warp & 3) + g + 8 * ((i >> 1) & 1) : 32 * wm + 16 * (i >> 4) + g + 8 * ((i >> 1) & 1); };
	auto vc = [&](int i) { return WG ? 8 * (i >> 2) + 2 * tq + (i & 1) : 32 * wn + 8 * ((i >> 2) & 3) + 2 * tq + (i & 1); };
	float *__restrict__ y = p.y[op];
	const int o0 = mode == 2 ? 0 : op; // the op whose counters and slots the tile uses
	const int arrivals = mode == 2 ? 2 * S : S;
	if (S == 1) {
		// The whole sum: straight to y (mode 2: as the gate or up product).
		const void *bias = mode == 2 ? 0 : p.bias[op];
		if (kg == 0)
#pragma unroll
			for (int i = 0; i < NACC; i++) {
				const int r = vr(i), n = n0 + vc(i);
				if (r < M && n < N) {
					const u64 at = (u64)r * N + n;
					float v = acc[i];
					if (mode == 1) v = y[at] + v;
					if (bias) v += vla_load(bias, p.bdt[op], n);
					y[at] = v;
				}
			}
		if (mode != 2) return;
	} else if (kg == 0) {
		float *part = p.ws + (u64)(p.slot[o0] + t * arrivals + (mode == 2 ? op * S + s : s)) * TILE;
#pragma unroll
		for (int i = 0; i < NACC; i += 2) *(float2 *)(part + vr(i) * BN + vc(i)) = make_float2(acc[i], acc[i + 1]);
	}

	// Arrive; the last block of the tile finishes it. (The flag lives in
	// the first stage: every warp is past its last read of the stages at
	// the first barrier, and no copy is pending.)
	const int ct = p.tile[o0] + t;
	volatile int *last = (volatile int *)sa;
	__threadfence();
	__syncthreads();
	if (tid == 0) *last = atomicAdd(p.count + ct, 1u) == (u32)arrivals - 1;
	__syncthreads();
	if (!*last) return;
	__threadfence();
	const float *ws = p.ws + (u64)(p.slot[o0] + t * arrivals) * TILE;
	const int end = min(M, 64) * (BN / 4); // rows past M are not written
#pragma unroll 2
	for (int e4 = tid; e4 < end; e4 += VLA_ROWS_THREADS) {
		const int r = e4 / (BN / 4), c = (e4 % (BN / 4)) * 4;
		float v[4], u[4];
		if (S == 1) { // mode 2: the products are in y[0] and y[1]
			const u64 at = (u64)r * N + n0 + c;
			if (N % 4 == 0 && n0 + c + 4 <= N && (((u64)p.y[0] | (u64)p.y[1]) & 15) == 0) {
				const float4 a = __ldcg((const float4 *)(p.y[0] + at)), b = __ldcg((const float4 *)(p.y[1] + at));
				v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
				u[0] = b.x, u[1] = b.y, u[2] = b.z, u[3] = b.w;
			} else {
#pragma unroll
				for (int j = 0; j < 4; j++) {
					const u64 aj = n0 + c + j < N ? at + j : 0;
					v[j] = __ldcg(p.y[0] + aj);
					u[j] = __ldcg(p.y[1] + aj);
				}
			}
		} else {
			vla_rows_sum<TILE>(v, ws + e4 * 4, S);
			if (mode == 2) vla_rows_sum<TILE>(u, ws + (u64)S * TILE + e4 * 4, S);
		}
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int n = n0 + c + j;
			if (n >= N) break;
			const u64 at = (u64)r * N + n;
			if (mode == 2) {
				p.y16[at] = (u16)vla_round16<F16>(vla_silu1(v[j]) * u[j]);
				continue;
			}
			float o = v[j];
			if (mode == 1) o = y[at] + o;
			if (p.bias[op]) o += vla_load(p.bias[op], p.bdt[op], n);
			y[at] = o;
		}
	}
	if (tid == 0) p.count[ct] = 0;
}

#define VLA_ROWS_KERNEL(name, F16, WG)                                                                                 \
	extern "C" __global__ void __launch_bounds__(VLA_ROWS_THREADS)                                                    \
	    name(vla_rows_args p, const u16 *__restrict__ x, int M, int K, int mode, int early) {                         \
		vla_gemm_rows<F16, WG>(p, x, M, K, mode, early);                                                           \
	}

VLA_ROWS_KERNEL(vla_gemm_rows_bf16, false, false)
VLA_ROWS_KERNEL(vla_gemm_rows_f16, true, false)
#if defined(VLA_WG_BUILT)
VLA_ROWS_KERNEL(vla_gemm_rows_wg_bf16, false, true)
VLA_ROWS_KERNEL(vla_gemm_rows_wg_f16, true, true)
#else
// Not built (not sm_90a): the Go side never launches them (gpu.rowsWG).
#define VLA_ROWS_UNBUILT(name)                                                                                          \
	extern "C" __global__ void name(vla_rows_args p, const u16 *__restrict__ x, int M, int K, int mode, int early) {  \
		vla_pdl_enter();                                                                                           \
	}
VLA_ROWS_UNBUILT(vla_gemm_rows_wg_bf16)
VLA_ROWS_UNBUILT(vla_gemm_rows_wg_f16)
#endif
