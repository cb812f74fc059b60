package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

func TestSiLU(t *testing.T) {
	b := newBackend(t)
	xv := randVals(newRand(5), 999, 12)
	x := activation(t, b, xv, 9, 111)
	want := make([]float64, len(xv))
	for i, v := range xv {
		want[i] = float64(v) / (1 + math.Exp(-float64(v)))
	}
	dst := alloc(t, b, 9, 111)
	require.NoError(t, b.SiLU(dst, x))
	requireClose(t, "silu", want, abs64(want), download(t, b, dst))
}

func TestSiLUMul(t *testing.T) {
	b := newBackend(t)
	rng := newRand(6)
	const n = 70000 // several tasks
	gv, uv := randVals(rng, n, 12), randVals(rng, n, 2)
	g, u := activation(t, b, gv, 7, n/7), activation(t, b, uv, 7, n/7)
	want := make([]float64, n)
	for i := range want {
		x := float64(gv[i])
		want[i] = x / (1 + math.Exp(-x)) * float64(uv[i])
	}
	dst := alloc(t, b, 7, n/7)
	require.NoError(t, b.SiLUMul(dst, g, u))
	requireClose(t, "silumul", want, abs64(want), download(t, b, dst))
	require.NoError(t, b.SiLUMul(g, g, u), "in place")
	requireClose(t, "silumul in place", want, abs64(want), download(t, b, g))
}

func TestGELU(t *testing.T) {
	b := newBackend(t)
	rng := newRand(7)
	xv := randVals(rng, 1000, 6)
	xv = append(xv, 0, -0.5, 0.5, -10, 10)
	x := activation(t, b, xv, len(xv))
	for _, tanh := range []bool{false, true} {
		want := make([]float64, len(xv))
		for i, v := range xv {
			x := float64(v)
			if tanh {
				want[i] = 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
			} else {
				want[i] = x * 0.5 * (1 + math.Erf(x/math.Sqrt2))
			}
		}
		scale := abs64(want)
		for i := range scale {
			scale[i] = max(scale[i], 1e-12) // 1 + erf(x) cancels for x << 0
		}
		dst := alloc(t, b, len(xv))
		require.NoError(t, b.GELU(dst, x, tanh))
		requireClose(t, name("gelu tanh=", tanh), want, scale, download(t, b, dst))
	}
}

func TestAdd(t *testing.T) {
	b := newBackend(t)
	rng := newRand(8)
	av, bv := randVals(rng, 100, 1), randVals(rng, 100, 1)
	x, y := activation(t, b, av, 10, 10), activation(t, b, bv, 10, 10)
	want := make([]float64, 100)
	for i := range want {
		want[i] = float64(av[i]) + float64(bv[i])
	}
	require.NoError(t, b.Add(x, x, y), "dst may be a")
	requireClose(t, "add", want, abs64(want), download(t, b, x))
	flat, err := b.Reshape(y, 100)
	require.NoError(t, err)
	require.NoError(t, b.Add(flat, x, y), "dst may be b, under another shape")
	for i := range want {
		want[i] += float64(bv[i])
	}
	requireClose(t, "add", want, abs64(want), download(t, b, y))
}

func TestElementwiseErrors(t *testing.T) {
	b := newBackend(t)
	x := alloc(t, b, 4, 4)
	require.ErrorContains(t, b.Add(x, x, alloc(t, b, 4, 3)), "b F32[4 3] does not fit dst F32[4 4]")
	require.ErrorContains(t, b.SiLUMul(alloc(t, b, 3), alloc(t, b, 4), alloc(t, b, 4)), "does not fit")
	r, err := b.Rows(x, 1, 2)
	require.NoError(t, err)
	r2, err := b.Rows(x, 0, 2)
	require.NoError(t, err)
	require.ErrorContains(t, b.GELU(r, r2, false), "partly overlaps x")
	h, err := b.Alloc("activations", tensor.BF16, 4, 4)
	require.NoError(t, err)
	require.ErrorContains(t, b.Add(x, x, h), "must be F32")
}

