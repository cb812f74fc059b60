// The portable path: plain C, one float sum per output in order of k. It is
// the reference the vector paths are read against, and the fallback of CPUs
// without AVX2.
#include "internal.h"

enum { PACK_SEG = 1024 }; // x elements one packing unit rounds

// pack_f32 rounds worker tid's share of x to bf16 values kept as floats,
// into dst [m][ld]: units are (row, segment of PACK_SEG columns).
static void pack_f32(const float *x, int64_t ldx, int m, int k, float *dst, int64_t ld, int tid, int threads)
{
	int segs = (k + PACK_SEG - 1) / PACK_SEG, lo, hi;
	kern_part(m * segs, 1, threads, tid, &lo, &hi);
	for (int u = lo; u < hi; u++) {
		int row = u / segs, k0 = (u % segs) * PACK_SEG;
		int k1 = k0 + PACK_SEG < k ? k0 + PACK_SEG : k;
		const float *s = x + (int64_t)row * ldx;
		float *d = dst + (int64_t)row * ld;
		for (int i = k0; i < k1; i++)
			d[i] = kern_f32(kern_bf16(s[i]));
	}
}

static float dot(const uint16_t *w, const float *x, int k)
{
	float s = 0;
	for (int i = 0; i < k; i++)
		s += kern_f32(w[i]) * x[i];
	return s;
}

void kern_scalar_gemm(kern_pool *p, int tid, kern_job *j)
{
	const kern_op *op = j->op;
	int T = kern_threads(p), lo, hi;
	float *xf = j->xpk; // [m][k]
	pack_f32(op->x, op->ldx, j->m, j->k, xf, j->k, tid, T);
	kern_barrier(p);
	kern_tasks tasks = kern_tasks_of(j->n, KERN_VGRAIN, T);
	while (kern_next_task(&j->task[0], tasks, &lo, &hi))
		for (int n = lo; n < hi; n++) {
			const uint16_t *w = op->w.p + (int64_t)n * op->w.ld;
			for (int m = 0; m < j->m; m++)
				kern_emit(op, m, n, dot(w, xf + (int64_t)m * j->k, j->k));
		}
}

void kern_scalar_mlp(kern_pool *p, int tid, kern_job *j)
{
	const kern_op *op = j->op;
	int T = kern_threads(p), lo, hi;
	float *xf = j->xpk; // [m][k]
	float *h = j->hpk;  // [m][r]
	pack_f32(op->x, op->ldx, j->m, j->k, xf, j->k, tid, T);
	kern_barrier(p);

	kern_tasks tasks = kern_tasks_of(j->r, KERN_VGRAIN, T);
	while (kern_next_task(&j->task[0], tasks, &lo, &hi))
		for (int r = lo; r < hi; r++) {
			const uint16_t *g = op->gate.p + (int64_t)r * op->gate.ld;
			const uint16_t *u = op->up.p + (int64_t)r * op->up.ld;
			for (int m = 0; m < j->m; m++) {
				const float *x = xf + (int64_t)m * j->k;
				float v = kern_silu_mul(dot(g, x, j->k), dot(u, x, j->k));
				h[(int64_t)m * j->r + r] = kern_f32(kern_bf16(v));
			}
		}
	kern_barrier(p);

	tasks = kern_tasks_of(j->n, KERN_VGRAIN, T);
	while (kern_next_task(&j->task[1], tasks, &lo, &hi))
		for (int n = lo; n < hi; n++) {
			const uint16_t *d = op->down.p + (int64_t)n * op->down.ld;
			for (int m = 0; m < j->m; m++)
				kern_emit(op, m, n, dot(d, h + (int64_t)m * j->r, j->r));
		}
}
