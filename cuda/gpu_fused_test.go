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

// The fused ops against the sequences they replace, on the GPU: the same
// bits (the ops themselves are checked against references in
// gpu_ops_test.go). Shapes cover the fused kernels (the 10B model's
// decode step and the expert's 64 tokens) and the fallbacks.

// sameBits fails unless got and want are equal bit for bit.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %g, the sequence gives %g", what, i, got[i], want[i])
		}
	}
}

// bothEpilogues runs fn with cuBLASLt's epilogues off, then on (the
// default, which it leaves set).
func bothEpilogues(t *testing.T, b *Backend, fn func(epi bool)) {
	t.Helper()
	for _, epi := range []bool{false, true} {
		noErrs(t, b.SetEpilogues(epi))
		fn(epi)
	}
	noErrs(t, b.SetEpilogues(true))
}

// sameOrNear checks got against want bit for bit, or, where the two went
// through different roundings (rounded), within near's tol.
func sameOrNear(t *testing.T, what string, got, want []float32, rounded bool, tol float64) {
	t.Helper()
	if rounded {
		near(t, what+", epilogues", got, want, tol)
		return
	}
	sameBits(t, what, got, want)
}

// near fails unless |got-want| <= tol·(1+|want|) everywhere: two roundings
// of one computation.
func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	w := make([]float64, len(want))
	for i, v := range want {
		w[i] = float64(v)
	}
	closeTo(t, what, got, w, tol, tol, nil)
}

func TestGPUFusedAddRMSNorm(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 1))
	for _, sh := range [][2]int{{1, 4096}, {64, 2048}, {3, 512}} {
		rows, n := sh[0], sh[1]
		t.Run(fmt.Sprintf("%dx%d", rows, n), func(t *testing.T) {
			xv, dv := randVals(r, rows*n, 1), randVals(r, rows*n, 1)
			w, _ := weight(t, b, tensor.BF16, randVals(r, n, 1), n)
			// The sequence.
			x1, d1, y1 := upload(t, b, xv, rows, n), upload(t, b, dv, rows, n), alloc(t, b, rows, n)
			if err := b.Add(x1, x1, d1); err != nil {
				t.Fatal(err)
			}
			if err := b.RMSNorm(y1, x1, w, 1e-6); err != nil {
				t.Fatal(err)
			}
			// Fused, the result over d (as a decoder layer calls it).
			x2, d2 := upload(t, b, xv, rows, n), upload(t, b, dv, rows, n)
			if err := b.AddRMSNorm(d2, x2, d2, w, 1e-6); err != nil {
				t.Fatal(err)
			}
			sameBits(t, "x", download(t, b, x2), download(t, b, x1))
			sameBits(t, "dst", download(t, b, d2), download(t, b, y1))
		})
	}
	x, w := alloc(t, b, 2, 4096), alloc(t, b, 4096)
	if err := b.AddRMSNorm(x, x, alloc(t, b, 2, 4096), w, 1e-6); err == nil {
		t.Fatal("dst = x: no error")
	}
}

func TestGPUFusedQKNormRope(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 2))
	for _, c := range []struct{ rows, qh, kh, hd int }{{1, 32, 8, 128}, {64, 16, 8, 128}, {7, 3, 2, 128}, {5, 4, 2, 16}, {3, 2, 1, 72}} {
		t.Run(fmt.Sprintf("%dx%d/%d/%d", c.rows, c.qh, c.kh, c.hd), func(t *testing.T) {
			qv, kv := randVals(r, c.rows*c.qh*c.hd, 1), randVals(r, c.rows*c.kh*c.hd, 1)
			cs, sn := randVals(r, c.rows*c.hd/2, 1), randVals(r, c.rows*c.hd/2, 1)
			qw, _ := weight(t, b, tensor.BF16, randVals(r, c.hd, 1), c.hd)
			kw, _ := weight(t, b, tensor.F32, randVals(r, c.hd, 1), c.hd)
			cos, sin := upload(t, b, cs, c.rows, c.hd/2), upload(t, b, sn, c.rows, c.hd/2)
			q1, k1 := upload(t, b, qv, c.rows, c.qh*c.hd), upload(t, b, kv, c.rows, c.kh*c.hd)
			q2, k2 := upload(t, b, qv, c.rows, c.qh*c.hd), upload(t, b, kv, c.rows, c.kh*c.hd)
			noErrs(t,
				b.RMSNorm(q1, q1, qw, 1e-6), b.RMSNorm(k1, k1, kw, 1e-6),
				b.Rope(q1, cos, sin, c.hd), b.Rope(k1, cos, sin, c.hd),
				b.QKNormRope(q2, k2, qw, kw, cos, sin, c.hd, 1e-6),
			)
			sameBits(t, "q", download(t, b, q2), download(t, b, q1))
			sameBits(t, "k", download(t, b, k2), download(t, b, k1))
		})
	}
}

