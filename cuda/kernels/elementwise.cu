// elementwise.cu: Add, SiLU, SiLUMul and GELU. The activation functions are
// evaluated in double and rounded to float, as the cpu backend does.
//
// Each kernel moves 16 bytes per load (four elements a thread and step)
// when n is a multiple of 4 and every pointer is 16-byte aligned (the
// launch grid is sized for that in Go), else one element at a time: the
// same arithmetic either way.

// vla_vec4 says whether n and the pointers allow float4 accesses.
__device__ __forceinline__ bool vla_vec4(u64 n, const void *a, const void *b, const void *c) {
	return n % 4 == 0 && (((u64)a | (u64)b | (u64)c) & 15) == 0;
}

__device__ __forceinline__ float vla_silu1(float x) {
	const double v = x;
	return (float)(v / (1.0 + exp(-v)));
}

__device__ __forceinline__ float vla_gelu1(float x, int tanh_approx) {
	const double sqrt_2_over_pi = 0.7978845608028654;
	const double inv_sqrt2 = 0.7071067811865476;
	const double v = x;
	if (tanh_approx) return (float)(0.5 * v * (1.0 + tanh(sqrt_2_over_pi * (v + 0.044715 * v * v * v))));
	return (float)(0.5 * v * erfc(-v * inv_sqrt2));
}

extern "C" __global__ void vla_add(float *d, const float *a, const float *b, u64 n) {
	if (vla_vec4(n, d, a, b)) {
		VLA_FOR(i, n / 4) {
			const float4 x = ((const float4 *)a)[i], y = ((const float4 *)b)[i];
			float4 r;
			r.x = x.x + y.x;
			r.y = x.y + y.y;
			r.z = x.z + y.z;
			r.w = x.w + y.w;
			((float4 *)d)[i] = r;
		}
		return;
	}
	VLA_FOR(i, n) d[i] = a[i] + b[i];
}

// d = silu(x) = x / (1 + e^-x).
extern "C" __global__ void vla_silu(float *d, const float *x, u64 n) {
	if (vla_vec4(n, d, x, x)) {
		VLA_FOR(i, n / 4) {
			const float4 v = ((const float4 *)x)[i];
			float4 r;
			r.x = vla_silu1(v.x);
			r.y = vla_silu1(v.y);
			r.z = vla_silu1(v.z);
			r.w = vla_silu1(v.w);
			((float4 *)d)[i] = r;
		}
		return;
	}
	VLA_FOR(i, n) d[i] = vla_silu1(x[i]);
}

// d = silu(g) * u, silu(g) = g / (1 + e^-g).
extern "C" __global__ void vla_silu_mul(float *d, const float *g, const float *u, u64 n) {
	if (vla_vec4(n, d, g, u)) {
		VLA_FOR(i, n / 4) {
			const float4 x = ((const float4 *)g)[i], y = ((const float4 *)u)[i];
			float4 r;
			r.x = vla_silu1(x.x) * y.x;
			r.y = vla_silu1(x.y) * y.y;
			r.z = vla_silu1(x.z) * y.z;
			r.w = vla_silu1(x.w) * y.w;
			((float4 *)d)[i] = r;
		}
		return;
	}
	VLA_FOR(i, n) d[i] = vla_silu1(g[i]) * u[i];
}

// d = gelu(x): exact x/2·erfc(-x/√2), or with tanh_approx set
// x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
extern "C" __global__ void vla_gelu(float *d, const float *x, u64 n, int tanh_approx) {
	if (vla_vec4(n, d, x, x)) {
		VLA_FOR(i, n / 4) {
			const float4 v = ((const float4 *)x)[i];
			float4 r;
			r.x = vla_gelu1(v.x, tanh_approx);
			r.y = vla_gelu1(v.y, tanh_approx);
			r.z = vla_gelu1(v.z, tanh_approx);
			r.w = vla_gelu1(v.w, tanh_approx);
			((float4 *)d)[i] = r;
		}
		return;
	}
	VLA_FOR(i, n) d[i] = vla_gelu1(x[i], tanh_approx);
}

// vla_bias_act1 is one element of vla_add_bias (convert.cu): y + bias[c]
// (a null bias is none), then GELU for act 1 (exact) or 2 (tanh).
__device__ __forceinline__ float vla_bias_act1(float y, const void *__restrict__ bias, int bdt, u64 c, int act) {
	if (bias != 0) y += vla_load(bias, bdt, c);
	return act == 0 ? y : vla_gelu1(y, act == 2);
}
