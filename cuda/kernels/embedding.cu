// embedding.cu: gather rows of a table [V, hidden] (F32, F16 or BF16) into
// float rows. The ids were checked against V on the host. Blocks take
// (row, 1024-column chunk) pairs in turn, threads the columns: one 64-bit
// division per chunk, not per element.

#define VLA_EMB_CHUNK 1024

extern "C" __global__ void vla_embedding(float *__restrict__ y, const void *__restrict__ table, int dt,
                                         const int *__restrict__ ids, u64 n_ids, u64 hidden) {
	vla_pdl_enter();
	const u64 chunks = (hidden + VLA_EMB_CHUNK - 1) / VLA_EMB_CHUNK;
	for (u64 b = blockIdx.x; b < n_ids * chunks; b += gridDim.x) {
		const u64 r = b / chunks, c0 = (b % chunks) * VLA_EMB_CHUNK;
		const u64 c1 = min(c0 + VLA_EMB_CHUNK, hidden);
		const u64 src = (u64)ids[r] * hidden;
		float *yr = y + r * hidden;
		for (u64 c = c0 + threadIdx.x; c < c1; c += blockDim.x) yr[c] = vla_load(table, dt, src + c);
	}
}
