// The C side of package kern: a pinned thread pool and bf16 matrix kernels
// (scalar, AVX2+FMA, AVX-512-BF16, AMX-BF16) for y = x·Wᵀ and a fused SwiGLU
// MLP shard. Every kernel computes each output element on one thread, in an
// order fixed by the path alone, so results never depend on the thread count.
#ifndef VLANODE_KERN_H
#define VLANODE_KERN_H

#include <stddef.h>
#include <stdint.h>

// Paths (the values of kern.Path).
enum {
	KERN_SCALAR = 1,
	KERN_AVX2 = 2,
	KERN_AVX512 = 3,
	KERN_AMX = 4,
};

// Feature bits of kern_features.
enum {
	KERN_F_AVX2 = 1 << 0,       // AVX2 and FMA, with the OS saving YMM state
	KERN_F_AVX512 = 1 << 1,     // AVX-512 F, BW, VL, DQ, with the OS saving ZMM state
	KERN_F_AVX512BF16 = 1 << 2, // AVX512_BF16 (vdpbf16ps)
	KERN_F_AMXBF16 = 1 << 3,    // AMX-TILE and AMX-BF16, with the OS supporting tile state
};

// kern_mat is a view of a bf16 matrix: element (r, c) at p[r*ld + c].
typedef struct {
	const uint16_t *p;
	int64_t ld;
	int rows, cols;
} kern_mat;

// kern_op is one call. GEMM: y[m, n] (+)= Σ_k x[m, k]·w[n, k] (+ bias[n]) with
// k = w.cols. MLP: y[m, j] (+)= Σ_r down[j, r]·h[m, r] with
// h = bf16(silu(x·gateᵀ) ⊙ (x·upᵀ)), k = gate.cols, r < gate.rows.
typedef struct {
	int path;
	int m;
	const float *x; // [m, ldx], the first k columns used
	int64_t ldx;
	float *y; // [m, ldy]
	int64_t ldy;
	const float *bias; // [n] or NULL (GEMM only)
	int accumulate;    // add to y instead of overwriting it
	int amx_kc;        // AMX K chunk in columns, a multiple of 32; 0: sized for the L2 cache
	int prefetch;      // AVX-512/AMX software prefetch distance in columns; 0: the path's, < 0: none
	kern_mat w;        // GEMM: [n, k]
	kern_mat gate, up; // MLP: [r, k]
	kern_mat down;     // MLP: [h, r]
} kern_op;

typedef struct kern_pool kern_pool;

// kern_features reports the CPU's and the OS's support, KERN_F_* bits.
int kern_features(void);

// kern_amx_request asks Linux for permission to use AMX tile data in this
// process (arch_prctl ARCH_REQ_XCOMP_PERM). It returns 0 or an errno.
int kern_amx_request(void);

// kern_pool_new starts n worker threads, worker i pinned to cpus[i] (a CPU
// may repeat). Waiters spin for the given nanoseconds before sleeping on a
// futex. On failure it returns an errno and writes a message to err.
int kern_pool_new(const int *cpus, int n, int64_t worker_spin_ns, int64_t caller_spin_ns,
		  kern_pool **out, char *err, int errlen);

// kern_pool_free stops and joins the workers and frees the pool.
void kern_pool_free(kern_pool *p);

// kern_gemm and kern_mlp run one operation on the pool's workers and return
// when it is complete: 0, or ENOMEM if scratch memory could not be grown.
// The caller checks shapes; one call at a time per pool.
int kern_gemm(kern_pool *p, const kern_op *op);
int kern_mlp(kern_pool *p, const kern_op *op);

#endif