func TestCopy(t *testing.T) {
	b := newBackend(t)
	cache := alloc(t, b, 6, 4)
	src := activation(t, b, []float32{1, 2, 3, 4, 5, 6, 7, 8}, 8)
	rows, err := b.Rows(cache, 2, 2)
	require.NoError(t, err)
	require.NoError(t, b.Copy(rows, src), "same element count, other shape")
	got := download(t, b, cache)
	assert.Equal(t, []float32{1, 2, 3, 4, 5, 6, 7, 8}, got[8:16])
	assert.Equal(t, make([]float32, 8), got[:8])

	h, err := b.Alloc("kv-cache", tensor.BF16, 2, 4)
	require.NoError(t, err)
	require.ErrorContains(t, b.Copy(h, src), "does not fit")
	require.ErrorContains(t, b.Copy(rows, alloc(t, b, 7)), "does not fit")
	w, _ := weight(t, b, tensor.BF16, make([]float32, 8), 2, 4)
	require.NoError(t, b.Copy(h, w), "BF16 to BF16")
}

func refRope(x, cos, sin []float64, rows, cols, hd int) []float64 {
	half := hd / 2
	out := append([]float64(nil), x...)
	for t := range rows {
		for h := 0; h < cols; h += hd {
			for i := range half {
				x1, x2 := x[t*cols+h+i], x[t*cols+h+i+half]
				c, s := cos[t*half+i], sin[t*half+i]
				out[t*cols+h+i] = x1*c - x2*s
				out[t*cols+h+i+half] = x2*c + x1*s
			}
		}
	}
	return out
}

func TestRope(t *testing.T) {
	b := newBackend(t)
	rng := newRand(9)
	const rows, heads, hd = 5, 3, 8
	xv := randVals(rng, rows*heads*hd, 2)
	cv := make([]float32, rows*hd/2)
	sv := make([]float32, rows*hd/2)
	for i := range cv {
		a := rng.Float64() * 10
		cv[i], sv[i] = float32(math.Cos(a)), float32(math.Sin(a))
	}
	x := activation(t, b, xv, rows, heads*hd)
	cos, sin := activation(t, b, cv, rows, hd/2), activation(t, b, sv, rows, hd/2)
	require.NoError(t, b.Rope(x, cos, sin, hd))
	want := refRope(to64(xv), to64(cv), to64(sv), rows, heads*hd, hd)
	scale := make([]float64, len(want))
	for i := range scale {
		scale[i] = 2 * 2 // |x1·c| + |x2·s| <= 2·max|x|
	}
	requireClose(t, "rope", want, scale, download(t, b, x))

	require.ErrorContains(t, b.Rope(x, cos, sin, 7), "even halves")
	require.ErrorContains(t, b.Rope(x, cos, sin, 16), "even halves")
	require.ErrorContains(t, b.Rope(x, sin, alloc(t, b, rows, hd), hd), "must be [5, 4]")
	require.ErrorContains(t, b.Rope(x, x, sin, hd), "must be [5, 4]")
}

func TestEmbedding(t *testing.T) {
	b := newBackend(t)
	rng := newRand(10)
	const vocab, h = 11, 6
	ids := []int32{3, 0, 10, 3}
	for _, dt := range dtypes {
		table, tv := weight(t, b, dt, randVals(rng, vocab*h, 1), vocab, h)
		dst := alloc(t, b, len(ids), h)
		require.NoError(t, b.Embedding(dst, table, ids))
		want := make([]float64, 0, len(ids)*h)
		for _, id := range ids {
			want = append(want, tv[int(id)*h:int(id+1)*h]...)
		}
		got := download(t, b, dst)
		for i := range want {
			require.Equal(t, want[i], float64(got[i]), "%v [%d]: exact", dt, i)
		}

		err := b.Embedding(dst, table, []int32{1, 11, 2, 0})
		require.ErrorContains(t, err, "id 11 (position 1) is outside the vocabulary of 11")
		err = b.Embedding(dst, table, []int32{1, 2, 3, -1})
		require.ErrorContains(t, err, "id -1 (position 3)")
		require.ErrorContains(t, b.Embedding(dst, table, ids[:3]), "does not hold 3 rows")
	}
}