func TestGPUFusedMatMuls(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 3))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		for _, c := range [][2]int{{1, 512}, {4, 512}, {64, 2048}, {64, 96}} {
			M, K := c[0], c[1]
			t.Run(fmt.Sprintf("%v/M=%d/K=%d", dt, M, K), func(t *testing.T) {
				ns := []int{256, 64, 72}
				x := upload(t, b, randVals(r, M*K, 1), M, K)
				var ws, biases, seq, fused []backend.Tensor
				for i, n := range ns {
					w, _ := weight(t, b, dt, randVals(r, n*K, 0.1), n, K)
					ws = append(ws, w)
					var bias backend.Tensor
					if i != 1 {
						bias, _ = weight(t, b, tensor.BF16, randVals(r, n, 1), n)
					}
					biases = append(biases, bias)
					seq, fused = append(seq, alloc(t, b, M, n)), append(fused, alloc(t, b, M, n))
				}
				for i := range ns {
					if err := b.MatMul(seq[i], x, ws[i], biases[i]); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.MatMuls(fused, x, ws, biases); err != nil {
					t.Fatal(err)
				}
				for i := range ns {
					sameBits(t, fmt.Sprintf("projection %d", i), download(t, b, fused[i]), download(t, b, seq[i]))
				}
			})
		}
	}
}

func TestGPUFusedSwiGLU(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 4))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		for _, c := range [][2]int{{1, 1024}, {3, 1024}, {64, 1024}, {64, 256}, {40, 8256}} {
			M, K := c[0], c[1]
			t.Run(fmt.Sprintf("%v/M=%d/K=%d", dt, M, K), func(t *testing.T) {
				const N = 1000
				x := upload(t, b, randVals(r, M*K, 1), M, K)
				wg, _ := weight(t, b, dt, randVals(r, N*K, 0.05), N, K)
				wu, _ := weight(t, b, dt, randVals(r, N*K, 0.05), N, K)
				g1, u1, g2, u2 := alloc(t, b, M, N), alloc(t, b, M, N), alloc(t, b, M, N), alloc(t, b, M, N)
				noErrs(t,
					b.MatMul(g1, x, wg, nil), b.MatMul(u1, x, wu, nil), b.SiLUMul(g1, g1, u1),
					b.SwiGLU(g2, u2, x, wg, wu),
				)
				sameBits(t, "silu(gate)·up", download(t, b, g2), download(t, b, g1))
			})
		}
	}
}

