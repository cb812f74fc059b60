// embedding.cu: gather rows of a table [V, hidden] (F32, F16 or BF16) into
// float rows. An id outside [0, V) gives a row of zeros: the host checks
// the ids it uploads (Embedding), and EmbeddingAt's come from the device
// (ArgmaxAt's -1 when every logit is NaN). Blocks take
// (row, 1024-column chunk) pairs in turn, threads the columns: one 64-bit
// division per chunk, not per element.

#define VLA_EMB_CHUNK 1024

extern "C" __global__ void vla_embedding(float *__restrict__ y, const void *__restrict__ table, int dt,
                                         const int *__restrict__ ids, u64 n_ids, u64 hidden, u64 V) {
	vla_pdl_enter();
	const u64 chunks = (hidden + VLA_EMB_CHUNK - 1) / VLA_EMB_CHUNK;
	for (u64 b = blockIdx.x; b < n_ids * chunks; b += gridDim.x) {
		const u64 r = b / chunks, c0 = (b % chunks) * VLA_EMB_CHUNK;
		const u64 c1 = min(c0 + VLA_EMB_CHUNK, hidden);
		const int id = ids[r];
		float *yr = y + r * hidden;
		if (id < 0 || (u64)id >= V) {
			for (u64 c = c0 + threadIdx.x; c < c1; c += blockDim.x) yr[c] = 0.0f;
			continue;
		}
		const u64 src = (u64)id * hidden;
		for (u64 c = c0 + threadIdx.x; c < c1; c += blockDim.x) yr[c] = vla_load(table, dt, src + c);
	}
}
