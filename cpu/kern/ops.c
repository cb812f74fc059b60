// The entry points: size the job and its scratch for the path, then run it.
#include "internal.h"

#include <errno.h>

enum {
	// AMX_B_CHUNK bounds the B tiles of one K chunk (m × kc bf16) so they
	// stay in the L2 cache while a worker's units pass over them.
	AMX_B_CHUNK = 1 << 20,
	AMX_MIN_CHUNK = 256, // smallest K chunk, in columns
};

static int round_up(int n, int to) { return (n + to - 1) / to * to; }

// amx_chunk is the K chunk for mpad x rows and k columns: op's, or all of k
// when its B tiles fit AMX_B_CHUNK, else a multiple of 32.
static int amx_chunk(const kern_op *op, int mpad, int k)
{
	if (op->amx_kc > 0)
		return op->amx_kc >= k ? k : op->amx_kc;
	int kc = AMX_B_CHUNK / (mpad * 2) / KERN_KBLOCK * KERN_KBLOCK;
	if (kc < AMX_MIN_CHUNK)
		kc = AMX_MIN_CHUNK;
	return kc >= k ? k : kc;
}

static kern_fn job_fn(int path, int mlp)
{
	switch (path) {
	case KERN_SCALAR:
		return mlp ? kern_scalar_mlp : kern_scalar_gemm;
	case KERN_AVX2:
		return mlp ? kern_avx2_mlp : kern_avx2_gemm;
	case KERN_AVX512:
		return mlp ? kern_avx512_mlp : kern_avx512_gemm;
	case KERN_AMX:
		return mlp ? kern_amx_mlp : kern_amx_gemm;
	}
	return NULL;
}

static int run(kern_pool *p, const kern_op *op, int mlp)
{
	kern_fn fn = job_fn(op->path, mlp);
	if (!fn)
		return EINVAL;
	kern_job j = {.op = op, .m = op->m};
	j.k = mlp ? op->gate.cols : op->w.cols;
	j.n = mlp ? op->down.rows : op->w.rows;
	j.r = mlp ? op->gate.rows : 0;
	size_t m = (size_t)j.m, xbytes, hbytes, cbytes = 0, tbytes = 0;
	switch (op->path) {
	case KERN_SCALAR:
	case KERN_AVX2:
		j.kp = j.k;
		j.rp = j.r;
		xbytes = m * j.kp * 4;
		hbytes = m * j.rp * 4;
		break;
	case KERN_AVX512:
		j.kp = round_up(j.k, KERN_KBLOCK);
		j.rp = round_up(j.r, KERN_KBLOCK);
		xbytes = m * j.kp * 2;
		hbytes = m * j.rp * 2;
		break;
	default: { // KERN_AMX
		j.kp = round_up(j.k, KERN_KBLOCK);
		j.rp = round_up(j.r, KERN_KBLOCK);
		j.mpad = round_up(j.m, KERN_MBLOCK);
		xbytes = (size_t)j.mpad * j.kp * 2;
		hbytes = (size_t)j.mpad * j.rp * 2;
		j.kc = amx_chunk(op, j.mpad, j.k);
		j.kc2 = mlp ? amx_chunk(op, j.mpad, j.r) : 0;
		size_t rows = 0;
		if (j.kc < j.k)
			rows = mlp ? 2 * (size_t)round_up(j.r, KERN_NBLOCK) : (size_t)round_up(j.n, KERN_NBLOCK);
		if (mlp && j.kc2 < j.r && (size_t)round_up(j.n, KERN_NBLOCK) > rows)
			rows = round_up(j.n, KERN_NBLOCK);
		cbytes = rows * j.mpad * 4;
		j.tscr_stride = (kern_amx_scratch(j.kp > j.rp ? j.kp : j.rp) + 63) & ~(size_t)63;
		tbytes = j.tscr_stride * kern_threads(p);
	}
	}
	if (!(j.xpk = kern_scratch(p, KERN_SCRATCH_X, xbytes ? xbytes : 1)))
		return ENOMEM;
	if (mlp && !(j.hpk = kern_scratch(p, KERN_SCRATCH_H, hbytes ? hbytes : 1)))
		return ENOMEM;
	if (cbytes && !(j.cpart = kern_scratch(p, KERN_SCRATCH_C, cbytes)))
		return ENOMEM;
	if (tbytes && !(j.tscr = kern_scratch(p, KERN_SCRATCH_T, tbytes)))
		return ENOMEM;
	kern_run(p, fn, &j);
	return 0;
}

int kern_gemm(kern_pool *p, const kern_op *op) { return run(p, op, 0); }

int kern_mlp(kern_pool *p, const kern_op *op) { return run(p, op, 1); }