func TestGPUFusedMatMulGELUAndResidual(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 5))
	for _, sh := range [][3]int{{37, 96, 160}, {64, 1152, 256}, {96, 160, 256}, {5, 7, 24}, {1, 64, 128}, {1, 2048, 4096}} {
		M, N, K := sh[0], sh[1], sh[2]
		for _, withBias := range []bool{true, false} {
			t.Run(fmt.Sprintf("%dx%dx%d/bias=%v", M, N, K, withBias), func(t *testing.T) {
				xv := randVals(r, M*K, 1)
				x := upload(t, b, xv, M, K)
				w, _ := weight(t, b, tensor.BF16, randVals(r, N*K, 0.2), N, K)
				var bias backend.Tensor
				if withBias {
					bias, _ = weight(t, b, tensor.BF16, randVals(r, N, 1), N)
				}
				for _, tanh := range []bool{false, true} {
					y1, y2 := alloc(t, b, M, N), alloc(t, b, M, N)
					noErrs(t,
						b.MatMul(y1, x, w, bias), b.GELU(y1, y1, tanh),
						b.MatMulGELU(y2, x, w, bias, tanh),
					)
					sameBits(t, fmt.Sprintf("gelu(x·wᵀ+b), tanh %v", tanh), download(t, b, y2), download(t, b, y1))
				}
				// With a bias, MatMulResidual folds it into cuBLASLt's
				// epilogue after the residual, (a·wᵀ + x) + b: the same bits
				// as the sequence only with the epilogues off.
				bothEpilogues(t, b, func(epi bool) {
					rv := randVals(r, M*N, 1)
					r1, r2 := upload(t, b, rv, M, N), upload(t, b, rv, M, N)
					h1, h2 := alloc(t, b, M, N), alloc(t, b, M, N)
					noErrs(t,
						b.MatMul(h1, x, w, bias), b.Add(r1, r1, h1),
						b.MatMulResidual(r2, h2, x, w, bias),
					)
					sameOrNear(t, "x + (a·wᵀ+b)", download(t, b, r2), download(t, b, r1), epi && withBias && M >= epilogueMinRows, 1e-5)
				})
			})
		}
	}
}

func TestGPUFusedQKNormRopeCache(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 6))
	for _, c := range []struct {
		rows, qh, kh, hd, crows, at int
		cdt                         tensor.DType
		device                      bool
	}{
		{1, 32, 8, 128, 40, 17, tensor.BF16, true},
		{1, 32, 8, 128, 40, 17, tensor.BF16, false},
		{64, 16, 8, 128, 200, 100, tensor.BF16, false},
		{7, 3, 1, 128, 40, 5, tensor.BF16, false}, // 5 heads a row: a warp's 4 straddle rows
		{7, 3, 1, 128, 40, 5, tensor.F32, true},
		{5, 4, 2, 16, 9, 4, tensor.F32, false},
		{3, 4, 2, 16, 9, 2, tensor.F32, true},
	} {
		t.Run(fmt.Sprintf("%d/%v/device=%v", c.rows, c.cdt, c.device), func(t *testing.T) {
			kw := c.kh * c.hd
			qv, kv, vv := randVals(r, c.rows*c.qh*c.hd, 1), randVals(r, c.rows*kw, 1), randVals(r, c.rows*kw, 1)
			cs, sn := randVals(r, c.rows*c.hd/2, 1), randVals(r, c.rows*c.hd/2, 1)
			qw, _ := weight(t, b, tensor.BF16, randVals(r, c.hd, 1), c.hd)
			kwt, _ := weight(t, b, tensor.BF16, randVals(r, c.hd, 1), c.hd)
			cos, sin := upload(t, b, cs, c.rows, c.hd/2), upload(t, b, sn, c.rows, c.hd/2)
			at := backend.CacheAt{Pos: c.at}
			if c.device {
				p, err := b.Alloc("pos", tensor.I32, 1)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free(p)
				if err := b.UploadI32(p, []int32{int32(c.at)}); err != nil {
					t.Fatal(err)
				}
				at = backend.CacheAt{PosAt: p}
			}
			var outs [2][4][]float32
			for i := range outs {
				q, k, v := upload(t, b, qv, c.rows, c.qh*c.hd), upload(t, b, kv, c.rows, kw), upload(t, b, vv, c.rows, kw)
				kc, err := b.Alloc("kv-cache", c.cdt, c.crows, kw)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free(kc)
				vc, err := b.Alloc("kv-cache", c.cdt, c.crows, kw)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free(vc)
				if i == 0 { // the sequence
					err = b.QKNormRope(q, k, qw, kwt, cos, sin, c.hd, 1e-6)
					if err == nil {
						err = backend.CopyRows(b, kc, at, k)
					}
					if err == nil {
						err = backend.CopyRows(b, vc, at, v)
					}
				} else {
					err = b.QKNormRopeCache(q, k, v, qw, kwt, cos, sin, c.hd, 1e-6, kc, vc, at)
				}
				if err != nil {
					t.Fatal(err)
				}
				outs[i] = [4][]float32{download(t, b, q), download(t, b, k), cacheFloats(t, b, kc), cacheFloats(t, b, vc)}
			}
			for j, name := range []string{"q", "k", "k cache", "v cache"} {
				sameBits(t, name, outs[1][j], outs[0][j])
			}
		})
	}
}

