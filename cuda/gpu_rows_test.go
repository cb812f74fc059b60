package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"vlanode/backend"
	"vlanode/tensor"
)

// vla_gemm_rows (products of 2 to 64 rows) against float64 references of
// the rounded operands (refProduct), and against cuBLAS, on each of its
// kernels the device has (mma.sync; wgmma on sm_90a). TestGPUMatMul covers
// its plain mode for more shapes; gpu_fused_test.go checks that the fused
// ops built on it give the bits of their sequences.

// rowsKernels runs fn on the shared backend as a subtest on the mma.sync
// kernel, and on the wgmma kernel where it is built. Where it should be
// (an sm_90 device, NVRTC 12 or later) and is not, the test fails with
// the reason.
func rowsKernels(t *testing.T, fn func(t *testing.T, b *Backend)) {
	b := gpuBackend(t)
	var wg bool
	var why string
	noErrs(t, b.run(func(g *gpu) error {
		wg, why = g.rowsWG, g.rowsWGOff
		major, _, err := g.rtc.Version()
		if !wg && err == nil && g.info.ComputeCapability == 90 && major >= 12 {
			return fmt.Errorf("vla_gemm_rows_wg is off on sm_90 with %s: %s", g.info.NVRTC, why)
		}
		return err
	}))
	for _, kind := range []string{"mma", "wgmma"} {
		t.Run(kind, func(t *testing.T) {
			if kind == "wgmma" && !wg {
				t.Skipf("SKIPPED: the wgmma kernel is not built here: %s", why)
			}
			noErrs(t, b.SetRowsWGMMA(kind == "wgmma"))
			defer b.SetRowsWGMMA(true)
			fn(t, b)
		})
	}
}

func TestGPURowProducts(t *testing.T) { rowsKernels(t, testRowProducts) }

func testRowProducts(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(11, 1))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		// Splits of K: 4 ({2, 1024, 2048}) and 8 ({33, 200, 8256}); the
		// rest one block a tile, the products written straight out. K of
		// 64, 192 and 8,256 end in a stage that is part zeros.
		for _, c := range []struct{ M, N, K int }{{64, 8256, 128}, {2, 1024, 2048}, {33, 200, 8256}, {64, 130, 64}, {17, 64, 192}} {
			t.Run(fmt.Sprintf("%v/%dx%dx%d", dt, c.M, c.N, c.K), func(t *testing.T) {
				M, N, K := c.M, c.N, c.K
				noErrs(t, b.run(func(g *gpu) error {
					if !g.useRows(&Tensor{dt: dt}, 0, M, K) {
						return fmt.Errorf("%d×%d×%d does not take vla_gemm_rows", M, N, K)
					}
					return nil
				}))
				xv := randVals(r, M*K, 1)
				x := upload(t, b, xv, M, K)
				w, wv := weight(t, b, dt, randVals(r, N*K, 0.5), N, K)
				bias, bv := weight(t, b, tensor.BF16, randVals(r, N, 1), N)
				want, tol := refProduct(roundTo(dt, xv), wv, bv, M, N, K)

				// Plain, with a bias; twice, for the same bits.
				y1, y2 := alloc(t, b, M, N), alloc(t, b, M, N)
				noErrs(t, b.MatMul(y1, x, w, bias), b.MatMul(y2, x, w, bias))
				got := download(t, b, y1)
				closeTo(t, "x·wᵀ+b", got, want, 0, 0, tol)
				sameBits(t, "again", download(t, b, y2), got)

				// The residual: x += a·wᵀ (the GEMM adding to x itself).
				rv := randVals(r, M*N, 1)
				res := upload(t, b, rv, M, N)
				noErrs(t, b.MatMulResidual(res, alloc(t, b, M, N), x, w, nil))
				wantRes := make([]float64, M*N)
				for i := range wantRes {
					wantRes[i] = want[i] - float64(bv[i%N]) + float64(rv[i])
				}
				closeTo(t, "x + a·wᵀ", download(t, b, res), wantRes, 0, 0, tol)

				// cuBLAS on the same operands: the same sums in another order.
				noErrs(t, b.SetRowProducts(false))
				y3 := alloc(t, b, M, N)
				noErrs(t, b.MatMul(y3, x, w, bias), b.SetRowProducts(true))
				closeTo(t, "cuBLAS", download(t, b, y3), want, 0, 0, tol)
			})
		}
	}
}

func TestGPURowProductsShared(t *testing.T) { rowsKernels(t, testRowProductsShared) }

