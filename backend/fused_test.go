package backend_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/tensor"
)

// The Fused helpers on a backend without Fused (cpu) run their sequences:
// here against the ops called one by one, and with bad operand lists.
func TestFusedHelpersRunSequences(t *testing.T) {
	be, err := cpu.New()
	require.NoError(t, err)
	defer be.Close()
	_, isFused := any(be).(backend.Fused)
	require.False(t, isFused, "the cpu backend runs the sequences")
	vals := func(n int, seed float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i%13)/7 - seed
		}
		return v
	}
	f32 := func(v []float32, shape ...int) backend.Tensor {
		x, err := be.Alloc("test", tensor.F32, shape...)
		require.NoError(t, err)
		require.NoError(t, be.Upload(x, v))
		return x
	}
	get := func(x backend.Tensor) []float32 {
		v, err := be.Download(x)
		require.NoError(t, err)
		return v
	}
	const K, N = 8, 6
	x := f32(vals(2*K, 0.5), 2, K)
	wg, wu := f32(vals(N*K, 0.3), N, K), f32(vals(N*K, 0.9), N, K)

	// SwiGLU against MatMul, MatMul, SiLUMul.
	g1, u1, g2, u2 := f32(make([]float32, 2*N), 2, N), f32(make([]float32, 2*N), 2, N), f32(make([]float32, 2*N), 2, N), f32(make([]float32, 2*N), 2, N)
	require.NoError(t, be.MatMul(g1, x, wg, nil))
	require.NoError(t, be.MatMul(u1, x, wu, nil))
	require.NoError(t, be.SiLUMul(g1, g1, u1))
	require.NoError(t, backend.SwiGLU(be, g2, u2, x, wg, wu))
	require.Equal(t, get(g1), get(g2))

	// MatMuls: the second projection lands in the second destination.
	require.NoError(t, backend.MatMuls(be, []backend.Tensor{g2, u2}, x, []backend.Tensor{wg, wu}, nil))
	require.NoError(t, be.MatMul(u1, x, wu, nil))
	require.Equal(t, get(u1), get(u2))
	require.Error(t, backend.MatMuls(be, []backend.Tensor{g2, u2}, x, []backend.Tensor{wg}, nil))
	require.Error(t, backend.MatMuls(be, []backend.Tensor{g2}, x, []backend.Tensor{wg}, []backend.Tensor{nil, nil}))

	// AddRMSNorm: the sum stays in x, its norm goes to dst.
	w := f32(vals(K, -1), K)
	a1, d := f32(vals(2*K, 0.1), 2, K), f32(vals(2*K, 0.7), 2, K)
	a2 := f32(vals(2*K, 0.1), 2, K)
	y1, y2 := f32(make([]float32, 2*K), 2, K), f32(make([]float32, 2*K), 2, K)
	require.NoError(t, be.Add(a1, a1, d))
	require.NoError(t, be.RMSNorm(y1, a1, w, 1e-6))
	require.NoError(t, backend.AddRMSNorm(be, y2, a2, d, w, 1e-6))
	require.Equal(t, get(a1), get(a2))
	require.Equal(t, get(y1), get(y2))

	// SwiGLUDown: the MLP's output against SwiGLU then MatMul.
	wd := f32(vals(K*N, 0.4), K, N)
	o1, o2 := f32(make([]float32, 2*K), 2, K), f32(make([]float32, 2*K), 2, K)
	require.NoError(t, backend.SwiGLU(be, g1, u1, x, wg, wu))
	require.NoError(t, be.MatMul(o1, g1, wd, nil))
	require.NoError(t, backend.SwiGLUDown(be, o2, g2, u2, x, wg, wu, wd))
	require.Equal(t, get(o1), get(o2))

	// GELUMLP: the residual stream against MatMulGELU then MatMulResidual.
	b1, b2 := f32(vals(N, 0.2), N), f32(vals(K, 0.6), K)
	r1, r2 := f32(vals(2*K, 0.3), 2, K), f32(vals(2*K, 0.3), 2, K)
	require.NoError(t, backend.MatMulGELU(be, g1, x, wg, b1, false))
	require.NoError(t, backend.MatMulResidual(be, r1, o1, g1, wd, b2))
	require.NoError(t, backend.GELUMLP(be, r2, o2, g2, x, wg, b1, wd, b2, false))
	require.Equal(t, get(r1), get(r2))
	require.NotEqual(t, vals(2*K, 0.3), get(r2), "the MLP added nothing")

	// RMSNormMatMuls: the projections of the normed x.
	require.NoError(t, be.RMSNorm(y1, x, w, 1e-6))
	require.NoError(t, be.MatMul(g1, y1, wg, nil))
	require.NoError(t, be.MatMul(u1, y1, wu, b1))
	require.NoError(t, backend.RMSNormMatMuls(be, []backend.Tensor{g2, u2}, y2, x, w, 1e-6, []backend.Tensor{wg, wu}, []backend.Tensor{nil, b1}))
	require.Equal(t, get(g1), get(g2))
	require.Equal(t, get(u1), get(u2))

	// LayerNormMatMuls: the projections of the normed x.
	lb := f32(vals(K, 0.25), K)
	require.NoError(t, be.LayerNorm(y1, x, w, lb, 1e-6))
	require.NoError(t, be.MatMul(g1, y1, wg, nil))
	require.NoError(t, be.MatMul(u1, y1, wu, b1))
	require.NoError(t, backend.LayerNormMatMuls(be, []backend.Tensor{g2, u2}, y2, x, w, lb, 1e-6,
		[]backend.Tensor{wg, wu}, []backend.Tensor{nil, b1}))
	require.Equal(t, get(g1), get(g2))
	require.Equal(t, get(u1), get(u2))

	// LayerNormGELUMLP: the residual stream against LayerNorm then GELUMLP.
	wk := f32(vals(N*K, 0.7), N, K)
	l1, l2 := f32(vals(2*K, 0.4), 2, K), f32(vals(2*K, 0.4), 2, K)
	require.NoError(t, be.LayerNorm(y1, l1, w, lb, 1e-6))
	require.NoError(t, backend.GELUMLP(be, l1, y1, g1, y1, wk, b1, wd, b2, true))
	require.NoError(t, backend.LayerNormGELUMLP(be, l2, y2, g2, w, lb, 1e-6, wk, b1, wd, b2, true))
	require.Equal(t, get(l1), get(l2))
	require.NotEqual(t, vals(2*K, 0.4), get(l2), "the MLP added nothing")

	// RMSNormMLP: the residual stream against RMSNorm, SwiGLU, MatMul, Add.
	s1, s2 := f32(vals(2*K, 0.8), 2, K), f32(vals(2*K, 0.8), 2, K)
	require.NoError(t, be.RMSNorm(y1, s1, w, 1e-6))
	require.NoError(t, backend.SwiGLU(be, g1, u1, y1, wg, wu))
	require.NoError(t, be.MatMul(y1, g1, wd, nil))
	require.NoError(t, be.Add(s1, s1, y1))
	require.NoError(t, backend.RMSNormMLP(be, s2, y2, g2, u2, w, 1e-6, wg, wu, wd))
	require.Equal(t, get(s1), get(s2))
	require.NotEqual(t, vals(2*K, 0.8), get(s2), "the MLP added nothing")
}