// cacheFloats downloads a KV cache of F32 or BF16 as floats.
func cacheFloats(t *testing.T, b *Backend, c backend.Tensor) []float32 {
	t.Helper()
	if c.DType() == tensor.F32 {
		return download(t, b, c)
	}
	rows, cols := backend.Matrix(c)
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(i)
	}
	f := alloc(t, b, rows, cols)
	if err := b.Embedding(f, c, ids); err != nil { // the rows, widened to float
		t.Fatal(err)
	}
	return download(t, b, f)
}

func TestGPUFusedSwiGLUDown(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		for _, M := range []int{1, 3, 64, 300} {
			t.Run(fmt.Sprintf("%v/M=%d", dt, M), func(t *testing.T) {
				const H, FF = 256, 1000
				xv := randVals(r, M*H, 1)
				wg, _ := weight(t, b, dt, randVals(r, FF*H, 0.05), FF, H)
				wu, _ := weight(t, b, dt, randVals(r, FF*H, 0.05), FF, H)
				wd, _ := weight(t, b, dt, randVals(r, H*FF, 0.05), H, FF)
				// The sequence, and the fused op writing over its input as
				// a decoder layer calls it.
				x1, g1, u1, y1 := upload(t, b, xv, M, H), alloc(t, b, M, FF), alloc(t, b, M, FF), alloc(t, b, M, H)
				x2, g2, u2 := upload(t, b, xv, M, H), alloc(t, b, M, FF), alloc(t, b, M, FF)
				noErrs(t,
					b.SwiGLU(g1, u1, x1, wg, wu), b.MatMul(y1, g1, wd, nil),
					b.SwiGLUDown(x2, g2, u2, x2, wg, wu, wd),
				)
				sameBits(t, "mlp", download(t, b, x2), download(t, b, y1))
			})
		}
	}
	x, g := alloc(t, b, 4, 64), alloc(t, b, 4, 128)
	w1, _ := weight(t, b, tensor.BF16, make([]float32, 128*64), 128, 64)
	w2, _ := weight(t, b, tensor.BF16, make([]float32, 64*128), 64, 128)
	if err := b.SwiGLUDown(x, g, g, x, w1, w1, w2); err == nil {
		t.Fatal("gate = up: no error")
	}
}

