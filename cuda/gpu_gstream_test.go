package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"vlanode/backend"
	"vlanode/tensor"
)

// vla_gemv_stream against the warp-per-column GEMV kernels, whose bits it
// promises (TestGPUMatMul checks the one-row products against float64
// references with the streamed kernel on, the default).

// streamSlots runs fn with the streamed GEMV on and a ring of slots
// (checked to take products of depth K), then restores the default. On a
// device or NVRTC the kernel is not built for, the test is skipped,
// loudly; where it is built, the kernel being off is a failure.
func streamSlots(t *testing.T, b *Backend, slots, K int, fn func()) {
	t.Helper()
	streamRing(t, b, slots, K, false, fn)
}

// streamRing is streamSlots with x held as floats (floatX) or packed.
func streamRing(t *testing.T, b *Backend, slots, K int, floatX bool, fn func()) {
	t.Helper()
	var skip string
	noErrs(t, b.run(func(g *gpu) error {
		if !g.gstreamOK {
			major, _, err := g.rtc.Version()
			if err != nil {
				return err
			}
			if g.info.ComputeCapability < gstreamMinArch || major < gstreamMinRTC {
				skip = g.gstreamOff
				return nil
			}
			return fmt.Errorf("vla_gemv_stream is off here (sm_%d, %s): %s", g.info.ComputeCapability, g.info.NVRTC, g.gstreamOff)
		}
		g.gstreamSlots, g.gstreamFloatX = slots, floatX
		if !g.useStream(K) {
			return fmt.Errorf("%d slots and K = %d do not fit a block's shared memory", slots, K)
		}
		return nil
	}))
	if skip != "" {
		t.Skipf("SKIPPED: vla_gemv_stream is not built here: %s", skip)
	}
	defer b.run(func(g *gpu) error { g.gstreamSlots, g.gstreamFloatX = gstreamSlots, false; return nil })
	fn()
}

// warpKernels runs fn on the warp-per-column GEMV kernels.
func warpKernels(t *testing.T, b *Backend, fn func()) {
	t.Helper()
	noErrs(t, b.SetStreamGEMV(false))
	defer b.SetStreamGEMV(true)
	fn()
}

func TestGPUStreamGEMV(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(17, 1))
	// Rows of two pieces (K = 4,096), part of one (K = 1,000: 2,000
	// bytes), six (K = 12,288) and three, the last of 16 bytes (K =
	// 4,104); fewer columns than SMs, odd counts; one to three steps of
	// a warp in flight; x packed in 16 bits (the default) and as floats
	// (three steps at K = 12,288 fit only packed).
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		for _, c := range []struct {
			N, K, slots int
			floatX      bool
		}{
			{4096, 4096, gstreamSlots, false}, {1024, 12288, gstreamSlots, false}, {5, 1000, gstreamSlots, false},
			{301, 4104, 16, false}, {700, 4096, 48, false}, {2001, 12288, 16, false}, {700, 12288, 48, false},
			{4096, 4096, gstreamSlots, true}, {1024, 12288, gstreamSlots, true}, {301, 4104, 16, true},
		} {
			t.Run(fmt.Sprintf("%v/1x%dx%d/slots=%d/floatx=%v", dt, c.N, c.K, c.slots, c.floatX), func(t *testing.T) {
				N, K := c.N, c.K
				xv := randVals(r, K, 1)
				x := upload(t, b, xv, 1, K)
				w, _ := weight(t, b, dt, randVals(r, N*K, 0.5), N, K)
				w2, _ := weight(t, b, dt, randVals(r, N*K, 0.5), N, K)
				w3, _ := weight(t, b, dt, randVals(r, (N/2+1)*K, 0.5), N/2+1, K)
				bias, _ := weight(t, b, tensor.BF16, randVals(r, N, 1), N)
				rv := randVals(r, N, 1)

				// run queues every mode: MatMul with a bias, MatMulResidual,
				// MatMuls of three weights (a bias on the second), SwiGLU.
				run := func() [][]float32 {
					y := alloc(t, b, 1, N)
					res := upload(t, b, rv, 1, N)
					q, k, v := alloc(t, b, 1, N), alloc(t, b, 1, N), alloc(t, b, 1, N/2+1)
					gate, up := alloc(t, b, 1, N), alloc(t, b, 1, N)
					noErrs(t, b.MatMul(y, x, w, bias),
						b.MatMulResidual(res, alloc(t, b, 1, N), x, w, nil),
						b.MatMuls([]backend.Tensor{q, k, v}, x, []backend.Tensor{w, w2, w3}, []backend.Tensor{nil, bias, nil}),
						b.SwiGLU(gate, up, x, w, w2))
					return [][]float32{download(t, b, y), download(t, b, res), download(t, b, q), download(t, b, k),
						download(t, b, v), download(t, b, gate)}
				}
				var got, want [][]float32
				streamRing(t, b, c.slots, c.K, c.floatX, func() { got = run() })
				warpKernels(t, b, func() { want = run() })
				for i, what := range []string{"matmul+bias", "residual", "matmuls q", "matmuls k", "matmuls v", "swiglu"} {
					sameBits(t, what, got[i], want[i])
				}
			})
		}
	}
}

// TestGPUStreamGEMVGraph replays the streamed kernel from a graph with
// new inputs: its barriers are set up by every launch.
func TestGPUStreamGEMVGraph(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(17, 2))
	const N, K = 6144, 4096
	x := upload(t, b, randVals(r, K, 1), 1, K)
	w, wv := weight(t, b, tensor.BF16, randVals(r, N*K, 0.5), N, K)
	y := alloc(t, b, 1, N)
	streamSlots(t, b, gstreamSlots, K, func() {
		noErrs(t, b.MatMul(y, x, w, nil))
		gr, err := b.Capture(func() error { return b.MatMul(y, x, w, nil) })
		if err != nil {
			t.Fatal(err)
		}
		defer gr.Close()
		for i := range 3 {
			xv := randVals(r, K, 1)
			noErrs(t, b.Upload(x, xv), gr.Launch())
			want, tol := refProduct(roundTo(tensor.BF16, xv), wv, nil, 1, N, K)
			closeTo(t, fmt.Sprintf("replay %d", i), download(t, b, y), want, 0, 0, tol)
		}
	})
}
