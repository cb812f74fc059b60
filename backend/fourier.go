package backend

import "math"

// FourierFeatures writes the Fourier features of one value v, as
// FlowFeed.Fourier and Alpamayo's FourierEncoderV2 define them, into dst
// [2·len(freqs)]: sin(a_j)·√2 for every frequency f_j, then cos(a_j)·√2,
// a_j = ((v·f_j)·2)·π, each float32 operation rounded as torch rounds it
// and the sine and cosine taken in float64: the host's reference for the
// op.
func FourierFeatures(dst []float32, v float32, freqs []float32) {
	const pi = float32(math.Pi)
	const sqrt2 = float32(math.Sqrt2)
	half := len(freqs)
	for j, f := range freqs {
		a := float64(float32(float32(float32(v*f)*2) * pi))
		dst[j] = float32(float32(math.Sin(a)) * sqrt2)
		dst[half+j] = float32(float32(math.Cos(a)) * sqrt2)
	}
}
