// bench.cu: kernels for measuring the device (benchmarks and tests), not
// used by any op.

// vla_fill_random fills n elements of type dt with uniform values in
// [-scale, scale) from a hash of the index and seed: random data, made on
// the device at memory speed (timing on zeros flatters some kernels).
extern "C" __global__ void vla_fill_random(void *p, int dt, u64 n, u32 seed, float scale) {
	vla_pdl_enter();
	VLA_FOR(i, n) {
		u32 h = (u32)i * 0x9e3779b9u ^ (u32)(i >> 32) * 0x85ebca6bu ^ seed * 0xc2b2ae35u;
		h ^= h >> 16;
		h *= 0x7feb352du;
		h ^= h >> 15;
		h *= 0x846ca68bu;
		h ^= h >> 16;
		const float f = ((float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale;
		switch (dt) {
		case VLA_BF16: ((u16 *)p)[i] = vla_f32_to_bf16(f); break;
		case VLA_F16: ((u16 *)p)[i] = vla_f32_to_f16(f); break;
		default: ((float *)p)[i] = f;
		}
	}
}

// vla_read_stream reads n4 float4 values and writes nothing (unless a sum
// hits an impossible value): the device's read-only memory bandwidth.
extern "C" __global__ void vla_read_stream(float *out, const float4 *__restrict__ p, u64 n4) {
	vla_pdl_enter();
	const u64 stride = (u64)gridDim.x * blockDim.x;
	u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
	float s = 0.0f;
	for (; i + 3 * stride < n4; i += 4 * stride) { // four loads in flight
		const float4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
		s += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w)) + ((c.x + c.y) + (c.z + c.w)) +
		     ((d.x + d.y) + (d.z + d.w));
	}
	for (; i < n4; i += stride) {
		const float4 v = p[i];
		s += (v.x + v.y) + (v.z + v.w);
	}
	if (s == 1.2345e30f) out[0] = s;
}

// vla_spin keeps one thread busy for ns nanoseconds of the GPU's clock, so
// that a timed region starts with the GPU busy and the host's launches
// ahead of it.
extern "C" __global__ void vla_spin(u64 ns) {
	vla_pdl_enter();
	u64 t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}