func testRowProductsShared(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(11, 2))
	// q, k and v of the expert's shape, scaled down: three weights with
	// different splits in one launch, a bias on one.
	const M, K = 64, 1024
	ns := []int{512, 256, 130}
	xv := randVals(r, M*K, 1)
	x := upload(t, b, xv, M, K)
	xr := roundTo(tensor.BF16, xv)
	var ws, biases, dsts []backend.Tensor
	var wvs, bvs [][]float32
	for i, n := range ns {
		w, wv := weight(t, b, tensor.BF16, randVals(r, n*K, 0.5), n, K)
		var bias backend.Tensor
		var bv []float32
		if i == 1 {
			bias, bv = weight(t, b, tensor.BF16, randVals(r, n, 1), n)
		}
		ws, wvs, biases, bvs = append(ws, w), append(wvs, wv), append(biases, bias), append(bvs, bv)
		dsts = append(dsts, alloc(t, b, M, n))
	}
	noErrs(t, b.MatMuls(dsts, x, ws, biases))
	for i, n := range ns {
		want, tol := refProduct(xr, wvs[i], bvs[i], M, n, K)
		closeTo(t, fmt.Sprintf("projection %d", i), download(t, b, dsts[i]), want, 0, 0, tol)
	}

	// Replayed from a graph, with new inputs: the counters start at zero
	// at every launch.
	gr, err := b.Capture(func() error { return b.MatMuls(dsts, x, ws, biases) })
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	for range 3 {
		xv = randVals(r, M*K, 1)
		noErrs(t, b.Upload(x, xv), gr.Launch())
		xr = roundTo(tensor.BF16, xv)
		for i, n := range ns {
			want, tol := refProduct(xr, wvs[i], bvs[i], M, n, K)
			closeTo(t, fmt.Sprintf("graph: projection %d", i), download(t, b, dsts[i]), want, 0, 0, tol)
		}
	}
}

func TestGPURowProductsSwiGLU(t *testing.T) { rowsKernels(t, testRowProductsSwiGLU) }

func testRowProductsSwiGLU(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(11, 3))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		// {64, 1000, 1024}: K split in two; {3, 8256, 128}: one block a
		// weight and tile, the products in gate and up.
		for _, c := range []struct{ M, N, K int }{{64, 1000, 1024}, {3, 8256, 128}} {
			t.Run(fmt.Sprintf("%v/%dx%dx%d", dt, c.M, c.N, c.K), func(t *testing.T) {
				M, N, K := c.M, c.N, c.K
				xv := randVals(r, M*K, 1)
				x := upload(t, b, xv, M, K)
				wg, _ := weight(t, b, dt, randVals(r, N*K, 0.05), N, K)
				wu, _ := weight(t, b, dt, randVals(r, N*K, 0.05), N, K)
				gate, up := alloc(t, b, M, N), alloc(t, b, M, N)
				ga, ua, err := b.swigluArgs("test", gate, up, x, wg, wu)
				if err != nil {
					t.Fatal(err)
				}
				var out []byte
				noErrs(t, b.run(func(g *gpu) error {
					xp, err := g.convertX(ga.x, dt)
					if err != nil {
						return err
					}
					if !g.rowsAll(xp, []matmulOperands{ga, ua}) {
						return fmt.Errorf("gate and up do not take vla_gemm_rows")
					}
					hp, err := g.swigluTo16(xp, ga, ua, dt)
					if err != nil {
						return err
					}
					buf, err := g.fetch("test", hp, int64(M*N*2))
					out = append([]byte(nil), buf...)
					return err
				}))
				got := make([]float32, M*N)
				if err := tensor.ToF32(got, dt, out); err != nil {
					t.Fatal(err)
				}
				// gate and up as MatMul computes them (the same sums:
				// TestGPURowProducts checks those against float64), then
				// silu(gate)·up in float as vla_silu_mul does and rounded
				// to dt: the same bits, but for exp's last bit in double
				// (one unit in the last place of dt allowed).
				g32, u32 := alloc(t, b, M, N), alloc(t, b, M, N)
				noErrs(t, b.MatMul(g32, x, wg, nil), b.MatMul(u32, x, wu, nil))
				gs, us := download(t, b, g32), download(t, b, u32)
				ulp := math.Ldexp(1, -7)
				if dt == tensor.F16 {
					ulp = math.Ldexp(1, -10)
				}
				h := make([]float32, M*N)
				for i := range h {
					v := float64(gs[i])
					h[i] = float32(v/(1+math.Exp(-v))) * us[i]
				}
				want, tol := make([]float64, M*N), make([]float64, M*N)
				for i, v := range roundTo(dt, h) {
					want[i], tol[i] = float64(v), ulp*math.Abs(float64(v))+1e-7 // f16's subnormals: 2⁻²⁴ apart
				}
				closeTo(t, "silu(gate)·up", got, want, 0, 0, tol)
			})
		}
	}
}
