package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"vlanode/backend"
	"vlanode/tensor"
)

// Each op on the GPU against a naive reference in float64 (or in the
// cpu backend's exact float32 steps where the kernel promises them).

func TestGPUMatMul(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(2, 2))
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		// M == 1 with K % 8 == 0 takes the GEMV kernel for F16 and BF16;
		// the rest cuBLAS, the action expert's 64-row shapes among them.
		for _, sh := range [][3]int{{1, 64, 128}, {37, 96, 160}, {128, 512, 1024}, {3, 5, 1}, {1, 1001, 520}, {4, 77, 2048}, {1, 40, 4104},
			{64, 1000, 2048}, {17, 130, 96}, {2, 129, 4096}, {64, 100, 8256}, {16, 7, 480}} {
			for _, withBias := range []bool{false, true} {
				M, N, K := sh[0], sh[1], sh[2]
				t.Run(fmt.Sprintf("%v/%dx%dx%d/bias=%v", dt, M, N, K, withBias), func(t *testing.T) {
					xv := randVals(r, M*K, 1)
					x := upload(t, b, xv, M, K)
					w, wv := weight(t, b, dt, randVals(r, N*K, 0.5), N, K)
					var bias backend.Tensor
					var bv []float32
					if withBias {
						bias, bv = weight(t, b, tensor.BF16, randVals(r, N, 1), N)
					}
					dst := alloc(t, b, M, N)
					if err := b.MatMul(dst, x, w, bias); err != nil {
						t.Fatal(err)
					}
					want, tol := refProduct(roundTo(dt, xv), wv, bv, M, N, K)
					closeTo(t, "matmul", download(t, b, dst), want, 0, 0, tol)
				})
			}
		}
	}
}

// refProduct is x·wᵀ (+ bias) in float64 for x [M, K] (already rounded as
// the GPU rounds it) and w [N, K], with each element's tolerance: 1e-6 +
// 1e-5·Σ|products| for float32 sums in another order.
func refProduct(x, w, bias []float32, M, N, K int) (want, tol []float64) {
	want, tol = make([]float64, M*N), make([]float64, M*N)
	for i := range M {
		for j := range N {
			var s, mag float64
			for l := range K {
				p := float64(x[i*K+l]) * float64(w[j*K+l])
				s, mag = s+p, mag+math.Abs(p)
			}
			if bias != nil {
				s += float64(bias[j])
			}
			want[i*N+j], tol[i*N+j] = s, 1e-6+1e-5*mag
		}
	}
	return want, tol
}

func refRMSNorm(x, w []float32, n int, eps float32) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		var ss float64
		for _, v := range x[r*n : (r+1)*n] {
			ss += float64(v) * float64(v)
		}
		s := 1 / math.Sqrt(ss/float64(n)+float64(eps))
		for i := 0; i < n; i++ {
			out[r*n+i] = float64(w[i]) * float64(x[r*n+i]) * s
		}
	}
	return out
}

func refLayerNorm(x, w, bias []float32, n int, eps float32) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		var sum, ss float64
		for _, v := range x[r*n : (r+1)*n] {
			sum += float64(v)
		}
		mean := sum / float64(n)
		for _, v := range x[r*n : (r+1)*n] {
			ss += (float64(v) - mean) * (float64(v) - mean)
		}
		s := 1 / math.Sqrt(ss/float64(n)+float64(eps))
		for i := 0; i < n; i++ {
			out[r*n+i] = (float64(x[r*n+i])-mean)*s*float64(w[i]) + float64(bias[i])
		}
	}
	return out
}

