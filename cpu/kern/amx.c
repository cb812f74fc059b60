// The AMX-BF16 path: yᵀ = W·xᵀ in 16×16 tiles. Weight rows load in place as
// A tiles (16 rows × 32 bf16, stride = the row pitch); x is rounded and packed
// once per call into B tiles in the VNNI layout (tile [mb][kb], row p, column
// j holds x[16mb + j][32kb + 2p], x[16mb + j][32kb + 2p + 1]); C tiles hold
// fp32 sums. A unit is two A tiles (two 16-row blocks of W, or a block of gate
// and the same block of up), times B tiles two at a time: four C tiles.
//
// Each output is one C-tile element accumulated over k in steps of 32, in
// order; a K chunk boundary stores and reloads it exactly. Partial blocks are
// zero-padded copies: the last ≤15 rows of a matrix (16 × kp) and
// the last <32 columns of each block (16 × 32). So no tile load reads outside
// a view, and the arithmetic of an output never depends on the thread count.
//
// Tile registers: tmm0..3 C (A0·B0, A1·B0, A0·B1, A1·B1), tmm4..5 A, tmm6..7 B.
#include "internal.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")
#include "avx512.h"

enum {
	TILE_BYTES = 1024,    // one tile: 16 rows × 64 bytes
	TILE_U32 = 256,       // one tile in 32-bit elements
	PF_ELEMS = 512,       // software prefetch distance along a weight row (1 KiB), unless op->prefetch says
	PACK_TILES = 16,      // B tiles one packing unit fills
};

// The intrinsics' inline assembly tells the compiler nothing about memory:
// a compiler barrier orders tile loads and stores with plain C accesses.
#define COMPILER_BARRIER() __asm__ volatile("" ::: "memory")

typedef struct {
	uint8_t palette;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} __attribute__((packed)) tile_config;

// Per-worker scratch: C tile stores, the column-tail copies of two A tiles,
// and the row-tail copies of two A blocks (16 × kp each).
typedef struct {
	float *c;        // [4][16][16]
	uint16_t *ktail; // [2][16][32]
	uint16_t *ntail; // [2][16][kp]
} scratch;

size_t kern_amx_scratch(int kp) { return 6 * TILE_BYTES + 2 * (size_t)16 * kp * 2; }

static scratch scratch_of(const kern_job *j, int tid)
{
	char *s = j->tscr + (size_t)tid * j->tscr_stride;
	scratch sc = {(float *)s, (uint16_t *)(s + 4 * TILE_BYTES), (uint16_t *)(s + 6 * TILE_BYTES)};
	return sc;
}

// tiles_begin configures all eight tiles as 16 rows × 64 bytes. (GCC 12's
// _tile_loadconfig tells the compiler it reads 8 bytes of the config, so
// stores to the rest could be dropped: the asm here names all 64.)
static void tiles_begin(void)
{
	tile_config cfg __attribute__((aligned(64)));
	memset(&cfg, 0, sizeof cfg);
	cfg.palette = 1;
	for (int t = 0; t < 8; t++) {
		cfg.rows[t] = 16;
		cfg.colsb[t] = 64;
	}
	__asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
}

static void tiles_end(void) { _tile_release(); }

// pack_x fills worker tid's share of the B tiles of x: [mpad/16][kp/32]
// tiles, zero past row m and column k.
static void pack_x(const float *x, int64_t ldx, int m, int k, int mpad, int kp, uint32_t *dst, int tid, int threads)
{
	int kb = kp / 32, ntiles = mpad / 16 * kb, units = (ntiles + PACK_TILES - 1) / PACK_TILES, lo, hi;
	kern_part(units, 1, threads, tid, &lo, &hi);
	const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
						 _mm512_set1_epi32(16));
	int t1 = hi * PACK_TILES < ntiles ? hi * PACK_TILES : ntiles;
	for (int t = lo * PACK_TILES; t < t1; t++) {
		int mb = t / kb, b = t % kb, k0 = b * 32;
		uint32_t *tile = dst + (size_t)t * TILE_U32;
		int v0 = k - k0 < 0 ? 0 : (k - k0 > 16 ? 16 : k - k0);
		int v1 = k - k0 - 16 < 0 ? 0 : (k - k0 - 16 > 16 ? 16 : k - k0 - 16);
		for (int jj = 0; jj < 16; jj++) {
			int row = mb * 16 + jj;
			__m512i pairs = _mm512_setzero_si512();
			if (row < m) {
				const float *s = x + (int64_t)row * ldx + k0;
				__m256i lo16 = round16(_mm512_maskz_loadu_ps(mask16(v0), s));
				__m256i hi16 = round16(_mm512_maskz_loadu_ps(mask16(v1), s + 16));
				pairs = _mm512_inserti64x4(_mm512_castsi256_si512(lo16), hi16, 1);
			}
			// 32 bf16 of row `row` are 16 pairs, one per tile row p: column jj.
			_mm512_i32scatter_epi32(tile + jj, rows, pairs, 4);
		}
	}
}

