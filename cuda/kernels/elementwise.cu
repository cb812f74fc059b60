// elementwise.cu: Add, SiLU, SiLUMul and GELU. The activation functions are
// evaluated in double and rounded to float, as the cpu backend does.

extern "C" __global__ void vla_add(float *d, const float *a, const float *b, u64 n) {
	VLA_FOR(i, n) d[i] = a[i] + b[i];
}

// d = silu(x) = x / (1 + e^-x).
extern "C" __global__ void vla_silu(float *d, const float *x, u64 n) {
	VLA_FOR(i, n) {
		double v = x[i];
		d[i] = (float)(v / (1.0 + exp(-v)));
	}
}

// d = silu(g) * u, silu(g) = g / (1 + e^-g).
extern "C" __global__ void vla_silu_mul(float *d, const float *g, const float *u, u64 n) {
	VLA_FOR(i, n) {
		double x = g[i];
		d[i] = (float)(x / (1.0 + exp(-x))) * u[i];
	}
}

// d = gelu(x): exact x/2·erfc(-x/√2), or with tanh_approx set
// x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
extern "C" __global__ void vla_gelu(float *d, const float *x, u64 n, int tanh_approx) {
	const double sqrt_2_over_pi = 0.7978845608028654;
	const double inv_sqrt2 = 0.7071067811865476;
	VLA_FOR(i, n) {
		double v = x[i];
		if (tanh_approx)
			d[i] = (float)(0.5 * v * (1.0 + tanh(sqrt_2_over_pi * (v + 0.044715 * v * v * v))));
		else
			d[i] = (float)(0.5 * v * erfc(-v * inv_sqrt2));
	}
}