func TestGPUNorms(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(3, 3))
	const eps = 1e-6
	for _, c := range []struct {
		rows, n int
		wdt     tensor.DType
		offset  float32 // added to x: LayerNorm must keep precision over a large mean
	}{{5, 4096, tensor.F32, 0}, {96, 128, tensor.BF16, 0}, {7, 72, tensor.F16, 0}, {3, 1152, tensor.BF16, 100}, {2, 33, tensor.F32, 0},
		// LayerNorm's rows held in registers (warpRowMax < n <= 1536, n % 4
		// == 0): a last float4 column that not every lane holds (1100), full
		// columns up to the longest (1536), a block with one row (9 rows of
		// 8 a block); and n % 4 != 0, which takes the block per row.
		{4, 1100, tensor.F16, 0}, {3, 1536, tensor.F32, 0}, {9, 1280, tensor.BF16, 50}, {2, 1026, tensor.BF16, 0}} {
		t.Run(fmt.Sprintf("%dx%d/%v", c.rows, c.n, c.wdt), func(t *testing.T) {
			xv := randVals(r, c.rows*c.n, 2)
			for i := range xv {
				xv[i] += c.offset
			}
			w, wv := weight(t, b, c.wdt, randVals(r, c.n, 1), c.n)
			bias, bv := weight(t, b, c.wdt, randVals(r, c.n, 1), c.n)

			x := upload(t, b, xv, c.rows, c.n)
			dst := alloc(t, b, c.rows, c.n)
			if err := b.RMSNorm(dst, x, w, eps); err != nil {
				t.Fatal(err)
			}
			closeTo(t, "rmsnorm", download(t, b, dst), refRMSNorm(xv, wv, c.n, eps), 1e-6, 1e-5, nil)
			if err := b.RMSNorm(x, x, w, eps); err != nil { // in place
				t.Fatal(err)
			}
			closeTo(t, "rmsnorm in place", download(t, b, x), refRMSNorm(xv, wv, c.n, eps), 1e-6, 1e-5, nil)

			x = upload(t, b, xv, c.rows, c.n)
			if err := b.LayerNorm(dst, x, w, bias, eps); err != nil {
				t.Fatal(err)
			}
			closeTo(t, "layernorm", download(t, b, dst), refLayerNorm(xv, wv, bv, c.n, eps), 1e-5, 1e-5, nil)
			if err := b.LayerNorm(x, x, w, nil, eps); err != nil { // in place, no bias
				t.Fatal(err)
			}
			closeTo(t, "layernorm without bias", download(t, b, x), refLayerNorm(xv, wv, make([]float32, c.n), c.n, eps), 1e-5, 1e-5, nil)
		})
	}
	// Rows of 1152 not 16-byte aligned: LayerNorm takes the block per row.
	xv := randVals(r, 2*1152, 2)
	w, wv := weight(t, b, tensor.F32, randVals(r, 1152, 1), 1152)
	xm := uploadAt(t, b, xv, 1, 2, 1152)
	if err := b.LayerNorm(xm, xm, w, nil, eps); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "layernorm of misaligned rows", download(t, b, xm), refLayerNorm(xv, wv, make([]float32, 1152), 1152, eps), 1e-5, 1e-5, nil)

	// A weight and bias one element into their allocations (bf16: 2-byte
	// aligned) are read an element at a time, with the same bits as
	// aligned ones of the same values.
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
		vals := randVals(r, 1153, 1)
		wAll, _ := weight(t, b, dt, vals, 1153)
		bAll, _ := weight(t, b, dt, vals, 1153)
		wOff, err := b.Rows(wAll, 1, 1152)
		if err != nil {
			t.Fatal(err)
		}
		bOff, err := b.Rows(bAll, 1, 1152)
		if err != nil {
			t.Fatal(err)
		}
		wAl, _ := weight(t, b, dt, vals[1:], 1152)
		x := upload(t, b, xv, 2, 1152)
		d1, d2 := alloc(t, b, 2, 1152), alloc(t, b, 2, 1152)
		noErrs(t, b.LayerNorm(d1, x, wOff, bOff, eps), b.LayerNorm(d2, x, wAl, wAl, eps))
		sameBits(t, fmt.Sprintf("layernorm, %v weight and bias off their alignment", dt), download(t, b, d1), download(t, b, d2))
	}

	x := alloc(t, b, 2, 10)
	w, _ = weight(t, b, tensor.F32, make([]float32, 3), 3)
	if err := b.RMSNorm(x, x, w, eps); err == nil {
		t.Error("rows of 10 normalized by a weight of 3")
	}
}

