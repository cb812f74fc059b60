package cuda

import (
	"fmt"

	"vlanode/cuda/driver"
)

// kernelSet holds the kernels of the module (kernels/*.cu).
type kernelSet struct {
	f32ToBF16, f32ToF16, addBias driver.Function // convert.cu
	add, silu, siluMul, gelu     driver.Function // elementwise.cu
	rmsNorm, layerNorm           driver.Function // norm.cu
	rope, attention, embedding   driver.Function // rope.cu, attention.cu, embedding.cu
}

// kernelEntry names one kernel of the set.
type kernelEntry struct {
	f    *driver.Function
	name string // extern "C" name in kernels/*.cu
}

// entries lists every kernel of k with its name.
func (k *kernelSet) entries() []kernelEntry {
	return []kernelEntry{
		{&k.f32ToBF16, "vla_f32_to_bf16"},
		{&k.f32ToF16, "vla_f32_to_f16"},
		{&k.addBias, "vla_add_bias"},
		{&k.add, "vla_add"},
		{&k.silu, "vla_silu"},
		{&k.siluMul, "vla_silu_mul"},
		{&k.gelu, "vla_gelu"},
		{&k.rmsNorm, "vla_rmsnorm"},
		{&k.layerNorm, "vla_layernorm"},
		{&k.rope, "vla_rope"},
		{&k.attention, "vla_attention"},
		{&k.embedding, "vla_embedding"},
	}
}

// load looks up every kernel in m.
func (k *kernelSet) load(d *driver.Driver, m driver.Module) error {
	for _, e := range k.entries() {
		f, err := d.Function(m, e.name)
		if err != nil {
			return fmt.Errorf("cuda: kernel: %w", err)
		}
		*e.f = f
	}
	return nil
}

// Launch shapes.
const (
	threadsPerBlock = 256     // of elementwise and row kernels
	maxGridBlocks   = 1 << 16 // grid-stride kernels loop past this
)

// elementwiseGrid is the grid of a grid-stride kernel over n items.
func elementwiseGrid(n int64) driver.Dim3 {
	blocks := min((n+threadsPerBlock-1)/threadsPerBlock, maxGridBlocks)
	return driver.Dim3{uint32(max(blocks, 1)), 1, 1}
}

// block1D is a one-dimensional block of t threads.
func block1D(t int) driver.Dim3 { return driver.Dim3{uint32(t), 1, 1} }

// launch queues f on the stream with the parameters in g.args, which the
// caller built after g.args.Reset().
func (g *gpu) launch(name string, f driver.Function, grid, block driver.Dim3, sharedBytes uint32) error {
	if err := g.drv.Launch(f, grid, block, sharedBytes, g.stream, g.args); err != nil {
		return fmt.Errorf("cuda: %s: %w", name, err)
	}
	return nil
}

// elementwise launches a grid-stride kernel over n items.
func (g *gpu) elementwise(name string, f driver.Function, n int64) error {
	return g.launch(name, f, elementwiseGrid(n), block1D(threadsPerBlock), 0)
}
