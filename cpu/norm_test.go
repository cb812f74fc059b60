package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

func refRMSNorm(x, w []float64, eps float64) []float64 {
	n := len(w)
	out := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		var ss float64
		for _, v := range x[r*n : (r+1)*n] {
			ss += v * v
		}
		s := 1 / math.Sqrt(ss/float64(n)+eps)
		for i := range n {
			out[r*n+i] = x[r*n+i] * s * w[i]
		}
	}
	return out
}

func refLayerNorm(x, w, bias []float64, eps float64) (out, scale []float64) {
	n := len(w)
	out = make([]float64, len(x))
	scale = make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		row := x[r*n : (r+1)*n]
		var mean, ss float64
		for _, v := range row {
			mean += v
		}
		mean /= float64(n)
		for _, v := range row {
			ss += (v - mean) * (v - mean)
		}
		s := 1 / math.Sqrt(ss/float64(n)+eps)
		for i, v := range row {
			out[r*n+i] = (v-mean)*s*w[i] + bias[i]
			scale[r*n+i] = math.Abs((v-mean)*s*w[i]) + math.Abs(bias[i])
		}
	}
	return out, scale
}

func TestRMSNorm(t *testing.T) {
	b := newBackend(t)
	rng := newRand(4)
	const eps = 1e-6
	for _, dt := range dtypes {
		for _, shape := range [][]int{{3, 64}, {4 * 2, 16}, {2, 3 * 16}, {1, 1000}} {
			n := shape[len(shape)-1]
			if len(shape) == 2 && shape[1] == 3*16 {
				n = 16 // per-head norm over rows of [T, heads*headDim]
			}
			t.Run(name(dt, shape, "/n=", n), func(t *testing.T) {
				xv := randVals(rng, tensor.NumElements(shape), 3)
				x := activation(t, b, xv, shape...)
				w, wv := weight(t, b, dt, randVals(rng, n, 2), n)
				dst := alloc(t, b, shape...)
				require.NoError(t, b.RMSNorm(dst, x, w, eps))
				want := refRMSNorm(to64(xv), wv, eps)
				requireClose(t, "rmsnorm", want, abs64(want), download(t, b, dst))

				require.NoError(t, b.RMSNorm(x, x, w, eps), "in place")
				requireClose(t, "rmsnorm in place", want, abs64(want), download(t, b, x))
			})
		}
	}
}

func TestLayerNorm(t *testing.T) {
	b := newBackend(t)
	rng := newRand(5)
	const eps = 1e-5
	for _, dt := range dtypes {
		t.Run(dt.String(), func(t *testing.T) {
			const rows, n = 5, 96
			xv := randVals(rng, rows*n, 4)
			for i := range xv {
				xv[i] += 10 // a large mean
			}
			x := activation(t, b, xv, rows, n)
			w, wv := weight(t, b, dt, randVals(rng, n, 2), n)
			bias, bv := weight(t, b, dt, randVals(rng, n, 1), n)
			dst := alloc(t, b, rows, n)
			require.NoError(t, b.LayerNorm(dst, x, w, bias, eps))
			want, scale := refLayerNorm(to64(xv), wv, bv, eps)
			requireClose(t, "layernorm", want, scale, download(t, b, dst))

			require.NoError(t, b.LayerNorm(dst, x, w, nil, eps), "no bias")
			want, scale = refLayerNorm(to64(xv), wv, make([]float64, n), eps)
			requireClose(t, "layernorm without bias", want, scale, download(t, b, dst))
		})
	}
}

func TestNormErrors(t *testing.T) {
	b := newBackend(t)
	x := alloc(t, b, 2, 6)
	w := alloc(t, b, 5)
	require.ErrorContains(t, b.RMSNorm(x, x, w, 1e-6), "not made of rows of len(w) = 5")
	w3 := alloc(t, b, 3)
	require.NoError(t, b.RMSNorm(x, x, w3, 1e-6))
	require.ErrorContains(t, b.RMSNorm(alloc(t, b, 2, 3), x, w3, 1e-6), "differ in size")
	require.ErrorContains(t, b.LayerNorm(x, x, w3, alloc(t, b, 6), 1e-6), "bias F32[6] for rows of 3")
	require.ErrorContains(t, b.RMSNorm(x, x, alloc(t, b, 0), 1e-6), "len(w) = 0")
	view, err := b.Rows(x, 1, 1)
	require.NoError(t, err)
	whole, err := b.Reshape(x, 12)
	require.NoError(t, err)
	require.NoError(t, b.RMSNorm(whole, x, w3, 1e-6), "same memory, other shape")
	part, err := b.Reshape(view, 6)
	require.NoError(t, err)
	first, err := b.Rows(whole, 3, 6)
	require.NoError(t, err)
	require.ErrorContains(t, b.RMSNorm(first, part, w3, 1e-6), "partly overlaps")
}