// uploadAt is upload into a view that begins off floats into its
// allocation: not 16-byte aligned when off % 4 != 0.
func uploadAt(t *testing.T, b *Backend, vals []float32, off int, shape ...int) backend.Tensor {
	t.Helper()
	all := upload(t, b, append(make([]float32, off), vals...), off+len(vals))
	v, err := b.Rows(all, off, len(vals))
	if err != nil {
		t.Fatal(err)
	}
	if v, err = b.Reshape(v, shape...); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestGPURope(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(4, 4))
	// hd/2 a multiple of 4 with aligned tensors takes the float4 path (the
	// vision encoder's 72 among them); hd/2 = 10, or x 4 bytes off, the
	// scalar one.
	for _, c := range []struct{ T, heads, hd, off int }{{7, 4, 128, 0}, {1, 32, 128, 0}, {50, 16, 72, 0}, {9, 3, 20, 0}, {6, 2, 16, 1}} {
		half := c.hd / 2
		xv := randVals(r, c.T*c.heads*c.hd, 1)
		cv, sv := make([]float32, c.T*half), make([]float32, c.T*half)
		for i := range cv {
			a := r.Float64() * 2 * math.Pi
			cv[i], sv[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		x := uploadAt(t, b, xv, c.off, c.T, c.heads*c.hd)
		if err := b.Rope(x, upload(t, b, cv, c.T, half), upload(t, b, sv, c.T, half), c.hd); err != nil {
			t.Fatal(err)
		}
		want := append([]float32(nil), xv...)
		for tt := 0; tt < c.T; tt++ {
			for h := 0; h < c.heads; h++ {
				row := want[(tt*c.heads+h)*c.hd:]
				for i := 0; i < half; i++ {
					u, v := row[i], row[i+half]
					co, si := cv[tt*half+i], sv[tt*half+i]
					row[i] = float32(u*co) - float32(v*si)
					row[i+half] = float32(v*co) + float32(u*si)
				}
			}
		}
		exactly(t, fmt.Sprintf("rope %d×%d×%d", c.T, c.heads, c.hd), download(t, b, x), want)
	}
}

// TestGPUElementwise checks the elementwise ops one element at a time (n
// odd) and four at a time (n a multiple of 4, aligned tensors).
func TestGPUElementwise(t *testing.T) {
	for _, n := range []int{100003, 100000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testElementwise(t, n) })
	}
}

func testElementwise(t *testing.T, n int) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(6, uint64(n)))
	av, bv := randVals(r, n, 3), randVals(r, n, 3)
	av[0], av[1], av[2] = -30, 30, 0 // saturated silu and gelu

	checkRel := func(name string, got []float32, rtol float64, f func(i int) float64) {
		t.Helper()
		want := make([]float64, n)
		for i := range want {
			want[i] = f(i)
		}
		closeTo(t, name, got, want, 1e-7, rtol, nil)
	}
	check := func(name string, got []float32, f func(i int) float64) {
		t.Helper()
		checkRel(name, got, 5e-7, f)
	}
	s := upload(t, b, av, n)
	if err := b.SiLU(s, s); err != nil { // in place
		t.Fatal(err)
	}
	check("silu", download(t, b, s), func(i int) float64 {
		x := float64(av[i])
		return x / (1 + math.Exp(-x))
	})

	a, c := upload(t, b, av, n), upload(t, b, bv, n)
	if err := b.SiLUMul(a, a, c); err != nil { // dst = gate
		t.Fatal(err)
	}
	check("silumul", download(t, b, a), func(i int) float64 {
		x := float64(av[i])
		return float64(float32(x/(1+math.Exp(-x)))) * float64(bv[i])
	})

	for _, tanh := range []bool{false, true} {
		x := upload(t, b, av, n)
		if err := b.GELU(x, x, tanh); err != nil {
			t.Fatal(err)
		}
		// GELU is evaluated in float (erfcf, tanhf), as PyTorch does for
		// bf16 tensors, and the cpu backend in double.
		checkRel(fmt.Sprintf("gelu tanh=%v", tanh), download(t, b, x), 2e-6, func(i int) float64 {
			v := float64(av[i])
			if tanh {
				return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
			}
			return 0.5 * v * math.Erfc(-v/math.Sqrt2)
		})
	}

	a, c = upload(t, b, av, n), upload(t, b, bv, n)
	if err := b.Add(c, a, c); err != nil { // dst = b
		t.Fatal(err)
	}
	want := make([]float32, n)
	for i := range want {
		want[i] = av[i] + bv[i]
	}
	exactly(t, "add", download(t, b, c), want)
	if err := b.Add(alloc(t, b, n-1), a, c); err == nil {
		t.Error("add of different sizes accepted")
	}
}

