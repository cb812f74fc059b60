// flow.cu: the action expert's Euler steps on the device (diffusion's
// flow matching): the Fourier features of the state, action_in_proj's
// input, and the Euler update, with the step's time read from device
// memory so that one captured graph serves every step.

// vla_fourier writes the features of x [T, C] into d [T, (C+1)·2H]: for
// channel c of row w, sin(a_j)·√2 for j < H then cos(a_j)·√2, with a_j =
// ((x·f[c][j])·2)·π, every float operation rounded as diffusion's host
// code rounds it (no contraction: __fmul_rn) and the sine and cosine in
// double, rounded to float; then row *step of tf [steps, 2H] (the time's
// features, computed on the host), row 0 when step is null.
extern "C" __global__ void vla_fourier(float *__restrict__ d, const float *__restrict__ x, const float *__restrict__ f,
                                       const float *__restrict__ tf, const int *__restrict__ step, int T, int C, int H) {
	vla_pdl_enter();
	const float pi = __int_as_float(0x40490fdb), sqrt2 = __int_as_float(0x3fb504f3); // float32(math.Pi), float32(math.Sqrt2)
	const int per = (C + 1) * 2 * H;
	const float *trow = tf + (u64)(step ? *step : 0) * 2 * H;
	VLA_FOR(i, (u64)T * (C + 1) * H) {
		const int w = (int)(i / ((C + 1) * H)), r = (int)(i % ((C + 1) * H)), c = r / H, j = r % H;
		float *row = d + (u64)w * per + c * 2 * H;
		if (c == C) { // the time's features: two of them a thread
			row[j] = trow[j];
			row[H + j] = trow[H + j];
			continue;
		}
		const float a = __fmul_rn(__fmul_rn(__fmul_rn(x[w * C + c], f[c * H + j]), 2.0f), pi);
		row[j] = __fmul_rn(__double2float_rn(sin((double)a)), sqrt2);
		row[H + j] = __fmul_rn(__double2float_rn(cos((double)a)), sqrt2);
	}
}

// vla_euler_step sets x[i] += dt[*step]·v[i] (the product rounded to
// float, then the sum: diffusion's Flow.Integrate), then *step += 1. One
// block.
extern "C" __global__ void vla_euler_step(float *__restrict__ x, const float *__restrict__ v, const float *__restrict__ dt,
                                          int *__restrict__ step, int n) {
	vla_pdl_enter();
	const float h = dt[*step];
	for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = __fadd_rn(x[i], __fmul_rn(h, v[i]));
	__syncthreads(); // every thread has read *step
	if (threadIdx.x == 0) *step += 1;
}
