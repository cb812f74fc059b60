package cuda

import (
	"errors"
	"fmt"
	"sync/atomic"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// Backend is the CUDA implementation of backend.Backend on one GPU.
//
// Threading: each method runs one closure that does all of its CUDA calls,
// under a mutex, on the calling goroutine with its OS thread locked and the
// device's context made current there first (an op's kernels are queued,
// not waited for: Sync and Download wait). Like every backend it serves
// one goroutine at a time; Usage, Device and Kernels may be called
// concurrently.
type Backend struct {
	th     *thread
	g      *gpu       // only on th
	mem    *allocator // its methods lock
	info   DeviceInfo
	kinfo  KernelInfo
	exact  bool // WithExactAttention
	closed atomic.Bool
}

var _ backend.Backend = (*Backend)(nil)

// New opens the GPU: it loads the driver, cuBLAS and NVRTC, retains the
// device's primary context, compiles or loads the kernels, and starts the
// budget with the memory those take. Close releases everything.
func New(opts ...Option) (*Backend, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	b := &Backend{th: newThread()}
	err := b.th.do(func() (err error) {
		b.g, err = openGPU(o)
		return err
	})
	if err != nil {
		b.th.stop()
		return nil, err
	}
	b.mem, b.info, b.kinfo, b.exact = b.g.mem, b.g.info, b.g.kinfo, o.exactAttention
	g := b.g
	b.th.setBind(func() error { return g.drv.SetCurrent(g.ctx) })
	return b, nil
}

// Available says, in one line, why CUDA cannot be used here (no driver,
// no GPU, no cuBLAS or NVRTC), or returns nil.
func Available() error {
	d, err := driver.OpenDriver()
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Init(); err != nil {
		return fmt.Errorf("cuda: the NVIDIA driver did not initialize: %w", err)
	}
	if n, err := d.DeviceCount(); err != nil {
		return fmt.Errorf("cuda: counting devices: %w", err)
	} else if n == 0 {
		return errNoDevice
	}
	blas, err := driver.OpenBLAS()
	if err != nil {
		return err
	}
	blas.Close()
	rtc, err := driver.OpenNVRTC()
	if err != nil {
		return err
	}
	rtc.Close()
	return nil
}

// run executes fn with the backend's context current (see thread). A
// bf16 twin that the op before left (gpu.twin) is offered to fn and to no
// later op.
func (b *Backend) run(fn func(g *gpu) error) error {
	if b.closed.Load() {
		return ErrClosed
	}
	return b.th.do(func() error {
		g := b.g
		g.twinIn, g.twinOut = g.twinOut, twin{}
		return fn(g)
	})
}

// Name returns "cuda".
func (b *Backend) Name() string { return "cuda" }

// Device describes the GPU and the libraries in use.
func (b *Backend) Device() DeviceInfo { return b.info }

// Kernels says how the kernels were obtained (compiled or cached).
func (b *Backend) Kernels() KernelInfo { return b.kinfo }

// Usage reports the device memory counted against the budget, per
// purpose, with peaks.
func (b *Backend) Usage() Report { return b.mem.report() }

// ResetPeak starts a new peak of the device memory in use at the bytes in
// use now (backend.MemoryPeak).
func (b *Backend) ResetPeak() { b.mem.resetPeak() }

// PeakBytes is the most device memory counted at once since ResetPeak
// (backend.MemoryPeak).
func (b *Backend) PeakBytes() int64 { return b.mem.peakBytes() }

var _ backend.MemoryPeak = (*Backend)(nil)

// Close waits for queued work, frees every tensor still allocated and
// releases the GPU. Every later call returns ErrClosed; closing twice is
// harmless.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	err := b.th.do(func() error { return b.g.close() })
	b.th.stop()
	return err
}

// Sync waits until all queued work is done. It reports errors of that
// work and of earlier Free calls.
func (b *Backend) Sync() error {
	return b.run(func(g *gpu) error {
		if err := g.inCapture("sync"); err != nil {
			return err
		}
		err := g.drv.StreamSynchronize(g.stream)
		if err != nil {
			err = fmt.Errorf("cuda: sync: %w", err)
		} else {
			g.stage.idle() // every staged copy has run
		}
		d := g.deferred
		g.deferred = nil
		return errors.Join(d, err)
	})
}