func TestGPUFusedGELUMLP(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 9))
	for _, c := range []struct {
		M, H, FF int
		dt       tensor.DType
		bias     bool
	}{{1, 64, 96, tensor.BF16, true}, {37, 96, 160, tensor.BF16, true}, {96, 96, 160, tensor.BF16, true}, {200, 1152, 512, tensor.BF16, false},
		{5, 24, 36, tensor.F16, true}} {
		for _, tanh := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dx%dx%d/%v/bias=%v/tanh=%v", c.M, c.H, c.FF, c.dt, c.bias, tanh), func(t *testing.T) {
				av, xv := randVals(r, c.M*c.H, 1), randVals(r, c.M*c.H, 1)
				w1, _ := weight(t, b, c.dt, randVals(r, c.FF*c.H, 0.1), c.FF, c.H)
				w2, _ := weight(t, b, c.dt, randVals(r, c.H*c.FF, 0.1), c.H, c.FF)
				var b1, b2 backend.Tensor
				if c.bias {
					b1, _ = weight(t, b, tensor.BF16, randVals(r, c.FF, 1), c.FF)
					b2, _ = weight(t, b, tensor.BF16, randVals(r, c.H, 1), c.H)
				}
				// The vision block's call: a is h, its scratch.
				// With the epilogues, GELUMLP's tanh GELU is cuBLASLt's,
				// rounded to 16 bits there: close to the sequence, not the
				// same bits. Without them, the same bits.
				bothEpilogues(t, b, func(epi bool) {
					x1, a1, m1 := upload(t, b, xv, c.M, c.H), upload(t, b, av, c.M, c.H), alloc(t, b, c.M, c.FF)
					x2, a2, m2 := upload(t, b, xv, c.M, c.H), upload(t, b, av, c.M, c.H), alloc(t, b, c.M, c.FF)
					noErrs(t,
						b.MatMulGELU(m1, a1, w1, b1, tanh), b.MatMulResidual(x1, a1, m1, w2, b2),
						b.GELUMLP(x2, a2, m2, a2, w1, b1, w2, b2, tanh),
					)
					sameOrNear(t, "x + mlp", download(t, b, x2), download(t, b, x1), epi && c.bias && c.M >= epilogueMinRows, 5e-3)
				})
			})
		}
	}
}

// TestGPUFusedLayerNorm checks LayerNormMatMuls and LayerNormGELUMLP
// against their sequences (LayerNorm, then MatMuls or GELUMLP), bit for
// bit: for rows the fused path takes (the vision encoder's 1152, the norm
// written only in bf16: LayerNormMatMuls must leave h as it was) and for
// others (the sequence, h written). h is the MLP's scratch as well.
func TestGPUFusedLayerNorm(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 12))
	for _, c := range []struct {
		M, H, FF int
		fused    bool
	}{{300, 1152, 512, true}, {70, 1152, 256, true}, {3, 1152, 256, true}, {300, 512, 256, false}, {1, 1152, 256, false}} {
		t.Run(fmt.Sprintf("%dx%dx%d", c.M, c.H, c.FF), func(t *testing.T) {
			xv := randVals(r, c.M*c.H, 2)
			nw, _ := weight(t, b, tensor.BF16, randVals(r, c.H, 1), c.H)
			nb, _ := weight(t, b, tensor.BF16, randVals(r, c.H, 1), c.H)
			nan := make([]float32, c.M*c.H)
			for i := range nan {
				nan[i] = float32(math.NaN())
			}
			untouched := func(what string, h backend.Tensor) {
				t.Helper()
				got := download(t, b, h)
				if written := !math.IsNaN(float64(got[0])); written == c.fused {
					t.Errorf("%s: h written %v, want %v", what, written, !c.fused)
				}
			}
			ws, biases := make([]backend.Tensor, 3), make([]backend.Tensor, 3)
			d1, d2 := make([]backend.Tensor, 3), make([]backend.Tensor, 3)
			for i := range ws {
				ws[i], _ = weight(t, b, tensor.BF16, randVals(r, c.H*c.H, 0.05), c.H, c.H)
				biases[i], _ = weight(t, b, tensor.BF16, randVals(r, c.H, 1), c.H)
				d1[i], d2[i] = alloc(t, b, c.M, c.H), alloc(t, b, c.M, c.H)
			}
			x, h1, h2 := upload(t, b, xv, c.M, c.H), alloc(t, b, c.M, c.H), upload(t, b, nan, c.M, c.H)
			noErrs(t, backend.LayerNormMatMulsSeq(b, d1, h1, x, nw, nb, 1e-6, ws, biases),
				b.LayerNormMatMuls(d2, h2, x, nw, nb, 1e-6, ws, biases))
			for i := range ws {
				sameBits(t, fmt.Sprintf("projection %d", i), download(t, b, d2[i]), download(t, b, d1[i]))
			}
			untouched("layernorm+matmuls", h2)
			sameBits(t, "x", download(t, b, x), xv)

			w1, _ := weight(t, b, tensor.BF16, randVals(r, c.FF*c.H, 0.1), c.FF, c.H)
			w2, _ := weight(t, b, tensor.BF16, randVals(r, c.H*c.FF, 0.1), c.H, c.FF)
			b1, _ := weight(t, b, tensor.BF16, randVals(r, c.FF, 1), c.FF)
			b2, _ := weight(t, b, tensor.BF16, randVals(r, c.H, 1), c.H)
			for _, tanh := range []bool{false, true} {
				x1, x2 := upload(t, b, xv, c.M, c.H), upload(t, b, xv, c.M, c.H)
				h1, h2 := alloc(t, b, c.M, c.H), upload(t, b, nan, c.M, c.H)
				m1, m2 := alloc(t, b, c.M, c.FF), alloc(t, b, c.M, c.FF)
				noErrs(t, backend.LayerNormGELUMLPSeq(b, x1, h1, m1, nw, nb, 1e-6, w1, b1, w2, b2, tanh),
					b.LayerNormGELUMLP(x2, h2, m2, nw, nb, 1e-6, w1, b1, w2, b2, tanh))
				sameBits(t, fmt.Sprintf("x + mlp (tanh %v)", tanh), download(t, b, x2), download(t, b, x1))
			}
		})
	}
}