// a_ref is where one A tile of a unit comes from.
typedef struct {
	const uint16_t *p; // column 0 of the unit's k range, full steps
	int64_t ld;        // elements
	const uint16_t *tp; // the step past the last full one (a padded copy), or NULL
	int64_t tld;
	int n0;    // first row of the block in its matrix
	int valid; // rows that exist (≤ 16)
} a_ref;

// make_ref prepares block `block` of w (k columns) as A tiles, copying a row
// tail into ntail [16][kp] and a column tail into ktail [16][32].
static a_ref make_ref(const kern_mat *w, int k, int kp, int block, uint16_t *ntail, uint16_t *ktail)
{
	a_ref a;
	a.n0 = block * 16;
	a.valid = w->rows - a.n0 < 16 ? w->rows - a.n0 : 16;
	int k32 = k & ~31;
	if (a.valid < 16) {
		memset(ntail, 0, (size_t)16 * kp * 2);
		for (int r = 0; r < a.valid; r++)
			memcpy(ntail + (size_t)r * kp, w->p + (int64_t)(a.n0 + r) * w->ld, (size_t)k * 2);
		a.p = ntail;
		a.ld = kp;
		a.tp = k32 < k ? ntail + k32 : NULL;
		a.tld = kp;
	} else {
		a.p = w->p + (int64_t)a.n0 * w->ld;
		a.ld = w->ld;
		a.tp = NULL;
		if (k32 < k) {
			memset(ktail, 0, TILE_BYTES);
			for (int r = 0; r < 16; r++)
				memcpy(ktail + r * 32, a.p + (int64_t)r * a.ld + k32, (size_t)(k - k32) * 2);
			a.tp = ktail;
			a.tld = 32;
		}
	}
	COMPILER_BARRIER();
	return a;
}

// prefetch_rows prefetches, for the 16 rows at a (pitch ld), the line at
// column c.
static inline void prefetch_rows(const uint16_t *a, int64_t ld, int64_t c)
{
	for (int r = 0; r < 16; r++)
		_mm_prefetch((const char *)(a + r * ld + c), _MM_HINT_T0);
}

// A unit's product job: everything run_unit needs besides the unit.
typedef struct {
	const kern_job *j;
	const uint32_t *bt; // B tiles [mb][kbs]
	int kbs;            // B tiles along k
	int k;              // columns of the product
	int k0, k1;         // this K chunk
	int first, last;    // chunk position
	int mblocks;        // mpad / 16
	float *cpart;       // partial sums [rows][mpad] when there are several chunks
	int crow[2];        // cpart row of each A's row 0
	int gate_up;        // the unit is (gate block, up block): finalize into h
	scratch sc;
} unit_ctx;

// emit_tile writes C tile c (16 rows n, 16 columns m) to y: rows n0 + [0,
// nvalid), columns m0 + [0, mvalid).
static void emit_tile(const kern_op *op, const float *c, int n0, int nvalid, int m0, int mvalid)
{
	const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
						_mm512_set1_epi32(16));
	__mmask16 nm = mask16(nvalid);
	__m512 b = op->bias ? _mm512_maskz_loadu_ps(nm, op->bias + n0) : _mm512_setzero_ps();
	for (int q = 0; q < mvalid; q++) {
		__m512 v = _mm512_i32gather_ps(idx, c + q, 4);
		if (op->bias)
			v = _mm512_add_ps(v, b);
		float *y = op->y + (int64_t)(m0 + q) * op->ldy + n0;
		if (op->accumulate)
			v = _mm512_add_ps(_mm512_maskz_loadu_ps(nm, y), v);
		_mm512_mask_storeu_ps(y, nm, v);
	}
}

