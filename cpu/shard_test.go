package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/cpu/kern"
	"vlanode/tensor"
)

// TestMLPShare checks a share of a SwiGLU MLP against a float64 reference
// of the same maths, and that the shares [0, c) and [c, n) add up to the
// whole MLP within float32 rounding.
func TestMLPShare(t *testing.T) {
	b, err := New(WithThreads(3))
	require.NoError(t, err)
	defer b.Close()
	testMLPShare(t, b, 1e-4)
}

// TestMLPShareKernels is TestMLPShare on the kernel pool (the CPU
// engine's backend), whatever path this CPU takes: its x and its SwiGLU
// are rounded to bf16 as the GPU's products round them, so it is checked
// within bf16's rounding (2⁻⁸ of the sum of the magnitudes).
func TestMLPShareKernels(t *testing.T) {
	pool, err := kern.NewPool(kern.Options{Threads: 2})
	require.NoError(t, err)
	defer pool.Close()
	b, err := New(WithThreads(2), WithKernels(pool))
	require.NoError(t, err)
	defer b.Close()
	t.Logf("kernel path for 3 rows: %v", pool.PathFor(3))
	testMLPShare(t, b, 2e-2)
}

func testMLPShare(t *testing.T, b *Backend, tol float64) {
	r := rand.New(rand.NewPCG(7, 8))
	const m, k, n, h = 3, 40, 96, 24
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	bf := func(rows, cols int) ([]uint16, []float64) {
		u := make([]uint16, rows*cols)
		f := make([]float64, rows*cols)
		for i := range u {
			u[i] = uint16(math.Float32bits(float32(r.NormFloat64()*0.2)) >> 16)
			f[i] = float64(math.Float32frombits(uint32(u[i]) << 16))
		}
		return u, f
	}
	gu, gf := bf(n, k)
	uu, uf := bf(n, k)
	du, df := bf(h, n)
	weight := func(u []uint16, shape ...int) *Tensor {
		buf := make([]byte, 2*len(u))
		for i, v := range u {
			buf[2*i], buf[2*i+1] = byte(v), byte(v>>8)
		}
		w, err := b.Weight("w", tensor.BF16, shape, buf)
		require.NoError(t, err)
		return w.(*Tensor)
	}
	gate, up, down := weight(gu, n, k), weight(uu, n, k), weight(du, h, n)
	xt, err := b.Alloc("x", tensor.F32, m, k)
	require.NoError(t, err)
	require.NoError(t, b.Upload(xt, x))
	ref := func(lo, hi int) []float64 {
		out := make([]float64, m*h)
		for i := range m {
			act := make([]float64, n)
			for j := lo; j < hi; j++ {
				var g, u float64
				for q := range k {
					xv := float64(x[i*k+q])
					g += xv * gf[j*k+q]
					u += xv * uf[j*k+q]
				}
				act[j] = g / (1 + math.Exp(-g)) * u
			}
			for o := range h {
				for j := lo; j < hi; j++ {
					out[i*h+o] += act[j] * df[o*n+j]
				}
			}
		}
		return out
	}
	share := func(lo, hi int) []float32 {
		d, err := b.Alloc("d", tensor.F32, m, h)
		require.NoError(t, err)
		require.NoError(t, b.MLPShare(d, xt, gate, up, down, lo, hi))
		v, err := b.Download(d)
		require.NoError(t, err)
		return v
	}
	for _, c := range [][2]int{{0, n}, {0, 33}, {33, n}, {50, 51}} {
		got, want := share(c[0], c[1]), ref(c[0], c[1])
		for i := range got {
			assert.InDelta(t, want[i], float64(got[i]), tol+tol*math.Abs(want[i]), "share %v, element %d", c, i)
		}
	}
	whole, a, z := share(0, n), share(0, 33), share(33, n)
	for i := range whole {
		assert.InDelta(t, whole[i], a[i]+z[i], tol/10+tol/10*math.Abs(float64(whole[i])), "element %d", i)
	}
	d, err := b.Alloc("d", tensor.F32, m, h)
	require.NoError(t, err)
	assert.ErrorContains(t, b.MLPShare(d, xt, gate, up, down, 40, 40), "columns [40, 40)")
	assert.ErrorContains(t, b.MLPShare(d, xt, gate, up, down, 0, n+1), "columns [0, 97)")
}