// TestGPUFusedRMSNormMatMuls checks RMSNormMatMuls against RMSNorm then
// MatMul each: the same bits where the norm writes the products' 16-bit
// input itself (more than one row, a norm of more than 1,024) and on the
// other paths.
func TestGPUFusedRMSNormMatMuls(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 10))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		for _, c := range []struct{ M, H int }{{64, 2048}, {300, 4096}, {3, 2048}, {1, 2048}, {1, 4096}, {1, 6144}, {1, 1024}, {64, 512}} {
			for _, withBias := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/M=%d/H=%d/bias=%v", dt, c.M, c.H, withBias), func(t *testing.T) {
					M, H := c.M, c.H
					ns := []int{H, 256, 256}
					xv := randVals(r, M*H, 2)
					nw, _ := weight(t, b, tensor.BF16, randVals(r, H, 1), H)
					ws, biases := make([]backend.Tensor, 3), make([]backend.Tensor, 3)
					d1, d2 := make([]backend.Tensor, 3), make([]backend.Tensor, 3)
					for i, n := range ns {
						ws[i], _ = weight(t, b, dt, randVals(r, n*H, 0.05), n, H)
						if withBias {
							biases[i], _ = weight(t, b, tensor.BF16, randVals(r, n, 1), n)
						}
						d1[i], d2[i] = alloc(t, b, M, n), alloc(t, b, M, n)
					}
					x, h1, h2 := upload(t, b, xv, M, H), alloc(t, b, M, H), alloc(t, b, M, H)
					if err := b.RMSNorm(h1, x, nw, 1e-6); err != nil {
						t.Fatal(err)
					}
					for i := range ns {
						if err := b.MatMul(d1[i], h1, ws[i], biases[i]); err != nil {
							t.Fatal(err)
						}
					}
					noErrs(t, b.StartTrace(), b.RMSNormMatMuls(d2, h2, x, nw, 1e-6, ws, biases))
					normInGEMV(t, b, M, H, "norm+matmuls gemv stream")
					for i := range ns {
						sameBits(t, fmt.Sprintf("projection %d", i), download(t, b, d2[i]), download(t, b, d1[i]))
					}
					sameBits(t, "x", download(t, b, x), xv)
				})
			}
		}
	}
}