// emit_h turns C tiles g and u (16 rows n, 16 columns m) into h = bf16(silu(g)·u)
// in the B tiles of the down product: tile [mb][n0/32], rows (n0%32)/2 + [0, 8).
static void emit_h(const kern_job *j, const float *g, const float *u, int n0, int mb)
{
	int kbs = j->rp / 32;
	uint32_t *tile = (uint32_t *)j->hpk + ((size_t)mb * kbs + n0 / 32) * TILE_U32 + (n0 % 32) / 2 * 16;
	for (int i = 0; i < 16; i += 2) {
		__m256i even = round16(silu_mul16(_mm512_loadu_ps(g + i * 16), _mm512_loadu_ps(u + i * 16)));
		__m256i odd = round16(silu_mul16(_mm512_loadu_ps(g + (i + 1) * 16), _mm512_loadu_ps(u + (i + 1) * 16)));
		__m512i pairs = _mm512_or_si512(_mm512_cvtepu16_epi32(even), _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd), 16));
		_mm512_storeu_si512(tile + i / 2 * 16, pairs);
	}
}

// run_unit accumulates one unit (A tiles a[0], and a[1] if two) over the
// chunk's k steps for every pair of B tiles, then stores the C tiles: to
// cpart between chunks, else to y (or h). next is the following unit's A
// rows, prefetched while the first B pair runs.
static void run_unit(const unit_ctx *u, const a_ref *a, int two, const a_ref *next, int next_two)
{
	const kern_op *op = u->j->op;
	int steps = (u->k1 - u->k0) / 32;             // full steps of this chunk
	int tail = u->last && (u->k1 & 31) != 0;        // one more, from the padded copies
	int64_t s0 = a[0].ld * 2, s1 = two ? a[1].ld * 2 : 0;
	const uint16_t *p0 = a[0].p + u->k0, *p1 = two ? a[1].p + u->k0 : NULL;
	int64_t mpad = (int64_t)u->mblocks * 16, span = u->k1 - u->k0;
	int pfd = op->prefetch == 0 ? PF_ELEMS : op->prefetch;

	for (int mb = 0; mb < u->mblocks; mb += 2) {
		int twob = mb + 1 < u->mblocks;
		const uint32_t *b0 = u->bt + ((size_t)mb * u->kbs + u->k0 / 32) * TILE_U32;
		const uint32_t *b1 = b0 + (size_t)u->kbs * TILE_U32;
		if (u->first) {
			_tile_zero(0);
			_tile_zero(1);
			_tile_zero(2);
			_tile_zero(3);
		} else {
			COMPILER_BARRIER();
			_tile_loadd(0, u->cpart + u->crow[0] * mpad + mb * 16, mpad * 4);
			if (two)
				_tile_loadd(1, u->cpart + u->crow[1] * mpad + mb * 16, mpad * 4);
			if (twob) {
				_tile_loadd(2, u->cpart + u->crow[0] * mpad + (mb + 1) * 16, mpad * 4);
				if (two)
					_tile_loadd(3, u->cpart + u->crow[1] * mpad + (mb + 1) * 16, mpad * 4);
			}
		}
		// While the first B pair runs, prefetch each row pfd columns ahead,
		// running on into the next unit's rows.
		int pf = mb == 0 && pfd > 0;
		for (int s = 0; s < steps; s++) {
			_tile_loadd(4, p0 + s * 32, s0);
			if (two)
				_tile_loadd(5, p1 + s * 32, s1);
			_tile_loadd(6, b0 + (size_t)s * TILE_U32, 64);
			if (twob)
				_tile_loadd(7, b1 + (size_t)s * TILE_U32, 64);
			_tile_dpbf16ps(0, 4, 6);
			if (two)
				_tile_dpbf16ps(1, 5, 6);
			if (twob) {
				_tile_dpbf16ps(2, 4, 7);
				if (two)
					_tile_dpbf16ps(3, 5, 7);
			}
			if (pf) {
				int64_t c = (int64_t)s * 32 + pfd;
				if (c < span) {
					prefetch_rows(p0, a[0].ld, c);
					if (two)
						prefetch_rows(p1, a[1].ld, c);
				} else if (next) {
					prefetch_rows(next[0].p + u->k0, next[0].ld, c - span);
					if (next_two)
						prefetch_rows(next[1].p + u->k0, next[1].ld, c - span);
				}
			}
		}
		if (tail) {
			COMPILER_BARRIER();
			_tile_loadd(4, a[0].tp, a[0].tld * 2);
			if (two)
				_tile_loadd(5, a[1].tp, a[1].tld * 2);
			_tile_loadd(6, b0 + (size_t)steps * TILE_U32, 64);
			if (twob)
				_tile_loadd(7, b1 + (size_t)steps * TILE_U32, 64);
			_tile_dpbf16ps(0, 4, 6);
			if (two)
				_tile_dpbf16ps(1, 5, 6);
			if (twob) {
				_tile_dpbf16ps(2, 4, 7);
				if (two)
					_tile_dpbf16ps(3, 5, 7);
			}
		}
		if (!u->last) {
			_tile_stored(0, u->cpart + u->crow[0] * mpad + mb * 16, mpad * 4);
			if (two)
				_tile_stored(1, u->cpart + u->crow[1] * mpad + mb * 16, mpad * 4);
			if (twob) {
				_tile_stored(2, u->cpart + u->crow[0] * mpad + (mb + 1) * 16, mpad * 4);
				if (two)
					_tile_stored(3, u->cpart + u->crow[1] * mpad + (mb + 1) * 16, mpad * 4);
			}
			COMPILER_BARRIER();
			continue;
		}
		float *c = u->sc.c;
		_tile_stored(0, c, 64);
		if (two)
			_tile_stored(1, c + 256, 64);
		if (twob) {
			_tile_stored(2, c + 512, 64);
			if (two)
				_tile_stored(3, c + 768, 64);
		}
		COMPILER_BARRIER();
		for (int jb = 0; jb <= twob; jb++) {
			const float *cb = c + jb * 512;
			if (u->gate_up) {
				emit_h(u->j, cb, cb + 256, a[0].n0, mb + jb);
				continue;
			}
			int m0 = (mb + jb) * 16, mvalid = u->j->m - m0 < 16 ? u->j->m - m0 : 16;
			if (mvalid <= 0)
				continue;
			emit_tile(op, cb, a[0].n0, a[0].valid, m0, mvalid);
			if (two)
				emit_tile(op, cb + 256, a[1].n0, a[1].valid, m0, mvalid);
		}
	}
}

