// embedding.cu: gather rows of a table [V, hidden] (F32, F16 or BF16) into
// float rows. The ids were checked against V on the host.

extern "C" __global__ void vla_embedding(float *__restrict__ y, const void *__restrict__ table, int dt,
                                         const int *__restrict__ ids, u64 n_ids, u64 hidden) {
	VLA_FOR(i, n_ids * hidden) {
		const u64 r = i / hidden, c = i % hidden;
		y[i] = vla_load(table, dt, (u64)ids[r] * hidden + c);
	}
}
