package qwen3_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/cpu"
	"vlanode/cpu/kern"
	"vlanode/cuda"
	"vlanode/cuda/cudatest"
	"vlanode/layering"
	"vlanode/models/layered"
	"vlanode/models/qwen3"
	"vlanode/residency"
	"vlanode/safetensors"
)

// TestCUDALayeredGreedyMatchesTransformers is
// TestLayeredGreedyMatchesTransformers on the GPU: cuda.DFBDevice's slots
// (pinned host blobs, copies on a copy stream), the CPU engine on the
// kernel pool, every unit streamed with its MLP and LM head blocks on the
// GPU, on the CPU or split. The greedy ids equal transformers', the
// logits are within the CUDA tolerance (a fraction of the largest logit),
// each plan gives the same bits twice, and the GPU-only plan gives the
// bits of the same backend with every unit resident.
func TestCUDALayeredGreedyMatchesTransformers(t *testing.T) {
	cb := cudatest.Open(t)
	pool, err := kern.NewPool(kern.Options{Threads: 4})
	require.NoError(t, err)
	defer pool.Close()
	engine, err := cpu.New(cpu.WithThreads(2), cpu.WithKernels(pool))
	require.NoError(t, err)
	defer engine.Close()
	for _, name := range referenceCases(t) {
		c := newLayeredCase(t, name)
		scale := 0.0
		for _, v := range c.steps {
			scale = max(scale, float64(max(v, -v)))
		}
		tol := gpuScaleTol * scale
		run := func(plan *residency.Plan) *qwen3.Generation {
			dev := cb.NewDFBDevice()
			var blobs [][]byte
			lay := &layered.Config{Plan: plan, Mode: layering.Pipelined, Device: dev, View: dev.WeightAt, CPU: engine,
				HostAlloc: func(n int64) ([]byte, error) {
					b, err := cuda.HostAlloc(n)
					if err == nil {
						blobs = append(blobs, b)
					}
					return b, err
				}}
			ck, err := safetensors.Open(c.dir)
			require.NoError(t, err)
			defer ck.Close()
			m, err := qwen3.LoadWith(cb, c.dir, ck, qwen3.LoadOptions{Layering: lay})
			require.NoError(t, err)
			defer func() {
				m.Close()
				require.NoError(t, dev.Close())
				for _, b := range blobs {
					require.NoError(t, cuda.HostFree(b))
				}
			}()
			return c.generate(t, m, tol, 0)
		}
		t.Run(name, func(t *testing.T) {
			resident := run(c.planned)
			require.Equal(t, resident.Logits, run(streamAll(c.planned, residency.GPUOnly)).Logits, "GPU-only: the resident plan's bits")
			for _, kind := range []residency.Kind{residency.Static, residency.Dynamic} {
				g := run(streamAll(c.planned, kind))
				require.NotNil(t, g.Layers, kind)
				require.NotEmpty(t, g.Layers.CPUTasks, "%s: the CPU computed shares", kind)
			}
		})
	}
}

// TestCUDAReplan is TestReplanGreedyMatchesTransformers on the GPU: one
// load, then plan after plan on a new cuda.DFBDevice each (the last one
// closed first), the blobs pinned once: transformers' ids every time, the
// resident plan's bits from the GPU-only streamed plan, the Dynamic
// plan's bits the same before and after the others.
func TestCUDAReplan(t *testing.T) {
	cb := cudatest.Open(t)
	pool, err := kern.NewPool(kern.Options{Threads: 4})
	require.NoError(t, err)
	defer pool.Close()
	engine, err := cpu.New(cpu.WithThreads(2), cpu.WithKernels(pool))
	require.NoError(t, err)
	defer engine.Close()
	c := newLayeredCase(t, referenceCases(t)[0])
	scale := 0.0
	for _, v := range c.steps {
		scale = max(scale, float64(max(v, -v)))
	}
	tol := gpuScaleTol * scale
	var blobs [][]byte
	defer func() {
		for _, b := range blobs {
			require.NoError(t, cuda.HostFree(b))
		}
	}()
	var dev *cuda.DFBDevice
	config := func(plan *residency.Plan) *layered.Config {
		if dev != nil {
			require.NoError(t, dev.Close())
		}
		dev = cb.NewDFBDevice()
		return &layered.Config{Plan: plan, Mode: layering.Pipelined, Device: dev, View: dev.WeightAt, CPU: engine, Replaceable: true,
			HostAlloc: func(n int64) ([]byte, error) {
				b, err := cuda.HostAlloc(n)
				if err == nil {
					blobs = append(blobs, b)
				}
				return b, err
			}}
	}
	ck, err := safetensors.Open(c.dir)
	require.NoError(t, err)
	defer ck.Close()
	m, err := qwen3.LoadWith(cb, c.dir, ck, qwen3.LoadOptions{Layering: config(streamAll(c.planned, residency.Dynamic))})
	require.NoError(t, err)
	defer func() {
		m.Close()
		require.NoError(t, dev.Close())
	}()
	first := c.generate(t, m, tol, 0)
	require.NoError(t, m.Replan(config(c.planned)))
	resident := c.generate(t, m, tol, 0)
	require.NoError(t, m.Replan(config(streamAll(c.planned, residency.GPUOnly))))
	require.Equal(t, resident.Logits, c.generate(t, m, tol, 0).Logits, "GPU-only streamed: the resident plan's bits")
	require.NoError(t, m.Replan(config(streamAll(c.planned, residency.Static))))
	c.generate(t, m, tol, 0)
	require.NoError(t, m.Replan(config(streamAll(c.planned, residency.Dynamic))))
	require.Equal(t, first.Logits, c.generate(t, m, tol, 0).Logits, "Dynamic: the same bits after the others")
}
