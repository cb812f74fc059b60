// The AVX2+FMA path (x86 CPUs without AVX-512-BF16; the CI machine): x is
// rounded to bf16 once and kept as floats, weights are widened bf16 → fp32 by
// a 16-bit shift, and each output is one 8-lane FMA sum over the multiples of
// 8 in k, reduced in a fixed order, plus the remaining columns in order.
#include "internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

enum {
	PACK_SEG = 1024, // x elements one packing unit rounds
	MAX_NR = 4,      // weight rows of a register tile
	MAX_MR = 4,      // x rows of a register tile
	PF_ELEMS = 512,  // software prefetch distance along a weight row (1 KiB)
};

static inline __m256 widen8(const uint16_t *p)
{
	__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline float hsum8(__m256 v)
{
	__m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	a = _mm_add_ps(a, _mm_movehl_ps(a, a));
	a = _mm_add_ss(a, _mm_movehdup_ps(a));
	return _mm_cvtss_f32(a);
}

// round8 rounds 8 floats to bf16 values (kept as floats) exactly as kern_bf16.
static inline __m256 round8(__m256 v)
{
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
	__m256i u = _mm256_castps_si256(v);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), hi);
	__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
	__m256i q = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x400000)), hi);
	return _mm256_castsi256_ps(_mm256_blendv_epi8(r, q, nan));
}

static void pack(const float *x, int64_t ldx, int m, int k, float *dst, int64_t ld, int tid, int threads)
{
	int segs = (k + PACK_SEG - 1) / PACK_SEG, lo, hi;
	kern_part(m * segs, 1, threads, tid, &lo, &hi);
	for (int u = lo; u < hi; u++) {
		int row = u / segs, k0 = (u % segs) * PACK_SEG;
		int k1 = k0 + PACK_SEG < k ? k0 + PACK_SEG : k;
		const float *s = x + (int64_t)row * ldx;
		float *d = dst + (int64_t)row * ld;
		int i = k0;
		for (; i + 8 <= k1; i += 8)
			_mm256_storeu_ps(d + i, round8(_mm256_loadu_ps(s + i)));
		for (; i < k1; i++)
			d[i] = kern_f32(kern_bf16(s[i]));
	}
}

// tile computes out[r][m] = Σ_k w[r][k]·x[m][k] for nr weight rows and mr x
// rows. The arithmetic of one output does not depend on nr or mr.
static inline __attribute__((always_inline)) void tile(const uint16_t *w, int64_t ldw, const float *x, int64_t ldx,
						       int k, int nr, int mr, float out[MAX_NR][MAX_MR])
{
	__m256 acc[MAX_NR][MAX_MR];
	for (int r = 0; r < nr; r++)
		for (int m = 0; m < mr; m++)
			acc[r][m] = _mm256_setzero_ps();
	int k8 = k & ~7;
	for (int i = 0; i < k8; i += 8) {
		__m256 wv[MAX_NR];
		for (int r = 0; r < nr; r++) {
			wv[r] = widen8(w + r * ldw + i);
			_mm_prefetch((const char *)(w + r * ldw + i + PF_ELEMS), _MM_HINT_T0);
		}
		for (int m = 0; m < mr; m++) {
			__m256 xv = _mm256_loadu_ps(x + m * ldx + i);
			for (int r = 0; r < nr; r++)
				acc[r][m] = _mm256_fmadd_ps(wv[r], xv, acc[r][m]);
		}
	}
	for (int r = 0; r < nr; r++)
		for (int m = 0; m < mr; m++) {
			float s = hsum8(acc[r][m]);
			for (int i = k8; i < k; i++)
				s += kern_f32(w[r * ldw + i]) * x[m * ldx + i];
			out[r][m] = s;
		}
}

typedef void (*tile_fn)(const uint16_t *, int64_t, const float *, int64_t, int, float[MAX_NR][MAX_MR]);

