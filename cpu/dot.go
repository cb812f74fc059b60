package cpu

// Dot-product kernels. Every kernel computes each dot product in the same
// order: one float32 sum over k = 0, 1, ..., K-1, adding one rounded
// product at a time. So a value does not depend on which kernel computed
// it, on the tiling, or on the number of threads: only on the operands.
// The kernels get their speed from computing several independent sums at
// once instead.
//
// The explicit float32 conversions of each product keep the compiler from
// fusing a multiply and an add into an FMA on some platforms and not others.

// dot is the dot product of x and w (len(w) >= len(x)).
func dot(x, w []float32) float32 {
	w = w[:len(x)]
	var a float32
	for k, xv := range x {
		a += float32(xv * w[k])
	}
	return a
}

// dot4 is the dot product of x with each of w0..w3 (each at least len(x)).
func dot4(x, w0, w1, w2, w3 []float32) (r0, r1, r2, r3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for k, xv := range x {
		r0 += float32(xv * w0[k])
		r1 += float32(xv * w1[k])
		r2 += float32(xv * w2[k])
		r3 += float32(xv * w3[k])
	}
	return r0, r1, r2, r3
}

// dot2x2 is the dot products of x0 and x1 with each of w0 and w1.
func dot2x2(x0, x1, w0, w1 []float32) (r00, r01, r10, r11 float32) {
	n := len(x0)
	x1, w0, w1 = x1[:n], w0[:n], w1[:n]
	for k, u := range x0 {
		v := x1[k]
		p, q := w0[k], w1[k]
		r00 += float32(u * p)
		r10 += float32(v * p)
		r01 += float32(u * q)
		r11 += float32(v * q)
	}
	return r00, r01, r10, r11
}

// dotBF16 is dot with bfloat16 weights.
func dotBF16(x []float32, w []uint16) float32 {
	w = w[:len(x)]
	var a float32
	for k, xv := range x {
		a += float32(xv * bf16(w[k]))
	}
	return a
}

// dot4BF16 is dot4 with bfloat16 weights.
func dot4BF16(x []float32, w0, w1, w2, w3 []uint16) (r0, r1, r2, r3 float32) {
	n := len(x)
	w0, w1, w2, w3 = w0[:n], w1[:n], w2[:n], w3[:n]
	for k, xv := range x {
		r0 += float32(xv * bf16(w0[k]))
		r1 += float32(xv * bf16(w1[k]))
		r2 += float32(xv * bf16(w2[k]))
		r3 += float32(xv * bf16(w3[k]))
	}
	return r0, r1, r2, r3
}
