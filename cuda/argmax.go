package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"vlanode/backend"
	"vlanode/cuda/driver"
)

// The shape of vla_argmax (kernels/elementwise.cu): VLA_ARGMAX_THREADS a
// block, at most VLA_ARGMAX_BLOCKS blocks, each over a chunk of at least
// argmaxChunk values; its buffer holds the index, the blocks' counter and
// a (value, index) pair a block.
const (
	argmaxThreads = 256
	argmaxBlocks  = 128
	argmaxChunk   = 4 * argmaxThreads
	argmaxBytes   = 8 + 8*argmaxBlocks
)

// Argmax is sample.Greedy of x's values (F32, one row or any shape, taken
// flat) with those at [maskLo, maskHi] taken as -Inf (see
// backend.Argmaxer): vla_argmax over up to argmaxBlocks blocks, then the
// index's 4 bytes brought back instead of the values (a decode step's
// 155,704 logits are 623 KB). It waits for the GPU.
func (b *Backend) Argmax(x backend.Tensor, maskLo, maskHi int) (int, error) {
	xt, err := b.f32Arg("argmax", "x", x)
	if err != nil {
		return 0, err
	}
	n := xt.elements()
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("cuda: argmax: %d values are too many", n)
	}
	if n == 0 {
		return -1, nil
	}
	lo, hi := argmaxMask(maskLo, maskHi, int(n))
	var id int32
	err = b.run(func(g *gpu) error {
		if err := g.inCapture("argmax"); err != nil {
			return err
		}
		out, err := g.argmaxBuffer()
		if err != nil {
			return fmt.Errorf("cuda: argmax: %w", err)
		}
		if err := g.argmax(out, xt, lo, hi); err != nil {
			return err
		}
		buf, err := g.fetch("argmax", out, 4)
		if err == nil {
			id = *(*int32)(unsafe.Pointer(&buf[0]))
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(id), nil
}

// argmax queues vla_argmax over x's values (at most MaxInt32 of them, at
// least one) with [lo, hi] masked, the index to idx.
func (g *gpu) argmax(idx driver.DevicePtr, x *Tensor, lo, hi int32) error {
	out, err := g.argmaxBuffer()
	if err != nil {
		return fmt.Errorf("cuda: argmax: %w", err)
	}
	n := x.elements()
	blocks := min(argmaxBlocks, (n+argmaxChunk-1)/argmaxChunk)
	g.args.Reset()
	g.args.Ptr(out).Ptr(idx).Ptr(x.ptr).I32(int32(n)).I32(lo).I32(hi)
	return g.launch("argmax", g.k.argmax, driver.Dim3{uint32(blocks), 1, 1}, block1D(argmaxThreads), 0)
}

// argmaxBuffer returns vla_argmax's buffer, allocated and zeroed on first
// use (the kernel leaves its counter at zero).
func (g *gpu) argmaxBuffer() (driver.DevicePtr, error) {
	if g.argmaxOut != nil {
		return g.argmaxOut.ptr, nil
	}
	p, err := g.scratch(&g.argmaxOut, argmaxBytes)
	if err != nil {
		return 0, err
	}
	if err := g.drv.MemsetD8Async(p, 0, argmaxBytes, g.stream); err != nil {
		return 0, fmt.Errorf("zeroing the argmax counter: %w", err)
	}
	return p, nil
}

// argmaxMask is the masked range [lo, hi] of Argmax within [0, n), as
// the kernel takes it (int32; lo > hi: none).
func argmaxMask(lo, hi, n int) (int32, int32) {
	lo, hi = max(lo, 0), min(hi, n-1)
	if hi < lo {
		return 0, -1
	}
	return int32(lo), int32(hi)
}

var _ backend.Argmaxer = (*Backend)(nil)