func TestGPUCopyIntoCache(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 7))
	cache := alloc(t, b, 10, 256)
	src := randVals(r, 3*256, 1)
	rows, err := b.Rows(cache, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Copy(rows, upload(t, b, src, 3, 256)); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, 10*256)
	copy(want[4*256:], src)
	exactly(t, "kv cache after copy", download(t, b, cache), want)
	all, _ := b.Rows(cache, 0, 10)
	part, _ := b.Rows(cache, 2, 3)
	other, _ := b.Rows(cache, 3, 3)
	if err := b.Copy(part, other); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("overlapping copy: %v", err)
	}
	if err := b.Copy(all, cache); err != nil {
		t.Errorf("copy onto itself: %v", err)
	}
}

func TestGPUEmbedding(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(8, 8))
	const V, H = 1000, 96
	ids := []int32{0, 999, 5, 5, 123, 42, 7}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		table, held := weight(t, b, dt, randVals(r, V*H, 1), V, H)
		dst := alloc(t, b, len(ids), H)
		if err := b.Embedding(dst, table, ids); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, 0, len(ids)*H)
		for _, id := range ids {
			want = append(want, held[int(id)*H:int(id+1)*H]...)
		}
		exactly(t, fmt.Sprintf("embedding %v", dt), download(t, b, dst), want)
		// Decode: one id at a time, through the same staging buffer.
		one := alloc(t, b, 1, H)
		for _, id := range []int32{3, 4} {
			if err := b.Embedding(one, table, []int32{id}); err != nil {
				t.Fatal(err)
			}
			exactly(t, "one id", download(t, b, one), held[int(id)*H:int(id+1)*H])
		}
		if err := b.Embedding(dst, table, []int32{0, 1, 2, 3, 4, 5, V}); err == nil || !strings.Contains(err.Error(), "outside") {
			t.Errorf("id %d of %d: %v", V, V, err)
		}
	}
}

// TestGPUSkipOps checks the SetSkipOps diagnostic: a launch whose name
// holds a skipped name does nothing, others run, and nil restores it.
func TestGPUSkipOps(t *testing.T) {
	b := gpuBackend(t)
	x := upload(t, b, []float32{1, 2, 3}, 1, 3)
	d := alloc(t, b, 1, 3)
	if err := b.SetSkipOps([]string{"", "add"}); err != nil {
		t.Fatal(err)
	}
	defer b.SetSkipOps(nil)
	if err := b.Add(d, x, x); err != nil {
		t.Fatal(err)
	}
	exactly(t, "add left out", download(t, b, d), []float32{0, 0, 0})
	if err := b.SiLU(d, x); err != nil {
		t.Fatal(err)
	}
	for i, v := range download(t, b, d) {
		if want := float64(i+1) / (1 + math.Exp(-float64(i+1))); math.Abs(float64(v)-want) > 1e-5 {
			t.Errorf("silu, not left out: element %d is %g, want %g", i, v, want)
		}
	}
	if err := b.SetSkipOps(nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(d, x, x); err != nil {
		t.Fatal(err)
	}
	exactly(t, "add restored", download(t, b, d), []float32{2, 4, 6})
}
