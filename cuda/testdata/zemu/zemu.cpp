// zemu.cpp runs the bf16z decode kernels (cuda/kernels/bf16z.cu, included
// as it is) on the CPU, for TestZKernelsOnCPU: a coroutine per CUDA thread
// of a block, the blocks one after another; __syncthreads is a barrier of
// the block, and the warp intrinsics exchange the lanes' values through a
// barrier of the warp, as the hardware does when every lane of the mask
// calls them (the kernels' contract). It checks the kernels' C++ and their
// logic, not the GPU's speed.
//
//	zemu warp|serial SRC JOBS NJOBS DST_BYTES SRC_BYTES OUT
//
// SRC holds the compressed bytes, JOBS the job table (a file of its own),
// DST_BYTES the destination, filled with 0xA5 first, SRC_BYTES the bytes
// the kernel is told SRC has. It writes the destination to OUT and prints
// the status word: "failed FIRST_COMPLEMENT codes".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <ucontext.h>
#include <vector>

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3emu {
	u32 x, y, z;
};
static dim3emu threadIdx, blockIdx;
static dim3emu blockDim, gridDim;

struct uint4 {
	u32 x, y, z, w;
};

using std::min;

static void vla_pdl_enter() {}

// The threads of a block are coroutines (ucontext) of one OS thread, run
// in turn by runBlock; a thread waiting at a barrier yields until the
// barrier's last thread arrives.
static ucontext_t schedCtx;
static std::vector<ucontext_t> lanes;
static std::vector<std::vector<char>> stacks;
static std::vector<bool> finished;
static u32 current, live;
static u64 progress; // arrivals and exits: a round without any is a deadlock
static void (*blockBody)();

static void yield() { swapcontext(&lanes[current], &schedCtx); }

struct barrier {
	u32 need, arrived, gen;
};

static void arriveWait(barrier &b) {
	const u32 g = b.gen;
	progress++;
	if (++b.arrived == b.need) {
		b.arrived = 0;
		b.gen++;
		return;
	}
	while (b.gen == g) yield();
}

static barrier blockBar;
static barrier warpBar[32];
static u32 slots[1024];

static void laneMain() {
	blockBody();
	finished[current] = true;
	live--;
	progress++;
}

// runBlock runs body as every thread of one block.
static void runBlock(void (*body)()) {
	const u32 n = blockDim.x;
	blockBody = body;
	lanes.assign(n, ucontext_t{});
	stacks.resize(n);
	finished.assign(n, false);
	blockBar = {n, 0, 0};
	for (u32 w = 0; w < (n + 31) / 32; w++) warpBar[w] = {std::min(32u, n - 32 * w), 0, 0};
	for (u32 i = 0; i < n; i++) {
		stacks[i].resize(1 << 16);
		getcontext(&lanes[i]);
		lanes[i].uc_stack.ss_sp = stacks[i].data();
		lanes[i].uc_stack.ss_size = stacks[i].size();
		lanes[i].uc_link = &schedCtx;
		makecontext(&lanes[i], laneMain, 0);
	}
	live = n;
	while (live > 0) {
		const u64 before = progress;
		for (u32 i = 0; i < n; i++) {
			if (finished[i]) continue;
			current = i;
			threadIdx = {i, 0, 0};
			swapcontext(&schedCtx, &lanes[i]);
		}
		if (progress == before) {
			fprintf(stderr, "zemu: block %u: every live thread waits at a barrier that cannot complete\n", blockIdx.x);
			exit(3);
		}
	}
}

static void __syncthreads() { arriveWait(blockBar); }

// warpExchange gives each lane the value v of lane from.
static u32 warpExchange(u32 v, u32 from) {
	const u32 warp = threadIdx.x >> 5;
	slots[threadIdx.x] = v;
	arriveWait(warpBar[warp]);
	const u32 r = slots[warp * 32 + from];
	arriveWait(warpBar[warp]);
	return r;
}

static u32 __ballot_sync(u32 mask, bool p) {
	const u32 warp = threadIdx.x >> 5;
	slots[threadIdx.x] = p ? 1 : 0;
	arriveWait(warpBar[warp]);
	u32 b = 0;
	for (u32 l = 0; l < 32; l++) b |= slots[warp * 32 + l] << l;
	arriveWait(warpBar[warp]);
	return b & mask;
}

static int __any_sync(u32 mask, bool p) { return __ballot_sync(mask, p) != 0; }

static u32 __shfl_xor_sync(u32, u32 v, int o) { return warpExchange(v, (threadIdx.x & 31) ^ (u32)o); }

static int __popc(u32 v) { return __builtin_popcount(v); }

// One OS thread: the atomics need no more than the operation.
static u32 atomicAdd(u32 *p, u32 v) {
	const u32 old = *p;
	*p = old + v;
	return old;
}
static u32 atomicOr(u32 *p, u32 v) {
	const u32 old = *p;
	*p = old | v;
	return old;
}
static u32 atomicMax(u32 *p, u32 v) {
	const u32 old = *p;
	*p = std::max(old, v);
	return old;
}

#include "../../kernels/bf16z.cu"

static std::vector<unsigned char> readFile(const char *path) {
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(2);
	}
	std::vector<unsigned char> b;
	unsigned char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0) b.insert(b.end(), buf, buf + n);
	fclose(f);
	return b;
}

// aligned copies b into 256-byte aligned memory of exactly its size (as
// cuMemAlloc's base; exact, so that a sanitizer sees any read past it).
static unsigned char *aligned(const std::vector<unsigned char> &b) {
	void *p = nullptr;
	if (posix_memalign(&p, 256, std::max<size_t>(b.size(), 1)) != 0) {
		perror("posix_memalign");
		exit(2);
	}
	memcpy(p, b.data(), b.size());
	return (unsigned char *)p;
}

int main(int argc, char **argv) {
	if (argc != 8) {
		fprintf(stderr, "usage: zemu warp|serial SRC JOBS NJOBS DST_BYTES SRC_BYTES OUT\n");
		return 2;
	}
	const bool serial = strcmp(argv[1], "serial") == 0;
	const std::vector<unsigned char> src = readFile(argv[2]), jobs = readFile(argv[3]);
	const u32 njobs = (u32)strtoul(argv[4], nullptr, 10);
	const u64 dstBytes = strtoull(argv[5], nullptr, 10), srcBytes = strtoull(argv[6], nullptr, 10);
	unsigned char *s = aligned(src), *j = aligned(jobs);
	unsigned char *d = aligned(std::vector<unsigned char>(dstBytes, 0xA5));
	u32 status[4] = {0, 0, 0, 0};
	blockDim = {serial ? 32u : (u32)VLA_Z_THREADS, 1, 1};
	gridDim = {njobs, 1, 1};
	static const unsigned char *S, *J;
	static unsigned char *D;
	static u64 srcB, dstB;
	static u32 *st;
	S = s, J = j, D = d, srcB = srcBytes, dstB = dstBytes, st = status;
	for (u32 b = 0; b < njobs; b++) {
		blockIdx = {b, 0, 0};
		if (serial) runBlock([] { vla_z_decode_serial(S, srcB, (const vla_z_job *)J, D, dstB, st, 0); });
		else runBlock([] { vla_z_decode(S, srcB, (const vla_z_job *)J, D, dstB, st, 0); });
	}
	FILE *f = fopen(argv[7], "wb");
	if (!f || fwrite(d, 1, dstBytes, f) != dstBytes || fclose(f) != 0) {
		perror(argv[7]);
		return 2;
	}
	printf("%u %u %u\n", status[0], status[1], status[2]);
	return 0;
}
