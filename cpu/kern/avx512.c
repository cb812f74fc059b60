// The AVX-512-BF16 path, the GEMV path of CPUs that have it: x is rounded to
// bf16 once ([m][kp], zero-padded to a multiple of 32), and each output is
// one 16-lane vdpbf16ps sum over k in steps of 32 (the last step masked),
// reduced in a fixed order. A worker streams four weight rows at once, with
// software prefetch that runs on into the next four rows.
#include "internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#include "avx512.h"

enum {
	PACK_SEG = 1024, // x elements one packing unit rounds (a multiple of 32)
	MAX_NR = 4,      // weight rows of a register tile
	MAX_MR = 4,      // x rows of a register tile
	PF_ELEMS = 1024, // software prefetch distance along a weight row (2 KiB), unless op->prefetch says
};

static int prefetch_distance(const kern_op *op) { return op->prefetch == 0 ? PF_ELEMS : op->prefetch; }

// pack rounds worker tid's share of x to bf16 rows [m][kp], zero-padded.
static void pack(const float *x, int64_t ldx, int m, int k, int kp, uint16_t *dst, int tid, int threads)
{
	int segs = (kp + PACK_SEG - 1) / PACK_SEG, lo, hi;
	kern_part(m * segs, 1, threads, tid, &lo, &hi);
	for (int u = lo; u < hi; u++) {
		int row = u / segs, k0 = (u % segs) * PACK_SEG;
		int k1 = k0 + PACK_SEG < kp ? k0 + PACK_SEG : kp;
		const float *s = x + (int64_t)row * ldx;
		uint16_t *d = dst + (int64_t)row * kp;
		for (int i = k0; i < k1; i += 16) {
			int valid = k - i < 0 ? 0 : (k - i > 16 ? 16 : k - i);
			__m512 v = _mm512_maskz_loadu_ps(mask16(valid), s + i);
			_mm256_storeu_si256((__m256i *)(d + i), round16(v));
		}
	}
}

// tile computes out[r][m] = Σ_k w[r][k]·x[m][k] for nr weight rows (pitch
// ldw) and mr packed x rows (pitch ldx). With pf > 0 it prefetches each row
// pf columns ahead, continuing into the rows at next (the next tile's).
static inline __attribute__((always_inline)) void tile(const uint16_t *w, int64_t ldw, const uint16_t *next,
						       const uint16_t *x, int64_t ldx, int k, int nr, int mr, int pf,
						       float out[MAX_NR][MAX_MR])
{
	__m512 acc[MAX_NR][MAX_MR];
	for (int r = 0; r < nr; r++)
		for (int m = 0; m < mr; m++)
			acc[r][m] = _mm512_setzero_ps();
	int k32 = k & ~31;
	for (int i = 0; i < k32; i += 32) {
		__m512i wv[MAX_NR];
		for (int r = 0; r < nr; r++)
			wv[r] = _mm512_loadu_si512(w + r * ldw + i);
		if (pf > 0) {
			int a = i + pf;
			for (int r = 0; r < nr; r++) {
				const uint16_t *q = a < k ? w + r * ldw + a : next + r * ldw + (a - k);
				_mm_prefetch((const char *)q, _MM_HINT_T0);
			}
		}
		for (int m = 0; m < mr; m++) {
			__m512i xv = _mm512_loadu_si512(x + m * ldx + i);
			for (int r = 0; r < nr; r++)
				acc[r][m] = _mm512_dpbf16_ps(acc[r][m], (__m512bh)wv[r], (__m512bh)xv);
		}
	}
	if (k32 < k) {
		__mmask32 mk = mask32(k - k32);
		__m512i wv[MAX_NR];
		for (int r = 0; r < nr; r++)
			wv[r] = _mm512_maskz_loadu_epi16(mk, w + r * ldw + k32);
		for (int m = 0; m < mr; m++) {
			__m512i xv = _mm512_loadu_si512(x + m * ldx + k32); // zero-padded to kp
			for (int r = 0; r < nr; r++)
				acc[r][m] = _mm512_dpbf16_ps(acc[r][m], (__m512bh)wv[r], (__m512bh)xv);
		}
	}
	for (int r = 0; r < nr; r++)
		for (int m = 0; m < mr; m++)
			out[r][m] = hsum16(acc[r][m]);
}

typedef void (*tile_fn)(const uint16_t *, int64_t, const uint16_t *, const uint16_t *, int64_t, int, int,
			float[MAX_NR][MAX_MR]);

#define TILE(NR, MR)                                                                                   \
	static void tile_##NR##_##MR(const uint16_t *w, int64_t ldw, const uint16_t *next, const uint16_t *x, \
				     int64_t ldx, int k, int pf, float out[MAX_NR][MAX_MR])                    \
	{                                                                                              \
		tile(w, ldw, next, x, ldx, k, NR, MR, pf, out);                                        \
	}
#define TILE_ROW(NR) TILE(NR, 1) TILE(NR, 2) TILE(NR, 3) TILE(NR, 4)
TILE_ROW(1)
TILE_ROW(2)
TILE_ROW(3)
TILE_ROW(4)

