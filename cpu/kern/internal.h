// Shared by the C files of package kern: the pool's job interface, the
// partition of rows among workers, bf16 rounding and the output rule.
#ifndef VLANODE_KERN_INTERNAL_H
#define VLANODE_KERN_INTERNAL_H

#include "kern.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

// Padding and blocking of the packed operands.
enum {
	KERN_KBLOCK = 32, // bf16 elements of one AVX-512 vector and of one AMX A-tile row
	KERN_MBLOCK = 16, // x rows of one AMX B tile (its 16 columns)
	KERN_NBLOCK = 16, // weight rows of one AMX A tile; the AMX path's partition grain
	KERN_VGRAIN = 4,  // weight rows of the other paths' partition grain
};

// kern_job is one operation as the workers see it. The caller fills it and
// sizes every buffer before the workers start, so no worker allocates.
typedef struct kern_job {
	const kern_op *op;
	int m;      // rows of x
	int k;      // columns of x (and of w, gate, up)
	int kp;     // k padded as the path packs x
	int n;      // GEMM: rows of w; MLP: rows of down (outputs)
	int r;      // MLP: rows of gate and up
	int rp;     // MLP: r padded as the path packs h
	int mpad;   // AMX: m rounded up to KERN_MBLOCK
	int kc;     // AMX: K chunk of the first product (multiple of KERN_KBLOCK)
	int kc2;    // AMX: K chunk of the MLP's down product
	void *xpk;  // x packed for the path
	void *hpk;  // MLP: h packed for the path
	float *cpart; // AMX: partial sums kept across K chunks, [rows][mpad]
	char *tscr;   // per-worker scratch, tscr_stride bytes each
	size_t tscr_stride;
	_Atomic int task[2]; // the next task of each compute phase (kern_next_task)
} kern_job;

typedef void (*kern_fn)(kern_pool *p, int tid, kern_job *j);

// Scratch slots of a pool: packed x, packed h, AMX partial sums, per-worker.
enum { KERN_SCRATCH_X, KERN_SCRATCH_H, KERN_SCRATCH_C, KERN_SCRATCH_T, KERN_SCRATCH_SLOTS };

// kern_scratch returns the pool's buffer of a slot, 64-byte aligned and grown
// to at least bytes (its old contents lost), or NULL when memory is short.
// Only the caller of a job, before it runs, may use it.
void *kern_scratch(kern_pool *p, int slot, size_t bytes);

// kern_threads is the pool's number of workers.
int kern_threads(const kern_pool *p);

// kern_run runs fn on every worker and returns when all have finished. The
// caller spins briefly, then sleeps on a futex.
void kern_run(kern_pool *p, kern_fn fn, kern_job *j);

// kern_barrier returns when every worker of the running job has reached it.
void kern_barrier(kern_pool *p);

// kern_part is worker t's share [*lo, *hi) of n items cut in grains of
// `grain`, contiguous and balanced to a grain; the cuts are multiples of grain.
static inline void kern_part(int n, int grain, int threads, int t, int *lo, int *hi)
{
	int64_t blocks = (n + grain - 1) / grain;
	int64_t b0 = blocks * t / threads, b1 = blocks * (t + 1) / threads;
	int64_t l = b0 * grain, h = b1 * grain;
	*lo = (int)(l < n ? l : n);
	*hi = (int)(h < n ? h : n);
}

// kern_tasks cuts n rows into tasks of a multiple of grain rows, about
// KERN_TASKS_PER_THREAD per worker, that workers take in order as they
// finish: a worker slowed by another thread on its core costs the call
// little. Each task is contiguous rows.
enum { KERN_TASKS_PER_THREAD = 8 };
typedef struct {
	int n, rows, count;
} kern_tasks;

static inline kern_tasks kern_tasks_of(int n, int grain, int threads)
{
	int parts = threads * KERN_TASKS_PER_THREAD;
	int rows = (n + parts - 1) / parts;
	rows = (rows + grain - 1) / grain * grain;
	if (rows < grain)
		rows = grain;
	kern_tasks t = {n, rows, (n + rows - 1) / rows};
	return t;
}

// kern_next_task takes the next task from counter: rows [*lo, *hi). It
// returns 0 when none is left.
static inline int kern_next_task(_Atomic int *counter, kern_tasks t, int *lo, int *hi)
{
	int i = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
	if (i >= t.count)
		return 0;
	*lo = i * t.rows;
	*hi = *lo + t.rows < t.n ? *lo + t.rows : t.n;
	return 1;
}

// kern_chunk_rows is how many weight rows of k bf16 columns make a chunk of
// about KERN_L2_CHUNK bytes, a multiple of grain (at least one grain).
enum { KERN_L2_CHUNK = 256 << 10 };
static inline int kern_chunk_rows(int k, int grain)
{
	int rows = KERN_L2_CHUNK / (2 * (k > 0 ? k : 1)) / grain * grain;
	return rows > grain ? rows : grain;
}

// kern_bf16 rounds a float to the nearest bf16, ties to even (as PyTorch
// and tensor.F32ToBF16); a NaN stays a quiet NaN.
static inline uint16_t kern_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

// kern_f32 widens a bf16 bit pattern exactly.
static inline float kern_f32(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// kern_emit stores one GEMM output: the dot product, plus the bias, added
// to y's old value when accumulating (in that order, on every path).
static inline void kern_emit(const kern_op *op, int m, int n, float v)
{
	float *y = op->y + (int64_t)m * op->ldy + n;
	if (op->bias)
		v += op->bias[n];
	if (op->accumulate)
		v = *y + v;
	*y = v;
}

// kern_silu_mul is the MLP's h before rounding: silu(g)·u.
static inline float kern_silu_mul(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

// Job functions of each path (one file each).
void kern_scalar_gemm(kern_pool *p, int tid, kern_job *j);
void kern_scalar_mlp(kern_pool *p, int tid, kern_job *j);
void kern_avx2_gemm(kern_pool *p, int tid, kern_job *j);
void kern_avx2_mlp(kern_pool *p, int tid, kern_job *j);
void kern_avx512_gemm(kern_pool *p, int tid, kern_job *j);
void kern_avx512_mlp(kern_pool *p, int tid, kern_job *j);
void kern_amx_gemm(kern_pool *p, int tid, kern_job *j);
void kern_amx_mlp(kern_pool *p, int tid, kern_job *j);

// Per-worker scratch bytes the AMX path needs for kp (padded) columns.
size_t kern_amx_scratch(int kp);

#endif