// direct_ref is block `block` of w as the prefetcher sees it (no copies);
// valid is 0 past the matrix's full blocks.
static a_ref direct_ref(const kern_mat *w, int block)
{
	a_ref a = {0};
	a.n0 = block * 16;
	a.valid = w->rows - a.n0 >= 16 ? 16 : 0;
	a.p = w->p + (int64_t)a.n0 * w->ld;
	a.ld = w->ld;
	return a;
}

// product runs blocks [b0, b1) of w (k columns, B tiles bt with kbs tiles
// along k) in K chunks of kc: units of two consecutive blocks.
static void product(const kern_job *j, const kern_mat *w, int k, int kc, const uint32_t *bt, int b0, int b1, scratch sc)
{
	int kp = (k + 31) & ~31;
	unit_ctx u = {.j = j, .bt = bt, .kbs = kp / 32, .k = k, .mblocks = j->mpad / 16, .cpart = j->cpart, .sc = sc};
	for (int k0 = 0; k0 < k; k0 += kc) {
		u.k0 = k0;
		u.k1 = k0 + kc < k ? k0 + kc : k;
		u.first = k0 == 0;
		u.last = u.k1 == k;
		for (int b = b0; b < b1; b += 2) {
			int two = b + 1 < b1;
			a_ref a[2], nx[2];
			a[0] = make_ref(w, k, kp, b, sc.ntail, sc.ktail);
			if (two)
				a[1] = make_ref(w, k, kp, b + 1, sc.ntail + (size_t)16 * kp, sc.ktail + 16 * 32);
			u.crow[0] = b * 16;
			u.crow[1] = (b + 1) * 16;
			int nn = 0;
			if (b + 2 < b1) {
				nx[0] = direct_ref(w, b + 2);
				nx[1] = direct_ref(w, b + 3);
				nn = nx[0].valid ? (b + 3 < b1 && nx[1].valid ? 2 : 1) : 0;
			}
			run_unit(&u, a, two, nn ? nx : NULL, nn == 2);
		}
	}
}

