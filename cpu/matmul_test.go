package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/tensor"
)

// refMatMul is x·wᵀ + bias in float64, with the scale Σ|x·w| + |bias| of
// each output.
func refMatMul(x, w, bias []float64, m, n, k int) (out, scale []float64) {
	out = make([]float64, m*n)
	scale = make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s, a float64
			for l := range k {
				p := x[i*k+l] * w[j*k+l]
				s += p
				a += math.Abs(p)
			}
			if bias != nil {
				s += bias[j]
				a += math.Abs(bias[j])
			}
			out[i*n+j], scale[i*n+j] = s, a
		}
	}
	return out, scale
}

func TestMatMul(t *testing.T) {
	shapes := []struct{ m, n, k int }{
		{1, 37, 67},   // GEMV, tail rows and odd K
		{1, 64, 256},  // GEMV
		{2, 5, 0},     // K = 0: bias only
		{3, 37, 67},   // tiled
		{17, 70, 130}, // several tiles
		{130, 65, 33}, // several row blocks
		{5, 3, 1},
	}
	b := newBackend(t)
	rng := newRand(1)
	for _, dt := range dtypes {
		for _, s := range shapes {
			for _, withBias := range []bool{false, true} {
				t.Run(name(dt, "/", s.m, "x", s.n, "x", s.k, "/bias=", withBias), func(t *testing.T) {
					xv := randVals(rng, s.m*s.k, 1)
					x := activation(t, b, xv, s.m, s.k)
					w, wv := weight(t, b, dt, randVals(rng, s.n*s.k, 1), s.n, s.k)
					var bias backend.Tensor
					var bv []float64
					if withBias {
						bias, bv = weight(t, b, dt, randVals(rng, s.n, 1), s.n)
					}
					dst := alloc(t, b, s.m, s.n)
					require.NoError(t, b.MatMul(dst, x, w, bias))
					want, scale := refMatMul(to64(xv), wv, bv, s.m, s.n, s.k)
					requireClose(t, "matmul", want, scale, download(t, b, dst))
				})
			}
		}
	}
}

// TestMatMulViews multiplies rows of one tensor into rows of another, with
// leading dimensions folded into rows.
func TestMatMulViews(t *testing.T) {
	b := newBackend(t)
	rng := newRand(2)
	xv := randVals(rng, 6*2*8, 1)
	x := activation(t, b, xv, 6, 2, 8) // matrix view [12, 8]
	xr, err := b.Rows(x, 2, 3)         // rows 4..9 of the matrix view
	require.NoError(t, err)
	w, wv := weight(t, b, tensor.BF16, randVals(rng, 5*8, 1), 5, 8)
	big := alloc(t, b, 10, 5)
	dst, err := b.Rows(big, 4, 6)
	require.NoError(t, err)
	require.NoError(t, b.MatMul(dst, xr, w, nil))

	want, scale := refMatMul(to64(xv[4*8:10*8]), wv, nil, 6, 5, 8)
	got := download(t, b, big)
	requireClose(t, "matmul", want, scale, got[4*5:])
	require.Equal(t, make([]float32, 4*5), got[:4*5], "rows outside the view are untouched")
}

// TestMatMulDeterministic checks that results are bit-identical whatever
// the thread count, and that a row's result does not depend on how many
// rows are multiplied with it.
func TestMatMulDeterministic(t *testing.T) {
	const m, n, k = 40, 67, 301
	rng := newRand(3)
	xv := randVals(rng, m*k, 1)
	wv := randVals(rng, n*k, 1)
	biasv := randVals(rng, n, 1)
	for _, dt := range dtypes {
		run := func(threads, rows int) []float32 {
			b := newBackend(t, WithThreads(threads))
			x := activation(t, b, xv[:rows*k], rows, k)
			w, _ := weight(t, b, dt, wv, n, k)
			bias := activation(t, b, biasv, n)
			dst := alloc(t, b, rows, n)
			require.NoError(t, b.MatMul(dst, x, w, bias))
			return download(t, b, dst)
		}
		ref := run(1, m)
		for _, threads := range []int{2, 3, 8} {
			require.Equal(t, ref, run(threads, m), "%v, %d threads", dt, threads)
		}
		require.Equal(t, ref[:n], run(2, 1), "%v, one row", dt)
		require.Equal(t, ref[:3*n], run(5, 3), "%v, three rows", dt)
	}
}

func TestMatMulErrors(t *testing.T) {
	b := newBackend(t)
	x := alloc(t, b, 3, 4)
	w, _ := weight(t, b, tensor.BF16, make([]float32, 20), 5, 4)
	dst := alloc(t, b, 3, 5)
	xb, err := b.Alloc("activations", tensor.BF16, 3, 4)
	require.NoError(t, err)

	require.NoError(t, b.MatMul(dst, x, w, nil))
	require.ErrorContains(t, b.MatMul(alloc(t, b, 3, 4), x, w, nil), "does not fit dst")
	require.ErrorContains(t, b.MatMul(dst, alloc(t, b, 3, 5), w, nil), "does not fit dst")
	require.ErrorContains(t, b.MatMul(dst, xb, w, nil), "x BF16[3 4] must be F32")
	require.ErrorContains(t, b.MatMul(dst, x, w, alloc(t, b, 4)), "bias F32[4] for 5 outputs")
	ro, _ := weight(t, b, tensor.F32, make([]float32, 15), 3, 5)
	require.ErrorContains(t, b.MatMul(ro, x, w, nil), "read-only")
	sq := alloc(t, b, 4, 4)
	require.ErrorContains(t, b.MatMul(sq, sq, sq, nil), "overlaps")
	var none *Tensor
	require.NoError(t, b.MatMul(dst, x, w, none), "a nil *Tensor bias is no bias")
}
