package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
)

// TestGPUFlowFeed checks backend.FlowFeed against the host's reference:
// Fourier's features within one float32 ulp of backend.FourierFeatures for
// every value (the device's double sine and cosine against Go's; the
// count of values off by one is logged, and must stay under 1 in 10^4),
// NaN and ±Inf giving NaN as on the host, the time's row taken at the
// step counter (row 0 without one); EulerStep's update bit for bit
// x + float32(dt[k]·v), the counter advanced by one each call.
func TestGPUFlowFeed(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(11, 12))
	const T, C, H, steps = 64, 2, 10, 5
	freqs := make([]float32, C*H)
	for c := range C {
		for j := range H { // log-spaced 1..100, as the release's
			freqs[c*H+j] = float32(math.Pow(10, 2*float64(j)/(H-1)))
		}
	}
	tf := randVals(r, steps*2*H, 1)
	ft, tft := upload(t, b, freqs, C, H), upload(t, b, tf, steps, 2*H)
	step := i32(t, b, 3)
	var total, off int
	for _, scale := range []float64{0.01, 1, 3, 1000} {
		x := randVals(r, T*C, scale)
		x[0], x[1], x[2] = 0, float32(math.Copysign(0, -1)), float32(math.NaN())
		x[3], x[4] = float32(math.Inf(1)), float32(math.Inf(-1))
		for _, st := range []backend.Tensor{step, nil} {
			d := upload(t, b, make([]float32, T*(C+1)*2*H), T, (C+1)*2*H)
			require.NoError(t, b.Fourier(d, upload(t, b, x, T, C), ft, tft, st))
			got := download(t, b, d)
			row := 3
			if st == nil {
				row = 0
			}
			want := make([]float32, 2*H)
			for w := range T {
				for c := range C {
					backend.FourierFeatures(want, x[w*C+c], freqs[c*H:(c+1)*H])
					for j, wv := range want {
						g := got[w*(C+1)*2*H+c*2*H+j]
						total++
						if math.Float32bits(g) == math.Float32bits(wv) || math.IsNaN(float64(g)) && math.IsNaN(float64(wv)) {
							continue
						}
						ulps := int64(math.Float32bits(g)) - int64(math.Float32bits(wv))
						require.True(t, ulps == 1 || ulps == -1, "x %g, channel %d, feature %d: %g, want %g", x[w*C+c], c, j, g, wv)
						off++
					}
				}
				require.Equal(t, tf[row*2*H:(row+1)*2*H], got[w*(C+1)*2*H+C*2*H:(w+1)*(C+1)*2*H], "row %d's time features", w)
			}
		}
	}
	t.Logf("%d of %d features one ulp off Go's", off, total)
	require.Less(t, float64(off), 1e-4*float64(total)+1)

	x, v, dt := randVals(r, T*C, 1), randVals(r, T*C, 5), []float32{0.1, 0.1, 0.099999994, 0.1}
	xt, vt, dtt := upload(t, b, x, T, C), upload(t, b, v, T, C), upload(t, b, dt, 1, 4)
	k := i32(t, b, 1)
	for _, s := range []int{1, 2} {
		require.NoError(t, b.EulerStep(xt, vt, dtt, k))
		for i := range x {
			x[i] += float32(dt[s] * v[i])
		}
		require.Equal(t, x, download(t, b, xt), "step %d", s)
	}
	f, err := b.FetchI32(k)
	require.NoError(t, err)
	kv, err := f.Wait()
	require.NoError(t, err)
	require.Equal(t, []int32{3}, kv)
	require.ErrorContains(t, b.Fourier(upload(t, b, make([]float32, 4), 2, 2), upload(t, b, x, T, C), ft, tft, nil), "dst")
}