// TestGPUFusedRMSNormMLP checks RMSNormMLP against its sequence (RMSNorm,
// SwiGLU, MatMul, Add): the same bits on the fused GEMV path and the others.
func TestGPUFusedRMSNormMLP(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 11))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		for _, c := range []struct{ M, H, FF int }{{1, 2048, 1000}, {1, 4096, 512}, {1, 6144, 512}, {1, 768, 1000}, {3, 2048, 1000}, {64, 2048, 512}} {
			t.Run(fmt.Sprintf("%v/M=%d/H=%d/FF=%d", dt, c.M, c.H, c.FF), func(t *testing.T) {
				M, H, FF := c.M, c.H, c.FF
				xv := randVals(r, M*H, 2)
				nw, _ := weight(t, b, tensor.BF16, randVals(r, H, 1), H)
				wg, _ := weight(t, b, dt, randVals(r, FF*H, 0.05), FF, H)
				wu, _ := weight(t, b, dt, randVals(r, FF*H, 0.05), FF, H)
				wd, _ := weight(t, b, dt, randVals(r, H*FF, 0.05), H, FF)
				x1, h1, g1, u1 := upload(t, b, xv, M, H), alloc(t, b, M, H), alloc(t, b, M, FF), alloc(t, b, M, FF)
				x2, h2, g2, u2 := upload(t, b, xv, M, H), alloc(t, b, M, H), alloc(t, b, M, FF), alloc(t, b, M, FF)
				noErrs(t,
					b.RMSNorm(h1, x1, nw, 1e-6), b.SwiGLU(g1, u1, h1, wg, wu), b.MatMul(h1, g1, wd, nil), b.Add(x1, x1, h1),
					b.StartTrace(), b.RMSNormMLP(x2, h2, g2, u2, nw, 1e-6, wg, wu, wd),
				)
				normInGEMV(t, b, M, H, "norm+swiglu gemv stream")
				sameBits(t, "x + mlp(norm(x))", download(t, b, x2), download(t, b, x1))
			})
		}
	}
	x, h, g := alloc(t, b, 1, 2048), alloc(t, b, 1, 2048), alloc(t, b, 1, 256)
	nw, _ := weight(t, b, tensor.BF16, make([]float32, 2048), 2048)
	w1, _ := weight(t, b, tensor.BF16, make([]float32, 256*2048), 256, 2048)
	w2, _ := weight(t, b, tensor.BF16, make([]float32, 2048*256), 2048, 256)
	if err := b.RMSNormMLP(x, h, g, g, nw, 1e-6, w1, w1, w2); err == nil {
		t.Fatal("gate = up: no error")
	}
	if err := b.RMSNormMLP(x, h, g, alloc(t, b, 1, 256), alloc(t, b, 1, 1000), 1e-6, w1, w1, w2); err == nil {
		t.Fatal("a norm weight of the wrong size: no error")
	}
}

// normInGEMV stops the trace of one fused norm-and-products op and checks
// where its norm ran: for one row of more than 1,024 where the streamed
// GEMV runs, inside the launch named fused (no vla_rmsnorm launch);
// otherwise in an rmsnorm launch of its own.
func normInGEMV(t *testing.T, b *Backend, M, H int, fused string) {
	t.Helper()
	ops, err := b.StopTrace()
	if err != nil {
		t.Fatal(err)
	}
	var stream bool
	noErrs(t, b.run(func(g *gpu) error { stream = g.gstreamOK; return nil }))
	want := M == 1 && H > warpRowMax && stream
	var inside, apart bool
	for _, o := range ops {
		inside = inside || strings.HasPrefix(o.Op, fused+" ")
		apart = apart || strings.HasPrefix(o.Op, "rmsnorm ")
	}
	if inside != want || apart == want {
		t.Errorf("M=%d H=%d (streamed GEMV %v): the norm in %q %v, in its own launch %v; ops %v", M, H, stream, fused, inside, apart, ops)
	}
}