// Alloc returns a zeroed F32, F16 or BF16 tensor, counted under purpose;
// or an I32 one, which only UploadI32, CopyRowsAt and AttentionAt read
// (device positions).
func (b *Backend) Alloc(purpose string, dt tensor.DType, shape ...int) (backend.Tensor, error) {
	if dt != tensor.I32 {
		if err := checkFloat("alloc", dt); err != nil {
			return nil, err
		}
	}
	n, err := checkShape("alloc", shape)
	if err != nil {
		return nil, err
	}
	t := &Tensor{b: b, dt: dt, shape: append([]int(nil), shape...), root: true}
	err = b.run(func(g *gpu) error {
		if err := g.inCapture("alloc"); err != nil {
			return err
		}
		blk, err := g.mem.alloc(purpose, n*int64(dt.Size()))
		if err != nil {
			return err
		}
		t.blk, t.ptr = blk, blk.ptr
		if blk.bytes == 0 {
			return nil
		}
		if err := g.drv.MemsetD8Async(blk.ptr, 0, blk.bytes, g.stream); err != nil {
			return errors.Join(fmt.Errorf("cuda: alloc: %w", err), g.mem.free(blk))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// CopiesWeights reports that Weight copies its bytes to the device: the
// caller may drop them once Weight returns.
func (b *Backend) CopiesWeights() bool { return true }

// Weight copies little-endian host bytes into a new read-only tensor,
// counted under purpose. The copy is complete when Weight returns, so data
// may be reused.
func (b *Backend) Weight(purpose string, dt tensor.DType, shape []int, data []byte) (backend.Tensor, error) {
	if err := checkFloat("weight", dt); err != nil {
		return nil, err
	}
	n, err := checkShape("weight", shape)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != n*int64(dt.Size()) {
		return nil, fmt.Errorf("cuda: weight: %v%v needs %d bytes, got %d", dt, shape, n*int64(dt.Size()), len(data))
	}
	t := &Tensor{b: b, dt: dt, shape: append([]int(nil), shape...), root: true, readOnly: true}
	err = b.run(func(g *gpu) error {
		if err := g.inCapture("weight"); err != nil {
			return err
		}
		blk, err := g.mem.alloc(purpose, int64(len(data)))
		if err != nil {
			return err
		}
		t.blk, t.ptr = blk, blk.ptr
		if err := g.drv.CopyHtoD(blk.ptr, data, g.stream); err != nil {
			return errors.Join(fmt.Errorf("cuda: weight: %w", err), g.mem.free(blk))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Free releases a tensor from Alloc or Weight once the work queued before
// it has run. Freeing a view, a freed tensor or another backend's tensor
// does nothing. Errors surface at the next Sync. Inside Capture it frees
// nothing and makes the capture fail.
func (b *Backend) Free(bt backend.Tensor) {
	t, ok := bt.(*Tensor)
	if !ok || t == nil || t.b != b || !t.root || !t.blk.live {
		return
	}
	_ = b.run(func(g *gpu) error {
		if g.inCapture("free") != nil {
			return nil
		}
		if t.blk.host != nil { // a HostTable: kernels may still read it
			delete(g.hostTables, t.blk)
			g.deferred = errors.Join(g.deferred, g.freeHostTable(t.blk))
			return nil
		}
		// Queued kernels may still use the memory: a block that goes to
		// the allocator's cache is handed only to work queued after them
		// on the stream, and one that goes back to the driver is freed
		// once they have run (allocator.quiesce). Free itself does not
		// wait, unless SetWaitingFree asked it to.
		var err error
		if g.waitingFree {
			if err = g.drv.StreamSynchronize(g.stream); err != nil {
				err = fmt.Errorf("cuda: free: %w", err)
			}
		}
		g.deferred = errors.Join(g.deferred, err, g.mem.free(t.blk))
		return nil
	})
}

// Rows is a view of rows [start, start+n) of the first dimension.
func (b *Backend) Rows(bt backend.Tensor, start, n int) (backend.Tensor, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	t, err := b.arg("rows", "tensor", bt)
	if err != nil {
		return nil, err
	}
	if len(t.shape) == 0 {
		return nil, fmt.Errorf("cuda: rows: %v is a scalar", t)
	}
	if start < 0 || n < 0 || start+n > t.shape[0] {
		return nil, fmt.Errorf("cuda: rows: [%d, %d) outside the %d rows of %v", start, start+n, t.shape[0], t)
	}
	rowBytes := int64(tensor.NumElements(t.shape[1:])) * int64(t.dt.Size())
	v := *t
	v.root = false
	v.ptr = t.ptr + driver.DevicePtr(int64(start)*rowBytes)
	v.shape = append([]int{n}, t.shape[1:]...)
	return &v, nil
}

// Reshape is a view with another shape of the same element count.
func (b *Backend) Reshape(bt backend.Tensor, shape ...int) (backend.Tensor, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	t, err := b.arg("reshape", "tensor", bt)
	if err != nil {
		return nil, err
	}
	n, err := checkShape("reshape", shape)
	if err != nil {
		return nil, err
	}
	if n != t.elements() {
		return nil, fmt.Errorf("cuda: reshape: %v has %d elements, shape %v has %d", t, t.elements(), shape, n)
	}
	v := *t
	v.root = false
	v.shape = append([]int(nil), shape...)
	return &v, nil
}
