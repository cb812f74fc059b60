package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/tensor"
)

// tol is the relative tolerance of every comparison with a float64
// reference: |got - want| <= tol · scale, where scale bounds the magnitude
// of the terms that made the value (Σ|xᵢ·wᵢ| for a dot product, |want| for
// an elementwise op).
const tol = 1e-5

func newBackend(t testing.TB, opts ...Option) *Backend {
	t.Helper()
	b, err := New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// randVals returns n values uniform in [-scale, scale).
func randVals(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((rng.Float64()*2 - 1) * scale)
	}
	return v
}

// activation allocates an F32 tensor holding vals.
func activation(t testing.TB, b *Backend, vals []float32, shape ...int) backend.Tensor {
	t.Helper()
	x, err := b.Alloc("activations", tensor.F32, shape...)
	require.NoError(t, err)
	require.NoError(t, b.Upload(x, vals))
	return x
}

// weight makes a weight of type dt from vals rounded to dt, and returns the
// values it holds exactly.
func weight(t testing.TB, b *Backend, dt tensor.DType, vals []float32, shape ...int) (backend.Tensor, []float64) {
	t.Helper()
	data, err := tensor.FromF32(dt, vals)
	require.NoError(t, err)
	exact := make([]float32, len(vals))
	require.NoError(t, tensor.ToF32(exact, dt, data))
	w, err := b.Weight("weights", dt, shape, data)
	require.NoError(t, err)
	return w, to64(exact)
}

func alloc(t testing.TB, b *Backend, shape ...int) backend.Tensor {
	t.Helper()
	x, err := b.Alloc("activations", tensor.F32, shape...)
	require.NoError(t, err)
	return x
}

func download(t testing.TB, b *Backend, x backend.Tensor) []float32 {
	t.Helper()
	v, err := b.Download(x)
	require.NoError(t, err)
	return v
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func abs64(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	return out
}

// requireClose checks got against want within tol·scale.
func requireClose(t testing.TB, what string, want, scale []float64, got []float32) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		diff := math.Abs(float64(got[i]) - want[i])
		if !(diff <= tol*scale[i]+1e-30) {
			require.Failf(t, "mismatch", "%s[%d]: got %v, want %v (diff %.3g, allowed %.3g)",
				what, i, got[i], want[i], diff, tol*scale[i])
		}
	}
}

// fakeTensor is a tensor of some other backend.
type fakeTensor struct{}

func (fakeTensor) DType() tensor.DType { return tensor.F32 }
func (fakeTensor) Shape() []int        { return []int{1} }

// dtypes are the weight types every op that reads weights accepts.
var dtypes = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16}

func name(parts ...any) string { return fmt.Sprint(parts...) }