// noErrs fails the test at the first error of calls made in turn (their
// arguments evaluated, so the ops queued, before any is checked).
func noErrs(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// noConversion stops the trace and fails if a product converted its input
// (it should have read the bf16 twin that the op named after wrote).
func noConversion(t *testing.T, b *Backend, after string) {
	t.Helper()
	ops, err := b.StopTrace()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ops {
		if strings.HasPrefix(o.Op, "matmul convert") {
			t.Errorf("the product after %s converted its input (%s)", after, o.Op)
		}
	}
}

// TestGPULayerNormTwin checks the bf16 twin of a LayerNorm's output
// (gpu.twin): the products right after the norm read it and get the bits
// of converting the output again; an op in between (here one that
// rewrites the output) means the twin is not used.
func TestGPULayerNormTwin(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 9))
	const rows, n, N = 96, 1152, 256
	x := upload(t, b, randVals(r, rows*n, 1), rows, n)
	lw, _ := weight(t, b, tensor.BF16, randVals(r, n, 1), n)
	lb, _ := weight(t, b, tensor.BF16, randVals(r, n, 1), n)
	w, _ := weight(t, b, tensor.BF16, randVals(r, N*n, 0.03), N, n)
	h, y1, y2 := alloc(t, b, rows, n), alloc(t, b, rows, N), alloc(t, b, rows, N)
	noErrs(t, b.StartTrace(), b.LayerNorm(h, x, lw, lb, 1e-6), b.MatMul(y1, h, w, nil)) // from the twin
	noConversion(t, b, "the norm")
	noErrs(t, b.LayerNorm(h, x, lw, lb, 1e-6), b.Sync(), b.MatMul(y2, h, w, nil))
	if b.g.twinIn.p != 0 || b.g.twinOut.p != 0 {
		t.Error("a twin outlived the op after the norm")
	}
	sameBits(t, "product of the twin", download(t, b, y1), download(t, b, y2))
	noErrs(t, b.LayerNorm(h, x, lw, lb, 1e-6), b.Add(h, h, h), b.MatMul(y1, h, w, nil))
	noErrs(t, b.Sync(), b.MatMul(y2, h, w, nil))
	sameBits(t, "product after h changed", download(t, b, y1), download(t, b, y2))
}

// TestGPUAttentionTwin checks that the output projection after attention
// reads the bf16 twin the attention wrote (no conversion of its input),
// for one flash launch (vision-like: 2 images of 96 patches, heads of 72)
// and for split flash launches and their merge (the expert's 64 queries
// over a long cache), and that the product is the same bits as from a
// conversion.
func TestGPUAttentionTwin(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(7, 11))
	for _, c := range []struct {
		name                    string
		tq, nkv, heads, kvh, hd int
		causal                  bool
		segments                []int
	}{
		{"one launch, segments", 192, 192, 4, 4, 72, false, []int{0, 96, 192}},
		{"splits and merge", 64, 3126, 4, 2, 128, true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			const N = 256
			qc, kc := c.heads*c.hd, c.kvh*c.hd
			q := upload(t, b, randVals(r, c.tq*qc, 1), c.tq, qc)
			k := upload(t, b, randVals(r, c.nkv*kc, 1), c.nkv, kc)
			v := upload(t, b, randVals(r, c.nkv*kc, 1), c.nkv, kc)
			w, _ := weight(t, b, tensor.BF16, randVals(r, N*qc, 0.03), N, qc)
			o := backend.AttnOpts{Heads: c.heads, KVHeads: c.kvh, HeadDim: c.hd, NKV: c.nkv,
				Scale: float32(1 / math.Sqrt(float64(c.hd))), Causal: c.causal, QPos0: c.nkv - c.tq, Segments: c.segments}
			att, y1, y2 := alloc(t, b, c.tq, qc), alloc(t, b, c.tq, N), alloc(t, b, c.tq, N)
			noErrs(t, b.StartTrace(), b.Attention(att, q, k, v, o), b.MatMul(y1, att, w, nil)) // from the twin
			noConversion(t, b, "attention")
			noErrs(t, b.Sync(), b.MatMul(y2, att, w, nil)) // converting att
			sameBits(t, "product of the twin", download(t, b, y1), download(t, b, y2))
		})
	}
}