static const tile_fn tiles[MAX_NR][MAX_MR] = {
    {tile_1_1, tile_1_2, tile_1_3, tile_1_4},
    {tile_2_1, tile_2_2, tile_2_3, tile_2_4},
    {tile_3_1, tile_3_2, tile_3_3, tile_3_4},
    {tile_4_1, tile_4_2, tile_4_3, tile_4_4},
};

// gemm_rows computes outputs [n0, n1) of w·xᵀ for every x row, in chunks
// of weight rows that stay in the L2 cache while every x row passes: the
// first x rows stream a chunk from memory (with prefetch), later ones find
// it in cache.
static void gemm_rows(const kern_op *op, const kern_mat *w, int n0, int n1, const uint16_t *x, int64_t ldx, int mrows,
		      int k)
{
	float out[MAX_NR][MAX_MR];
	int nc = kern_chunk_rows(k, MAX_NR), pf = prefetch_distance(op);
	for (int c0 = n0; c0 < n1; c0 += nc) {
		int c1 = n1 - c0 < nc ? n1 : c0 + nc;
		for (int m = 0; m < mrows; m += MAX_MR) {
			int mr = mrows - m < MAX_MR ? mrows - m : MAX_MR;
			for (int n = c0; n < c1; n += MAX_NR) {
				int nr = c1 - n < MAX_NR ? c1 - n : MAX_NR;
				const uint16_t *wp = w->p + (int64_t)n * w->ld;
				tiles[nr - 1][mr - 1](wp, w->ld, wp + nr * w->ld, x + (int64_t)m * ldx, ldx, k, m == 0 ? pf : 0, out);
				for (int r = 0; r < nr; r++)
					for (int q = 0; q < mr; q++)
						kern_emit(op, m + q, n + r, out[r][q]);
			}
		}
	}
}

void kern_avx512_gemm(kern_pool *p, int tid, kern_job *j)
{
	const kern_op *op = j->op;
	int T = kern_threads(p), lo, hi;
	uint16_t *xb = j->xpk; // [m][kp]
	pack(op->x, op->ldx, j->m, j->k, j->kp, xb, tid, T);
	kern_barrier(p);
	kern_tasks tasks = kern_tasks_of(j->n, KERN_VGRAIN, T);
	while (kern_next_task(&j->task[0], tasks, &lo, &hi))
		gemm_rows(op, &op->w, lo, hi, xb, j->kp, j->m, j->k);
}

void kern_avx512_mlp(kern_pool *p, int tid, kern_job *j)
{
	const kern_op *op = j->op;
	int T = kern_threads(p), lo, hi;
	uint16_t *xb = j->xpk; // [m][kp]
	uint16_t *h = j->hpk;  // [m][rp], columns [r, rp) zero
	pack(op->x, op->ldx, j->m, j->k, j->kp, xb, tid, T);
	kern_part(j->m, 1, T, tid, &lo, &hi);
	for (int m = lo; m < hi; m++)
		memset(h + (int64_t)m * j->rp + j->r, 0, (size_t)(j->rp - j->r) * 2);
	kern_barrier(p);

	kern_tasks tasks = kern_tasks_of(j->r, KERN_VGRAIN, T);
	float g[MAX_NR][MAX_MR] = {{0}}, u[MAX_NR][MAX_MR] = {{0}};
	uint16_t hb[MAX_NR * MAX_MR];
	int nc = kern_chunk_rows(2 * j->k, MAX_NR), pf = prefetch_distance(op); // gate and up rows
	while (kern_next_task(&j->task[0], tasks, &lo, &hi)) {
		for (int c0 = lo; c0 < hi; c0 += nc) {
			int c1 = hi - c0 < nc ? hi : c0 + nc;
			for (int m = 0; m < j->m; m += MAX_MR) {
				int mr = j->m - m < MAX_MR ? j->m - m : MAX_MR;
				const uint16_t *x = xb + (int64_t)m * j->kp;
				for (int n = c0; n < c1; n += MAX_NR) {
					int nr = c1 - n < MAX_NR ? c1 - n : MAX_NR;
					const uint16_t *gp = op->gate.p + (int64_t)n * op->gate.ld;
					const uint16_t *up = op->up.p + (int64_t)n * op->up.ld;
					tiles[nr - 1][mr - 1](gp, op->gate.ld, gp + nr * op->gate.ld, x, j->kp, j->k, m == 0 ? pf : 0, g);
					tiles[nr - 1][mr - 1](up, op->up.ld, up + nr * op->up.ld, x, j->kp, j->k, m == 0 ? pf : 0, u);
					__m512 hv = silu_mul16(_mm512_loadu_ps(&g[0][0]), _mm512_loadu_ps(&u[0][0]));
					_mm256_storeu_si256((__m256i *)hb, round16(hv));
					for (int r = 0; r < nr; r++)
						for (int q = 0; q < mr; q++)
							h[(int64_t)(m + q) * j->rp + n + r] = hb[r * MAX_MR + q];
				}
			}
		}
	}
	kern_barrier(p);

	tasks = kern_tasks_of(j->n, KERN_VGRAIN, T);
	while (kern_next_task(&j->task[1], tasks, &lo, &hi))
		gemm_rows(op, &op->down, lo, hi, h, j->rp, j->m, j->r);
}

#pragma GCC pop_options
