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

// Programmatic dependent launch (sm_90 and later). Go launches the kernels
// of this module with it (driver.LaunchPDL): a kernel's blocks may be
// placed on the SMs before the kernel ahead of it in the stream has
// finished, once every block of that kernel has called vla_pdl_launch or
// exited. vla_pdl_enter (or vla_pdl_launch_enter) MUST come first in every
// kernel, before any global memory is read or written: it waits until the
// kernel ahead has finished and its writes are visible. Because every
// kernel waits before it exits, "finished" is transitive: the wait also
// covers everything queued before the kernel ahead. A kernel may read
// memory that no kernel writes (weights) before it waits: see vla_gemv.
//
// Where a kernel calls vla_pdl_launch decides when the next one is placed.
// Early is right only where this kernel leaves most of the GPU idle (a
// one-block norm ahead of a GEMV, which then loads its first weights while
// the norm runs): blocks placed while a big kernel still fills the SMs
// land where there is room, not evenly, and a GEMV of one block an SM
// slows down when two share one. So most kernels never call it (the next
// kernel is placed as their last blocks exit) and the GEMVs call it after
// their loads. Launched without the attribute, or before sm_90, both are
// no-ops.
__device__ __forceinline__ void vla_pdl_launch() {
#if __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void vla_pdl_enter() {
#if __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// vla_pdl_launch_enter lets the next kernel be placed now, then waits: for
// the latency-bound kernels that run on a few SMs ahead of a GEMV.
__device__ __forceinline__ void vla_pdl_launch_enter() {
	vla_pdl_launch();
	vla_pdl_enter();
}
// vla_pdl_launch_enter_if is vla_pdl_launch_enter where launch is set,
// else vla_pdl_enter.
__device__ __forceinline__ void vla_pdl_launch_enter_if(int launch) {
	if (launch) vla_pdl_launch();
	vla_pdl_enter();
}

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

// vla_load4 reads elements i, ..., i + 3 of a tensor of type dt as floats
// (vla_load's values): with vec (p + i aligned to the four's bytes), one
// 16- or 8-byte load, else four.
__device__ __forceinline__ float4 vla_load4(const void *p, int dt, u64 i, bool vec) {
	float4 r;
	if (!vec) {
		r.x = vla_load(p, dt, i);
		r.y = vla_load(p, dt, i + 1);
		r.z = vla_load(p, dt, i + 2);
		r.w = vla_load(p, dt, i + 3);
		return r;
	}
	if (dt != VLA_BF16 && dt != VLA_F16) return *(const float4 *)((const float *)p + i);
	const uint2 u = *(const uint2 *)((const u16 *)p + i);
	const u16 h[4] = {(u16)(u.x & 0xffffu), (u16)(u.x >> 16), (u16)(u.y & 0xffffu), (u16)(u.y >> 16)};
	float f[4];
#pragma unroll
	for (int j = 0; j < 4; j++) f[j] = dt == VLA_BF16 ? vla_bf16_to_f32(h[j]) : vla_f16_to_f32(h[j]);
	r.x = f[0], r.y = f[1], r.z = f[2], r.w = f[3];
	return r;
}

// vla_load4_ok says whether vla_load4 may read tensors of type dt at p four
// elements at a time from any multiple of 4.
__device__ __forceinline__ bool vla_load4_ok(const void *p, int dt) {
	return ((u64)p & (dt == VLA_BF16 || dt == VLA_F16 ? 7 : 15)) == 0;
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

// vla_pack_bf16x2 rounds lo and hi to bf16 (nearest, ties to even) and
// packs them: lo in the low half, as a bf16x2 register of the tensor cores
// holds the element of the smaller index.
__device__ __forceinline__ u32 vla_pack_bf16x2(float lo, float hi) {
	u32 r;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}

// vla_pack_f16x2 is vla_pack_bf16x2 for f16.
__device__ __forceinline__ u32 vla_pack_f16x2(float lo, float hi) {
	u32 r;
	asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}

// vla_warp_max is the maximum of v over the 32 lanes; every lane gets it.
__device__ __forceinline__ float vla_warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// vla_smem_addr is the shared-space address of a generic pointer into
// shared memory, as ldmatrix wants it.
__device__ __forceinline__ u32 vla_smem_addr(const void *p) {
	u32 a;
	asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
	return a;
}

// vla_mma_bf16 is d += a·b on the tensor cores for one warp: a 16×16 bf16
// (row-major fragment, 4 registers), b 16×8 bf16 (column fragment, 2
// registers), d 16×8 float (4 registers). Fragment layouts (lane = 4g+t):
// a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..];
// b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]; d0,d1 = D[g][2t..2t+1],
// d2,d3 = D[g+8][2t..2t+1].
__device__ __forceinline__ void vla_mma_bf16(float *d, const u32 *a, u32 b0, u32 b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The ldmatrix and cp.async helpers take shared-space addresses
// (vla_smem_addr of the array once, plus byte offsets): converting a
// generic pointer at every call costs instructions in the inner loops.

// vla_ldmatrix_x4_trans loads four 8×8 bf16 matrices from shared memory,
// transposed: lanes 8i..8i+7 give the addresses of the 8 rows of matrix
// i, and lane 4g+t receives M_i[2t][g] and M_i[2t+1][g] in register i.
__device__ __forceinline__ void vla_ldmatrix_x4_trans(u32 *r, u32 addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr)
	             : "memory");
}

// cp.async: 16-byte copies from global to shared memory that run while the
// thread goes on; src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void vla_cp_async16(u32 smem, const void *gmem, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0)
	             : "memory");
}