#define TILE(NR, MR)                                                                                 \
	static void tile_##NR##_##MR(const uint16_t *w, int64_t ldw, const float *x, int64_t ldx, int k, \
				     float out[MAX_NR][MAX_MR])                                          \
	{                                                                                            \
		tile(w, ldw, x, ldx, k, NR, MR, out);                                                \
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

// block is the register tile for m x rows: four weight rows streamed at once
// for one x row (GEMV), two by four x rows otherwise.
static void block(int m, int *nr, int *mr)
{
	*nr = m == 1 ? 4 : 2;
	*mr = m == 1 ? 1 : 4;
}

// gemm_rows computes outputs [n0, n1) of w·xᵀ for every x row, in chunks
// of weight rows that stay in the L2 cache while every x row passes.
static void gemm_rows(const kern_op *op, const kern_mat *w, int n0, int n1, const float *x, int64_t ldx, int mrows, int k)
{
	int NR, MR;
	block(mrows, &NR, &MR);
	float out[MAX_NR][MAX_MR];
	int nc = kern_chunk_rows(k, NR);
	for (int c0 = n0; c0 < n1; c0 += nc) {
		int c1 = n1 - c0 < nc ? n1 : c0 + nc;
		for (int m = 0; m < mrows; m += MR) {
			int mr = mrows - m < MR ? mrows - m : MR;
			for (int n = c0; n < c1; n += NR) {
				int nr = c1 - n < NR ? c1 - n : NR;
				const uint16_t *wp = w->p + (int64_t)n * w->ld;
				tiles[nr - 1][mr - 1](wp, w->ld, x + (int64_t)m * ldx, ldx, k, out);
				for (int r = 0; r < nr; r++)
					for (int q = 0; q < mr; q++)
						kern_emit(op, m + q, n + r, out[r][q]);
			}
		}
	}
}

void kern_avx2_gemm(kern_pool *p, int tid, kern_job *j)
{
	const kern_op *op = j->op;
	int T = kern_threads(p), lo, hi;
	float *xf = j->xpk; // [m][k]
	pack(op->x, op->ldx, j->m, j->k, xf, j->k, tid, T);
	kern_barrier(p);
	kern_tasks tasks = kern_tasks_of(j->n, KERN_VGRAIN, T);
	while (kern_next_task(&j->task[0], tasks, &lo, &hi))
		gemm_rows(op, &op->w, lo, hi, xf, j->k, j->m, j->k);
}

void kern_avx2_mlp(kern_pool *p, int tid, kern_job *j)
{
	const kern_op *op = j->op;
	int T = kern_threads(p), lo, hi, NR, MR;
	float *xf = j->xpk; // [m][k]
	float *h = j->hpk;  // [m][r]
	pack(op->x, op->ldx, j->m, j->k, xf, j->k, tid, T);
	kern_barrier(p);

	block(j->m, &NR, &MR);
	kern_tasks tasks = kern_tasks_of(j->r, KERN_VGRAIN, T);
	float g[MAX_NR][MAX_MR], u[MAX_NR][MAX_MR];
	int nc = kern_chunk_rows(2 * j->k, NR); // gate and up rows
	while (kern_next_task(&j->task[0], tasks, &lo, &hi)) {
		for (int c0 = lo; c0 < hi; c0 += nc) {
			int c1 = hi - c0 < nc ? hi : c0 + nc;
			for (int m = 0; m < j->m; m += MR) {
				int mr = j->m - m < MR ? j->m - m : MR;
				const float *x = xf + (int64_t)m * j->k;
				for (int n = c0; n < c1; n += NR) {
					int nr = c1 - n < NR ? c1 - n : NR;
					tiles[nr - 1][mr - 1](op->gate.p + (int64_t)n * op->gate.ld, op->gate.ld, x, j->k, j->k, g);
					tiles[nr - 1][mr - 1](op->up.p + (int64_t)n * op->up.ld, op->up.ld, x, j->k, j->k, u);
					for (int r = 0; r < nr; r++)
						for (int q = 0; q < mr; q++)
							h[(int64_t)(m + q) * j->r + n + r] =
							    kern_f32(kern_bf16(kern_silu_mul(g[r][q], u[r][q])));
				}
			}
		}
	}
	kern_barrier(p);

	tasks = kern_tasks_of(j->n, KERN_VGRAIN, T);
	while (kern_next_task(&j->task[1], tasks, &lo, &hi))
		gemm_rows(op, &op->down, lo, hi, h, j->r, j->m, j->r);
}

#pragma GCC pop_options
