package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"vlanode/sample"
)

// TestGPUArgmax checks Argmax against sample.Greedy of the values with the
// masked range set to -Inf: ties to the lowest index (within one thread's
// elements, across threads and across blocks), NaNs skipped, masked maxima
// ignored, blocks whose values are all NaN, every value NaN (-1), every
// value -Inf, and the vocabulary's size.
func TestGPUArgmax(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 13))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name   string
		vals   func(n int) []float32
		n      int
		lo, hi int
	}{
		{"random", func(n int) []float32 { return randVals(r, n, 10) }, 155704, 151669, 155703},
		{"random unmasked", func(n int) []float32 { return randVals(r, n, 10) }, 155704, 1, 0},
		{"ties", func(n int) []float32 {
			v := make([]float32, n)
			for _, i := range []int{4000, 3000, 1025, 90000} { // 1025 and 3000 share no thread
				v[i] = 5
			}
			return v
		}, 100000, -1, -1},
		{"max masked", func(n int) []float32 {
			v := randVals(r, n, 1)
			v[n-3] = 100
			return v
		}, 5000, 4990, 4999},
		{"nans", func(n int) []float32 {
			v := randVals(r, n, 1)
			for i := range v {
				if i%3 != 2 {
					v[i] = nan
				}
			}
			v[0] = inf // the largest, and first
			return v
		}, 3001, -1, -1},
		{"all nan", func(n int) []float32 { return filled(n, nan) }, 2048, -1, -1},
		{"the first blocks all nan", func(n int) []float32 {
			v := randVals(r, n, 1)
			for i := range 2500 { // blocks 0, 1 and half of 2 (5 blocks of 1,000)
				v[i] = nan
			}
			return v
		}, 5000, -1, -1},
		{"all -inf but nans", func(n int) []float32 {
			v := filled(n, -inf)
			v[0], v[1] = nan, nan
			return v
		}, 7, -1, -1},
		{"nans, the rest masked", func(n int) []float32 {
			v := filled(n, nan)
			v[40] = 3
			return v
		}, 64, 30, 50},
		{"one", func(n int) []float32 { return []float32{-2} }, 1, -1, -1},
		{"a mask past the end", func(n int) []float32 { return randVals(r, n, 1) }, 100, 1 << 40, 1 << 41},
		{"a mask over the end", func(n int) []float32 { return randVals(r, n, 1) }, 100, 90, 1 << 41},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.vals(c.n)
			x := upload(t, b, v, 1, c.n)
			got, err := b.Argmax(x, c.lo, c.hi)
			if err != nil {
				t.Fatal(err)
			}
			masked := append([]float32(nil), v...)
			for i := max(c.lo, 0); i <= c.hi && i < len(masked); i++ {
				masked[i] = -inf
			}
			if want := sample.Greedy(masked); got != want {
				t.Errorf("argmax %d, sample.Greedy %d (%s)", got, want, fmt.Sprint(c.lo, c.hi))
			}
		})
	}
}

// filled is n copies of v.
func filled(n int, v float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}
