package models

import "math"

// RopeInvFreq returns the rotary inverse frequencies for a head dimension
// and base, computed in float32 as transformers does:
// 1 / base^(2i/dim) for i < dim/2.
func RopeInvFreq(dim int, base float64) []float32 {
	half := dim / 2
	inv := make([]float32, half)
	for i := range inv {
		exp := float32(2*i) / float32(dim)
		inv[i] = 1 / float32(math.Pow(base, float64(exp)))
	}
	return inv
}

// RopeTables fills cos and sin ([len(pos), len(invFreq)], row-major) for
// the given positions: angle = float32(pos) · invFreq in float32, then cos
// and sin rounded to float32.
func RopeTables(cos, sin []float32, pos []int, invFreq []float32) {
	half := len(invFreq)
	for t, p := range pos {
		fp := float32(p)
		for i, f := range invFreq {
			a := float64(fp * f)
			cos[t*half+i] = float32(math.Cos(a))
			sin[t*half+i] = float32(math.Sin(a))
		}
	}
}