// gate_up runs blocks [b0, b1) of gate and up as units (gate block, up
// block) and leaves h in the B tiles of the down product.
static void gate_up(const kern_job *j, int b0, int b1, scratch sc)
{
	const kern_op *op = j->op;
	int k = j->k, kp = j->kp, kc = j->kc;
	int r16 = (j->r + 15) & ~15;
	unit_ctx u = {.j = j, .bt = j->xpk, .kbs = kp / 32, .k = k, .mblocks = j->mpad / 16, .cpart = j->cpart,
		      .gate_up = 1, .sc = sc};
	for (int k0 = 0; k0 < k; k0 += kc) {
		u.k0 = k0;
		u.k1 = k0 + kc < k ? k0 + kc : k;
		u.first = k0 == 0;
		u.last = u.k1 == k;
		for (int b = b0; b < b1; b++) {
			a_ref a[2], nx[2];
			a[0] = make_ref(&op->gate, k, kp, b, sc.ntail, sc.ktail);
			a[1] = make_ref(&op->up, k, kp, b, sc.ntail + (size_t)16 * kp, sc.ktail + 16 * 32);
			u.crow[0] = b * 16;
			u.crow[1] = r16 + b * 16;
			int nn = 0;
			if (b + 1 < b1) {
				nx[0] = direct_ref(&op->gate, b + 1);
				nx[1] = direct_ref(&op->up, b + 1);
				nn = nx[0].valid && nx[1].valid ? 2 : 0;
			}
			run_unit(&u, a, 1, nn ? nx : NULL, 1);
		}
	}
}

// phase_rows runs a phase over rows [0, n): blocks of w (k columns, B tiles
// bt, K chunks of kc) or, with gate_up_phase, blocks of gate and up. The
// workers take tasks of rows in turn; a task runs all K chunks of its
// blocks, so their partial sums never leave the worker.
static void phase_rows(kern_pool *p, int tid, const kern_job *j, _Atomic int *counter, int gate_up_phase,
		       const kern_mat *w, int k, int kc, const uint32_t *bt, int n)
{
	int lo, hi, configured = 0;
	scratch sc = scratch_of(j, tid);
	kern_tasks tasks = kern_tasks_of(n, KERN_NBLOCK, kern_threads(p));
	while (kern_next_task(counter, tasks, &lo, &hi)) {
		if (!configured) {
			tiles_begin();
			configured = 1;
		}
		if (gate_up_phase)
			gate_up(j, lo / 16, (hi + 15) / 16, sc);
		else
			product(j, w, k, kc, bt, lo / 16, (hi + 15) / 16, sc);
	}
	if (configured)
		tiles_end();
}

void kern_amx_gemm(kern_pool *p, int tid, kern_job *j)
{
	const kern_op *op = j->op;
	pack_x(op->x, op->ldx, j->m, j->k, j->mpad, j->kp, j->xpk, tid, kern_threads(p));
	kern_barrier(p);
	phase_rows(p, tid, j, &j->task[0], 0, &op->w, j->k, j->kc, j->xpk, j->n);
}

void kern_amx_mlp(kern_pool *p, int tid, kern_job *j)
{
	const kern_op *op = j->op;
	int T = kern_threads(p), lo, hi;
	int kbs = j->rp / 32;
	pack_x(op->x, op->ldx, j->m, j->k, j->mpad, j->kp, j->xpk, tid, T);
	// The last k-block of h may have rows no unit writes (r rounded up to 16
	// is below rp): zero it now; the units overwrite what exists.
	kern_part(j->mpad / 16, 1, T, tid, &lo, &hi);
	for (int mb = lo; mb < hi; mb++)
		memset((uint32_t *)j->hpk + ((size_t)mb * kbs + kbs - 1) * TILE_U32, 0, TILE_BYTES);
	kern_barrier(p);
	phase_rows(p, tid, j, &j->task[0], 1, NULL, j->k, j->kc, NULL, j->r);
	kern_barrier(p);
	phase_rows(p, tid, j, &j->task[1], 0, &op->down, j->r, j->kc2, j->hpk, j->n);
}

#pragma GCC pop_options