// vla_ex2 is 2^x by the hardware's approximation with subnormal results
// flushed to zero (exp2f also handles inputs below -126 to produce
// subnormals, which costs three more instructions an element; the
// softmax's weights that small add nothing to its sums).
__device__ __forceinline__ float vla_ex2(float x) {
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

__device__ __forceinline__ void vla_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// vla_cp_async_wait_all waits for this thread's copies; a __syncthreads
// after it makes every thread's copies visible to the block.
__device__ __forceinline__ void vla_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// vla_cp_async_wait waits until at most N of this thread's newest groups
// of copies are still under way.
template <int N> __device__ __forceinline__ void vla_cp_async_wait() {
	asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// The asynchronous warpgroup MMA (sm_90a; VLA_WG_BUILT where the program
// is compiled for it): D[64×64] (+)= A[64×16]·B[16×64] for the 128 threads
// of a warpgroup. D is 32 float registers a thread: thread 32w + 4g + q
// holds rows 16w + g and 16w + g + 8, columns 8j + 2q and 8j + 2q + 1 of
// n8-tile j (d[4j..4j+3], as mma.sync's m16n8 fragments). B is in shared
// memory (a descriptor); A is in shared memory too (vla_wgmma) or in four
// registers a thread laid out as mma.sync's m16n8k16 A fragment of the
// thread's warp's 16 rows (vla_wgmma_rs_tb). acc = 0 sets D to the
// product instead of adding it. Issued, not waited for: see
// vla_wgmma_commit, vla_wgmma_wait and vla_wgmma_commit_wait.
#define VLA_WGMMA_D32                                                                                                  \
	"+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),          \
	    "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),           \
	    "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),          \
	    "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define VLA_WGMMA_D32_LIST                                                                                             \
	"{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                             \
	"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define VLA_WGMMA_M64N64K16(TY)                                                                                        \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                             \
	             "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " VLA_WGMMA_D32_LIST                           \
	             ", %32, %33, p, 1, 1, 0, 0;\n}"                                                                          \
	             : VLA_WGMMA_D32                                                                                          \
	             : "l"(da), "l"(db), "r"(acc))

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VLA_WG_BUILT 1
template <bool F16> __device__ __forceinline__ void vla_wgmma(float *d, u64 da, u64 db, int acc = 1) {
	if (F16) VLA_WGMMA_M64N64K16("f16");
	else VLA_WGMMA_M64N64K16("bf16");
}
// vla_wgmma_rs: A (bf16) from registers a[4]; B (bf16) in shared memory,
// K-major (TB = 0, as vla_wgmma_desc describes) or N-major (TB = 1:
// transposed, the 64 columns of a row of k contiguous, as
// vla_wgmma_desc_mn describes).
template <int TB> __device__ __forceinline__ void vla_wgmma_rs(float *d, const u32 *a, u64 db, int acc = 1) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " VLA_WGMMA_D32_LIST
	             ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}"
	             : VLA_WGMMA_D32
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}
// vla_wgmma_rs_n16 is vla_wgmma_rs for D[64×16] (eight registers a
// thread, n8-tiles 0 and 1 of the same layout).
template <int TB> __device__ __forceinline__ void vla_wgmma_rs_n16(float *d, const u32 *a, u64 db, int acc = 1) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}"
	             ", {%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));
}
// vla_wgmma_desc describes a K-major operand tile at shared address addr:
// rows of 64 16-bit values (128 bytes), 16-byte chunk c of row r at c ^ (r
// & 7), 8-row groups 1,024 bytes apart (the 128-byte swizzle); addr is the
// tile's 1,024-aligned base plus 32 bytes a k16 step.
__device__ __forceinline__ u64 vla_wgmma_desc(u32 addr) {
	return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
// vla_wgmma_desc_mn describes an N-major B tile laid out as vla_wgmma_desc's
// rows, a row per k (its 64 n contiguous): groups of 8 k 1,024 bytes apart
// (the stride byte offset), blocks of 64 n 8,192 apart (the leading byte
// offset: unused by n64); addr is the 1,024-aligned base plus 2,048 bytes a
// k16 step.
__device__ __forceinline__ u64 vla_wgmma_desc_mn(u32 addr) {
	return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(8192 >> 4) << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ void vla_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void vla_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// vla_wgmma_wait waits until at most N of the warpgroup's newest groups
// are under way.
template <int N> __device__ __forceinline__ void vla_wgmma_wait() {
	asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// vla_wgmma_regs tells the compiler that the n registers at d may have
// changed (the accumulators of a group just waited for).
template <int N> __device__ __forceinline__ void vla_wgmma_regs(float *d) {
#pragma unroll
	for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// vla_wgmma_commit_wait ends the warpgroup's batch of wgmma and waits for
// it; then d (the 32 accumulators) may be read again.
__device__ __forceinline__ void vla_wgmma_commit_wait(float *d) {
	vla_wgmma_commit();
	vla_wgmma_wait<0>();
	vla_wgmma_regs<32>(d);
}
// The copies by cp.async (the generic proxy) are made visible to wgmma's
// reads (the async proxy).
__device__ __forceinline__ void vla_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
#endif

// The block norms (norm.cu, fused.cu) read a thread's elements i, i+blockDim, ... in
// batches of VLA_NORM_U, every load of a batch issued before the first
// is used (one memory round trip a batch, not one an element), and sum
// them in that order.
#define VLA_NORM_U 8

// vla_norm_sumsq returns the thread's sum of squares of row xr of n, in
// double; with ADD it first sets xr[i] += dr[i] and squares the sum.
template <bool ADD>
__device__ __forceinline__ double vla_norm_sumsq(float *xr, const float *dr, int n) {
	const int bd = blockDim.x;
	double ss = 0.0;
	int i = threadIdx.x;
	for (; i + (VLA_NORM_U - 1) * bd < n; i += VLA_NORM_U * bd) {
		float v[VLA_NORM_U];
#pragma unroll
		for (int u = 0; u < VLA_NORM_U; u++) v[u] = ADD ? xr[i + u * bd] + dr[i + u * bd] : xr[i + u * bd];
#pragma unroll
		for (int u = 0; u < VLA_NORM_U; u++) {
			if (ADD) xr[i + u * bd] = v[u];
			ss += (double)v[u] * (double)v[u];
		}
	}
	for (; i < n; i += bd) {
		const float v = ADD ? xr[i] + dr[i] : xr[i];
		if (ADD) xr[i] = v;
		ss += (double)v * (double)v;
	}
	return ss;
}

// vla_store_as writes v to p: as float, or rounded to bf16 (F16: f16) for
// a 16-bit output, the rounding of vla_f32_to_bf16 / vla_f32_to_f16.
template <bool F16> __device__ __forceinline__ void vla_store_as(float *p, float v) { *p = v; }
template <bool F16> __device__ __forceinline__ void vla_store_as(u16 *p, float v) {
	*p = F16 ? vla_f32_to_f16(v) : vla_f32_to_bf16(v);
}

// vla_norm_scale writes yr[i] = w[i] · (xr[i] · s) for the thread's
// elements (yr may be xr), as float or rounded to a 16-bit type (T = u16;
// F16 for f16, else bf16).
template <typename T = float, bool F16 = false>
__device__ __forceinline__ void vla_norm_scale(T *yr, const float *xr, const void *__restrict__ w, int wdt, int n,
                                               float s) {
	const int bd = blockDim.x;
	int i = threadIdx.x;
	for (; i + (VLA_NORM_U - 1) * bd < n; i += VLA_NORM_U * bd) {
		float v[VLA_NORM_U], wv[VLA_NORM_U];
#pragma unroll
		for (int u = 0; u < VLA_NORM_U; u++) {
			v[u] = xr[i + u * bd];
			wv[u] = vla_load(w, wdt, i + u * bd);
		}
#pragma unroll
		for (int u = 0; u < VLA_NORM_U; u++) vla_store_as<F16>(yr + i + u * bd, __fmul_rn(wv[u], __fmul_rn(v[u], s)));
	}
	for (; i < n; i += bd) vla_store_as<F16>(yr + i, __fmul_rn(vla_load(w, wdt, i), __fmul_rn(xr[i], s)));
}

// vla_ldmatrix_x4 loads four 8×8 16-bit matrices from shared memory: lanes
// 8i..8i+7 give the addresses of the 8 rows of matrix i, and lane 4g+t
// receives M_i[g][2t] and M_i[g][2t+1] in register i.
__device__ __forceinline__ void vla_ldmatrix_x4(u32 *r, u32 addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr)
	             : "memory");
}

// vla_ldmatrix_x2 is vla_ldmatrix_x4 for two matrices (the addresses of
// lanes 0-15 are used).
__device__ __forceinline__ void vla_ldmatrix_x2(u32 *r, u32 addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
	             : "=r"(r[0]), "=r"(r[1])
	             : "r"(addr)
	             : "memory");
}

// vla_rmsnorm_warp normalizes one row of n (x into y, which may be x) with
// one warp: the per-lane double sum of squares, the warp sum, and each
// element scaled as vla_rmsnorm does (vla_rmsnorm_rows, vla_qk_norm_rope).
__device__ __forceinline__ void vla_rmsnorm_warp(float *yr, const float *xr, const void *__restrict__ w, int wdt, int n,
                                                 float eps, int lane) {
	double ss = 0.0;
	for (int i = lane; i < n; i += 32) ss += (double)xr[i] * (double)xr[i];
	ss = vla_warp_sum_d(ss);
	const float ms = (float)(ss / (double)n);
	const float s = (float)(1.0 / sqrt((double)(ms + eps)));
	for (int i = lane; i < n; i += 32) yr[i] = __fmul_rn(vla_load(w, wdt, i), __fmul_rn(xr[i], s));
}

// vla_qk_head128 is the per-head RMSNorm (weight w) then rotary embedding
// (tables c, s) of one head of 128 held by a warp, lane l holding elements
// l + 32u in e[u]: vla_qk_norm_rope's sums, products and roundings (each
// rotation pair (i, i + 64) is e[u], e[u + 2] of one lane). Every lane of
// the warp must call it.
__device__ __forceinline__ void vla_qk_head128(float *e, const float *w, const float *c, const float *s, float eps) {
	double ss = 0.0;
#pragma unroll
	for (int u = 0; u < 4; u++) ss += (double)e[u] * (double)e[u];
	ss = vla_warp_sum_d(ss);
	const float ms = (float)(ss / 128.0);
	const float sc = (float)(1.0 / sqrt((double)(ms + eps)));
#pragma unroll
	for (int u = 0; u < 4; u++) e[u] = __fmul_rn(w[u], __fmul_rn(e[u], sc));
#pragma unroll
	for (int u = 0; u < 2; u++) {
		const float a = e[u], b = e[u + 2];
		e[u] = __fsub_rn(__fmul_rn(a, c[u]), __fmul_rn(b, s[u]));
		e[u + 2] = __fadd_rn(__fmul_rn(b, c[u]), __fmul_rn(a, s[u]));
	}
}

// vla_rope_pair rotates (u, v) = (x[i], x[i + half]) by (c, s), exactly as
// vla_rope's scalar path (rope.cu): each product rounded before the sum.
__device__ __forceinline__ void vla_rope_pair(float &u, float &v, float c, float s) {
	const float a = __fsub_rn(__fmul_rn(u, c), __fmul_rn(v, s));
	v = __fadd_rn(__fmul_rn(v, c), __fmul_rn(u, s));
	u = a;
}

// vla_rope4_at is element c..c+3 (c % 4 == 0) of row x rotated by the
// tables' row ct, st (hd/2 a multiple of 4, x, ct and st 16-byte
// aligned): the bits vla_rope leaves there.
__device__ __forceinline__ float4 vla_rope4_at(const float *x, const float *ct, const float *st, int c, int hd) {
	const int half = hd / 2, i = c < half ? c : c - half;
	float4 u = *(const float4 *)(x + i), v = *(const float4 *)(x + i + half);
	const float4 cc = *(const float4 *)(ct + i), ss = *(const float4 *)(st + i);
	vla_rope_pair(u.x, v.x, cc.x, ss.x);
	vla_rope_pair(u.y, v.y, cc.y, ss.y);
	vla_rope_pair(u.z, v.z, cc.z, ss.z);
	vla_rope_pair(u.w, v.w, cc.w, ss.w);
	return c < half ? u : v;
}
