package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"vlanode/backend"
	"vlanode/cuda/driver"
)

// Upload copies float32 values into an F32 tensor. The values pass through
// the pinned staging buffer, so src may be reused at once and the copy
// runs in order with the queued ops without waiting for them.
func (b *Backend) Upload(dst backend.Tensor, src []float32) error {
	d, err := b.dstArg("upload", "dst", dst)
	if err != nil {
		return err
	}
	if int64(len(src)) != d.elements() {
		return fmt.Errorf("cuda: upload: %d values into %v", len(src), d)
	}
	if len(src) == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		return g.uploadStaged(d, func(buf []byte, lo, hi int64) {
			parallelCopy(unsafe.Slice((*float32)(unsafe.Pointer(&buf[lo])), (hi-lo)/4), src[lo/4:hi/4])
		})
	})
}

// uploadPiece is the bytes of one piece of a large upload: the copy of a
// piece into pinned memory runs while the DMA of the one before does, so
// that an upload of tens of megabytes (a batch of images, 70 MB for the
// standard workload) takes about the longer of the two, not their sum.
const uploadPiece = 16 << 20

// uploadStaged fills the staging buffer with d's bytes, piece by piece
// (fill writes buf[lo:hi], a multiple of 4 bytes), and queues each piece's
// copy into d as soon as it is filled.
func (g *gpu) uploadStaged(d *Tensor, fill func(buf []byte, lo, hi int64)) error {
	if err := g.inCapture("upload"); err != nil {
		return err
	}
	n := d.bytes()
	buf, err := g.stage.take(g.drv, n)
	if err != nil {
		return fmt.Errorf("cuda: upload: %w", err)
	}
	for lo := int64(0); lo < n; lo += uploadPiece {
		hi := min(lo+uploadPiece, n)
		fill(buf, lo, hi)
		err = g.traced(func() string { return "upload (staged)" }, func() error {
			return g.drv.CopyHtoDAsync(d.ptr+driver.DevicePtr(lo), unsafe.Pointer(&buf[lo]), hi-lo, g.stream)
		})
		if err != nil {
			return fmt.Errorf("cuda: upload: %w", err)
		}
	}
	return g.stage.queued(g.drv, g.stream)
}

// Download waits for the queued work and copies an F32 tensor to the host.
func (b *Backend) Download(src backend.Tensor) ([]float32, error) {
	s, err := b.f32Arg("download", "src", src)
	if err != nil {
		return nil, err
	}
	out := make([]float32, s.elements())
	if len(out) == 0 {
		return out, nil
	}
	err = b.run(func(g *gpu) error {
		buf, err := g.fetch("download", s.ptr, s.bytes())
		if err == nil {
			copy(out, unsafe.Slice((*float32)(unsafe.Pointer(&buf[0])), len(out)))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fetch waits for the queued work and copies n bytes at p to the staging
// buffer, whose bytes it returns: valid until the next transfer.
func (g *gpu) fetch(op string, p driver.DevicePtr, n int64) ([]byte, error) {
	if err := g.inCapture(op); err != nil {
		return nil, err
	}
	buf, err := g.stage.take(g.drv, n)
	if err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", op, err)
	}
	if err := g.drv.CopyDtoHAsync(unsafe.Pointer(&buf[0]), p, n, g.stream); err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", op, err)
	}
	if err := g.drv.StreamSynchronize(g.stream); err != nil {
		return nil, fmt.Errorf("cuda: %s: %w", op, err)
	}
	g.stage.idle()
	return buf, nil
}

// parallelCopy copies src into dst (equal lengths) on every core when it
// is large: one core's memcpy moves a few GB/s, and a batch of images is
// tens of megabytes.
func parallelCopy(dst, src []float32) { parallelCopyOf(dst, src, 1<<18) }

// parallelCopyBytes is parallelCopy of bytes.
func parallelCopyBytes(dst, src []byte) { parallelCopyOf(dst, src, 1<<20) }

// parallelCopyOf copies src into dst, chunk elements a goroutine at least.
func parallelCopyOf[E any](dst, src []E, chunk int) {
	workers := min(runtime.GOMAXPROCS(0), len(src)/chunk)
	if workers <= 1 {
		copy(dst, src)
		return
	}
	per := (len(src) + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < len(src); lo += per {
		hi := min(lo+per, len(src))
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	wg.Wait()
}