// TestMatMulShare checks rows [lo, hi) of a bf16 product against the
// same columns of the whole MatMul: bit for bit on the Go path, within
// bf16 rounding of x on the kernel pool (which rounds x to bf16 as the
// GPU's products do).
func TestMatMulShare(t *testing.T) {
	pool, err := kern.NewPool(kern.Options{Threads: 2})
	require.NoError(t, err)
	defer pool.Close()
	withKern, err := New(WithThreads(2), WithKernels(pool))
	require.NoError(t, err)
	defer withKern.Close()
	plain, err := New(WithThreads(2))
	require.NoError(t, err)
	defer plain.Close()
	r := rand.New(rand.NewPCG(3, 4))
	const m, k, n = 2, 64, 200
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	buf := make([]byte, 2*n*k)
	for i := 0; i < n*k; i++ {
		v := uint16(math.Float32bits(float32(r.NormFloat64()*0.2)) >> 16)
		buf[2*i], buf[2*i+1] = byte(v), byte(v>>8)
	}
	for _, tc := range []struct {
		name string
		b    *Backend
		tol  float64
	}{{"go", plain, 0}, {"kernels", withKern, 2e-2}} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			w, err := b.Weight("w", tensor.BF16, []int{n, k}, buf)
			require.NoError(t, err)
			xt, err := b.Alloc("x", tensor.F32, m, k)
			require.NoError(t, err)
			require.NoError(t, b.Upload(xt, x))
			whole, err := plain.Alloc("y", tensor.F32, m, n)
			require.NoError(t, err)
			pw, err := plain.Weight("w", tensor.BF16, []int{n, k}, buf)
			require.NoError(t, err)
			px, err := plain.Alloc("x", tensor.F32, m, k)
			require.NoError(t, err)
			require.NoError(t, plain.Upload(px, x))
			require.NoError(t, plain.MatMul(whole, px, pw, nil))
			want, err := plain.Download(whole)
			require.NoError(t, err)
			for _, c := range [][2]int{{0, n}, {0, 128}, {128, n}, {7, 8}} {
				d, err := b.Alloc("d", tensor.F32, m, c[1]-c[0])
				require.NoError(t, err)
				require.NoError(t, b.MatMulShare(d, xt, w, c[0], c[1]))
				got, err := b.Download(d)
				require.NoError(t, err)
				for i := range m {
					for j := c[0]; j < c[1]; j++ {
						ref := float64(want[i*n+j])
						assert.InDelta(t, ref, float64(got[i*(c[1]-c[0])+j-c[0]]), tc.tol*(1+math.Abs(ref)), "rows %v, [%d, %d]", c, i, j)
					}
				}
			}
			d, err := b.Alloc("d", tensor.F32, m, 1)
			require.NoError(t, err)
			assert.ErrorContains(t, b.MatMulShare(d, xt, w, 5, 5), "rows [5, 5)")
			assert.ErrorContains(t, b.MatMulShare(d, xt, w, 0, n+1), "rows [0, 201)")
		})
	}
}

// TestSharesPastMaxRows runs MLPShare and MatMulShare on the kernel pool
// over more rows than one kernel call takes (kern.MaxRows, a long
// prompt's prefill): every row agrees with the Go path within bf16
// rounding of x.
func TestSharesPastMaxRows(t *testing.T) {
	pool, err := kern.NewPool(kern.Options{Threads: 2})
	require.NoError(t, err)
	defer pool.Close()
	fast, err := New(WithThreads(2), WithKernels(pool))
	require.NoError(t, err)
	defer fast.Close()
	slow, err := New(WithThreads(2))
	require.NoError(t, err)
	defer slow.Close()
	r := rand.New(rand.NewPCG(5, 6))
	const m, k, n, h = kern.MaxRows + 3, 32, 64, 16
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	bf16 := func(rows, cols int) []byte {
		buf := make([]byte, 2*rows*cols)
		for i := 0; i < rows*cols; i++ {
			v := uint16(math.Float32bits(float32(r.NormFloat64()*0.2)) >> 16)
			buf[2*i], buf[2*i+1] = byte(v), byte(v>>8)
		}
		return buf
	}
	gate, up, down := bf16(n, k), bf16(n, k), bf16(h, n)
	run := func(b *Backend) (mlp, mm []float32) {
		w := func(buf []byte, shape ...int) *Tensor {
			t2, err := b.Weight("w", tensor.BF16, shape, buf)
			require.NoError(t, err)
			return t2.(*Tensor)
		}
		xt, err := b.Alloc("x", tensor.F32, m, k)
		require.NoError(t, err)
		require.NoError(t, b.Upload(xt, x))
		d, err := b.Alloc("d", tensor.F32, m, h)
		require.NoError(t, err)
		require.NoError(t, b.MLPShare(d, xt, w(gate, n, k), w(up, n, k), w(down, h, n), 8, 40))
		mlp, err = b.Download(d)
		require.NoError(t, err)
		e, err := b.Alloc("e", tensor.F32, m, 24)
		require.NoError(t, err)
		require.NoError(t, b.MatMulShare(e, xt, w(gate, n, k), 16, 40))
		mm, err = b.Download(e)
		require.NoError(t, err)
		return mlp, mm
	}
	gotMLP, gotMM := run(fast)
	wantMLP, wantMM := run(slow)
	for i := range wantMLP {
		require.InDelta(t, wantMLP[i], gotMLP[i], 3e-2*(1+math.Abs(float64(wantMLP[i]))), "mlp element %d (row %d)", i, i/h)
	}
	for i := range wantMM {
		require.InDelta(t, wantMM[i], gotMM[i], 3e-2*(1+math.Abs(float64(wantMM[i]))), "matmul element %d (row %d)", i, i/24)
	}
}
