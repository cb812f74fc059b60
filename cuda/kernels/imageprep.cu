// imageprep.cu: a vision model's image preprocessing on the device
// (backend.ImagePrep): torchvision's antialiased bicubic resize of a uint8
// RGB image as package vision computes it (resample.go: separable
// fixed-point filters, horizontal pass first, bytes between the passes),
// then normalization through a lookup table and transformers' patch
// layout. Integer sums and a table lookup: the values are the host's bit
// for bit.

__device__ __forceinline__ unsigned char vla_clip8(int v) { return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v); }

// vla_resize_h filters each row of in (h rows of in_w RGB pixels) into
// out (h rows of out_w): output pixel x of a row is, per channel,
// clip8((2^(prec-1) + Σ_{j<count[x]} w[x·taps+j]·in[start[x]+j]) >> prec),
// the sum in int32 and the shift arithmetic. A thread an output pixel.
extern "C" __global__ void vla_resize_h(unsigned char *__restrict__ out, const unsigned char *__restrict__ in,
                                        const int *__restrict__ start, const int *__restrict__ count,
                                        const int *__restrict__ w, int taps, int prec, int in_w, int out_w, int h) {
	vla_pdl_enter();
	const int half = 1 << (prec - 1);
	VLA_FOR(i, (u64)h * out_w) {
		const int y = (int)(i / out_w), x = (int)(i % out_w);
		const int n = count[x];
		const int *wx = w + (u64)x * taps;
		const unsigned char *p = in + ((u64)y * in_w + start[x]) * 3;
		int r = half, g = half, b = half;
		for (int j = 0; j < n; j++, p += 3) {
			const int k = wx[j];
			r += k * p[0];
			g += k * p[1];
			b += k * p[2];
		}
		unsigned char *o = out + i * 3;
		o[0] = vla_clip8(r >> prec);
		o[1] = vla_clip8(g >> prec);
		o[2] = vla_clip8(b >> prec);
	}
}

// vla_patchify writes the pixel values of an out_w × out_h RGB image
// (BGR if bgr) into dst: the image's first row of pixel values. The image
// is src, out_w pixels wide, filtered vertically first where w is set
// (out_h output rows from src's rows, as vla_resize_h filters columns)
// and read as it is where w is null. Byte v of channel c becomes
// lut[c·256 + v]; row r = ((bh·W/(P·m) + bw)·m + mh)·m + mw holds patch
// (bh·m + mh, bw·m + mw) as (c, t, y, x), the same values for each of the
// tp values of t. A thread a value of the resized image, consecutive
// threads along x, so that a patch row is written by consecutive threads.
extern "C" __global__ void vla_patchify(float *__restrict__ dst, const unsigned char *__restrict__ src,
                                        const int *__restrict__ start, const int *__restrict__ count,
                                        const int *__restrict__ w, int taps, int prec,
                                        const float *__restrict__ lut, int bgr, int out_w, int out_h, int P, int m,
                                        int tp) {
	vla_pdl_enter();
	const int half = w ? 1 << (prec - 1) : 0;
	const int row_size = 3 * tp * P * P, blocks_w = out_w / (P * m);
	const u64 stride = (u64)out_w * 3;
	VLA_FOR(i, (u64)3 * out_h * out_w) {
		const int x = (int)(i % out_w), yc = (int)(i / out_w);
		const int y = yc % out_h, c = yc / out_h;
		const unsigned char *p = src + (u64)x * 3 + (bgr ? 2 - c : c);
		int v;
		if (w) {
			const int n = count[y];
			const int *wy = w + (u64)y * taps;
			p += start[y] * stride;
			int acc = half;
			for (int j = 0; j < n; j++, p += stride) acc += wy[j] * *p;
			v = vla_clip8(acc >> prec);
		} else {
			v = p[y * stride];
		}
		const float val = lut[c * 256 + v];
		const int py = y / P, px = x / P;
		const int r = ((py / m * blocks_w + px / m) * m + py % m) * m + px % m;
		float *o = dst + (u64)r * row_size + (u64)(c * tp * P + y % P) * P + x % P;
		for (int t = 0; t < tp; t++) o[(u64)t * P * P] = val;
	}
}
