package qwen3_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/cpu"
	"vlanode/cpu/kern"
	"vlanode/models"
	"vlanode/models/qwen3"
	"vlanode/placement"
	"vlanode/safetensors"
	"vlanode/tensor"
	"vlanode/weights"
)

// TestMLPSplitMatchesWhole: a layer's MLP split between the device and the
// CPU engine (Layer.MLP with a models.Split: the device computes its share
// from the weights laid out as Unit.Share lays them in a slot, the engine
// the first c intermediate columns from the host blob, and the device adds
// the engine's partial sums back) gives the unsplit MLP's result up to
// float32 summation order, for one row and several, at the smallest, a
// middle and the largest cut, with the CPU computing the whole part, on the
// engine's Go code and on its kernel pool. This is the teacher-forced check
// of a co-executed plan: the same input to both, one layer's output
// compared (a whole inference of a random-weight model is no such check:
// its flow amplifies float32 rounding, see TestLayeredCPUShards).
func TestMLPSplitMatchesWhole(t *testing.T) {
	be, err := cpu.New()
	require.NoError(t, err)
	defer be.Close()
	pool, err := kern.NewPool(kern.Options{Threads: 2})
	require.NoError(t, err)
	defer pool.Close()
	// The Go code sums in float32 as this device's MatMul does; the
	// kernels round x and the SwiGLU to bf16 first, as the GPU's bf16
	// products do (2⁻⁸ relative each), which this device does not
	// (measured: at most 0.24% of the MLP's largest output).
	checkSplit(t, be, []splitEngine{
		{"go", []cpu.Option{cpu.WithThreads(2)}, 1e-5},
		{"kernels", []cpu.Option{cpu.WithThreads(2), cpu.WithKernels(pool)}, 1e-2},
	})
}

// splitEngine is a CPU engine for checkSplit and its tolerance: the
// largest difference from the device's whole MLP as a share of the MLP's
// largest output.
type splitEngine struct {
	name string
	opts []cpu.Option
	tol  float64
}

// checkSplit runs layer 0's MLP of a reference checkpoint on device be
// whole and split with each engine at several cuts, on the same input.
func checkSplit(t *testing.T, be backend.Backend, engines []splitEngine) {
	dir := filepath.Join(referenceDir, "qwen3-gqa2-hd64")
	cfg, err := configs.LoadQwen3(dir)
	require.NoError(t, err)
	ck, err := safetensors.Open(dir)
	require.NoError(t, err)
	defer ck.Close()

	// The layer's units stay on the host: the test binds the device's
	// views itself, as the executor does.
	ld := models.NewLoader(be, ck)
	ld.Place = func(placement.ID) placement.Weights { return placement.Streamed }
	l := qwen3.NewLayer(cfg)
	units, err := qwen3.LoadLayer(ld, l, placement.VLM, 0, "model.layers.0.")
	require.NoError(t, err)
	u := units.MLP
	var views []backend.Tensor
	defer func() {
		for _, v := range views {
			be.Free(v)
		}
	}()
	view := func(data []byte) func(weights.Entry) (backend.Tensor, error) {
		return func(e weights.Entry) (backend.Tensor, error) {
			v, err := be.Weight("view", e.DType, e.Shape, data[e.Offset:e.Offset+e.Size])
			views = append(views, v)
			return v, err
		}
	}
	ff, h := cfg.IntermediateSize, cfg.HiddenSize
	rng := rand.New(rand.NewPCG(5, 6))

	for _, eng := range engines {
		engine, err := cpu.New(eng.opts...)
		require.NoError(t, err)
		host, err := u.HostTensors(engine)
		require.NoError(t, err)
		for _, rows := range []int{1, 5} {
			s, err := qwen3.NewScratch(be, cfg, rows)
			require.NoError(t, err)
			in := make([]float32, rows*h)
			for i := range in {
				in[i] = float32(rng.NormFloat64())
			}
			run := func(sp *models.Split) []float32 {
				x, err := be.Alloc("x", tensor.F32, rows, h)
				require.NoError(t, err)
				defer be.Free(x)
				require.NoError(t, be.Upload(x, in))
				require.NoError(t, l.MLP(be, x, s, sp))
				out, err := be.Download(x)
				require.NoError(t, err)
				return out
			}
			require.NoError(t, u.UseAt("whole", nil, view(u.Blob.Data)))
			want := run(nil)

			for _, c := range []int{1, ff / 2, ff - 1, ff} {
				t.Run(fmt.Sprintf("%s/rows=%d/cpu=%d", eng.name, rows, c), func(t *testing.T) {
					sp := &models.Split{CPU: c, Whole: c == ff, Backend: engine, Host: host,
						Ready: func() error { return nil }, Join: func(fn func() error) error { return fn() }}
					errc := make(chan error, 1)
					sp.Offload = func(task func(func()) error) error {
						go func() { errc <- task(func() {}) }()
						return nil
					}
					if !sp.Whole {
						entries, rects, size, err := u.Share(c)
						require.NoError(t, err)
						slot, err := weights.AlignedAlloc(size)
						require.NoError(t, err)
						for _, r := range rects {
							for row := range r.Height {
								src, dst := r.SrcOffset+row*r.SrcPitch, r.DstOffset+row*r.DstPitch
								copy(slot[dst:dst+r.Width], u.Blob.Data[src:src+r.Width])
							}
						}
						require.NoError(t, u.UseAt(fmt.Sprintf("share %d", c), entries, view(slot)))
					}
					got := run(sp)
					require.NoError(t, <-errc)
					diff, moved := 0.0, 0.0
					for i := range want {
						diff = max(diff, math.Abs(float64(got[i]-want[i])))
						moved = max(moved, math.Abs(float64(want[i]-in[i])))
					}
					require.Positive(t, moved, "the MLP changes x")
					t.Logf("largest difference %.3g of the MLP's largest output %.3g (%.2g)", diff, moved, diff/moved)
					assert.LessOrEqual(t, diff/moved, eng.tol, "split result vs whole, as a share of the MLP's largest output")
				})
			}
			s.Free(be)
		}
		require.NoError(t, engine.Close())
	}
}
