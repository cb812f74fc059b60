package cuda

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"vlanode/cuda/driver"
	"vlanode/layering"
	"vlanode/weights"
)

// DFBDevice is layering.Device on a Backend: the compute stream is the
// Backend's own stream (where its ops run), copies go on streams of their
// own, events are CUDA events (cuEventRecord, cuStreamWaitEvent), host
// blobs are page-locked with cuMemHostRegister, and DFB slots come from
// the Backend's budgeted allocator under layering.SlotPurpose
// ("dfb-slots").
//
// Like the Backend it serves one goroutine at a time, and none of its
// methods may be called from inside Backend.Capture. It owns every
// stream, event, slot and pin it hands out: Close MUST be called before
// the Backend's Close, and the pinned blobs must stay alive until then.
type DFBDevice struct {
	b       *Backend
	streams []driver.Stream // [0] stands for the Backend's stream (not owned)
	events  []driver.Event
	slots   []*block // DFB slots, homes' arenas and staging buffers
	pinned  map[*weights.Blob]unsafe.Pointer
	// z decodes compressed units (Decoder), made with the first staging
	// buffer.
	z *ZDecoder
}

var _ layering.Device = (*DFBDevice)(nil)

// computeStream is the handle of the Backend's stream.
const computeStream layering.Stream = 0

// NewDFBDevice returns a layering.Device over b.
func (b *Backend) NewDFBDevice() *DFBDevice {
	return &DFBDevice{b: b, streams: []driver.Stream{0}, pinned: map[*weights.Blob]unsafe.Pointer{}}
}

// run runs fn with the context current, refusing inside a capture.
func (d *DFBDevice) run(op string, fn func(g *gpu) error) error {
	return d.b.run(func(g *gpu) error {
		if err := g.inCapture(op); err != nil {
			return err
		}
		return fn(g)
	})
}

// stream resolves a handle; stream 0 is the Backend's.
func (d *DFBDevice) stream(g *gpu, s layering.Stream) (driver.Stream, error) {
	switch {
	case s == computeStream:
		return g.stream, nil
	case s < 0 || int(s) >= len(d.streams):
		return 0, fmt.Errorf("cuda: dfb: no stream %d", s)
	}
	return d.streams[s], nil
}

// event resolves a handle.
func (d *DFBDevice) event(e layering.Event) (driver.Event, error) {
	if e < 0 || int(e) >= len(d.events) {
		return 0, fmt.Errorf("cuda: dfb: no event %d", e)
	}
	return d.events[e], nil
}

// slot resolves a handle.
func (d *DFBDevice) slot(s layering.Slot) (*block, error) {
	if s < 0 || int(s) >= len(d.slots) || !d.slots[s].live {
		return nil, fmt.Errorf("cuda: dfb: no slot %d", s)
	}
	return d.slots[s], nil
}

// ComputeStream is the Backend's stream.
func (d *DFBDevice) ComputeStream() layering.Stream { return computeStream }

// NewStream makes a non-blocking stream (cuStreamCreate).
func (d *DFBDevice) NewStream(name string) (layering.Stream, error) {
	err := d.run("dfb stream", func(g *gpu) error {
		s, err := g.drv.StreamCreate(driver.StreamNonBlocking)
		if err != nil {
			return fmt.Errorf("cuda: dfb: stream %s: %w", name, err)
		}
		d.streams = append(d.streams, s)
		return nil
	})
	if err != nil {
		return -1, err
	}
	return layering.Stream(len(d.streams) - 1), nil
}

// NewEvent makes a timing event (cuEventCreate).
func (d *DFBDevice) NewEvent(name string) (layering.Event, error) {
	err := d.run("dfb event", func(g *gpu) error {
		e, err := g.drv.EventCreate(driver.EventDefault)
		if err != nil {
			return fmt.Errorf("cuda: dfb: event %s: %w", name, err)
		}
		d.events = append(d.events, e)
		return nil
	})
	if err != nil {
		return -1, err
	}
	return layering.Event(len(d.events) - 1), nil
}

// Record is cuEventRecord.
func (d *DFBDevice) Record(e layering.Event, s layering.Stream) error {
	return d.run("dfb record", func(g *gpu) error {
		ev, err := d.event(e)
		if err != nil {
			return err
		}
		st, err := d.stream(g, s)
		if err != nil {
			return err
		}
		return g.drv.EventRecord(ev, st)
	})
}

// Wait is cuStreamWaitEvent.
func (d *DFBDevice) Wait(s layering.Stream, e layering.Event) error {
	return d.run("dfb wait", func(g *gpu) error {
		ev, err := d.event(e)
		if err != nil {
			return err
		}
		st, err := d.stream(g, s)
		if err != nil {
			return err
		}
		return g.drv.StreamWaitEvent(st, ev)
	})
}

// AllocSlot allocates a slot from the budget under layering.SlotPurpose;
// cuMemAlloc's blocks are 256-byte aligned at least (weights.Align).
func (d *DFBDevice) AllocSlot(bytes int64) (layering.Slot, error) {
	if bytes <= 0 {
		return layering.NoSlot, fmt.Errorf("cuda: dfb: slot of %d bytes", bytes)
	}
	return d.allocSlot("dfb slot", layering.SlotPurpose, bytes)
}

// allocSlot allocates bytes from the budget under purpose as the next
// slot (a DFB slot, an arena of homes, a staging buffer).
func (d *DFBDevice) allocSlot(op, purpose string, bytes int64) (layering.Slot, error) {
	err := d.run(op, func(g *gpu) error {
		blk, err := g.mem.alloc(purpose, bytes)
		if err != nil {
			return err
		}
		d.slots = append(d.slots, blk)
		return nil
	})
	if err != nil {
		return layering.NoSlot, err
	}
	return layering.Slot(len(d.slots) - 1), nil
}

// FreeSlot returns a slot's block to the budget, once the streams have
// run what they hold.
func (d *DFBDevice) FreeSlot(s layering.Slot) error {
	if err := d.Synchronize(); err != nil {
		return err
	}
	return d.run("dfb free slot", func(g *gpu) error {
		blk, err := d.slot(s)
		if err != nil {
			return err
		}
		return g.mem.freeNow(blk) // the copy stream wrote it: no reuse by the compute stream's tensors
	})
}

// PinHost page-locks b's bytes with cuMemHostRegister. b.Data must not be
// Go heap memory (the driver keeps using it): pack host blobs with
// HostAlloc as their weights.Allocator.
func (d *DFBDevice) PinHost(b *weights.Blob) error {
	if len(b.Data) == 0 {
		return fmt.Errorf("cuda: dfb: pinning blob %s: no bytes", b.Name)
	}
	if _, ok := d.pinned[b]; ok {
		return fmt.Errorf("cuda: dfb: blob %s pinned twice", b.Name)
	}
	p := unsafe.Pointer(unsafe.SliceData(b.Data))
	return d.run("dfb pin", func(g *gpu) error {
		if err := g.drv.HostRegister(p, int64(len(b.Data)), driver.HostRegisterPortable); err != nil {
			return fmt.Errorf("cuda: dfb: pinning blob %s: %w", b.Name, err)
		}
		d.pinned[b] = p
		return nil
	})
}

// CopyAsync is cuMemcpyHtoDAsync of the whole pinned blob into the slot.
func (d *DFBDevice) CopyAsync(dst layering.Slot, src *weights.Blob, s layering.Stream) error {
	p, ok := d.pinned[src]
	if !ok {
		return fmt.Errorf("cuda: dfb: blob %s is not pinned: the copy would not be asynchronous", src.Name)
	}
	return d.run("dfb copy", func(g *gpu) error {
		blk, err := d.slot(dst)
		if err != nil {
			return err
		}
		if src.Size() > blk.bytes {
			return fmt.Errorf("cuda: dfb: blob %s (%d bytes) does not fit slot %d (%d bytes)", src.Name, src.Size(), dst, blk.bytes)
		}
		st, err := d.stream(g, s)
		if err != nil {
			return err
		}
		return g.drv.CopyHtoDAsync(blk.ptr, p, src.Size(), st)
	})
}

// CopyRectAsync queues a copy of rectangle r of the pinned blob src into
// slot dst on s: r's source is the blob, its destination the slot (see
// weights.Rect). A contiguous rectangle is one cuMemcpyHtoDAsync, any
// other one cuMemcpy2DAsync (whose pitches the driver bounds by
// driver.AttrMaxPitch).
func (d *DFBDevice) CopyRectAsync(dst layering.Slot, src *weights.Blob, r weights.Rect, s layering.Stream) error {
	p, ok := d.pinned[src]
	if !ok {
		return fmt.Errorf("cuda: dfb: blob %s is not pinned: the copy would not be asynchronous", src.Name)
	}
	return d.run("dfb copy rect", func(g *gpu) error {
		blk, err := d.slot(dst)
		if err != nil {
			return err
		}
		if err := r.Check(src.Size(), blk.bytes); err != nil {
			return fmt.Errorf("cuda: dfb: blob %s into slot %d: %w", src.Name, dst, err)
		}
		st, err := d.stream(g, s)
		if err != nil {
			return err
		}
		from, to := unsafe.Add(p, r.SrcOffset), blk.ptr+driver.DevicePtr(r.DstOffset)
		if r.Contiguous() {
			err = g.drv.CopyHtoDAsync(to, from, r.Bytes(), st)
		} else {
			err = g.drv.CopyHtoD2DAsync(to, r.DstPitch, from, r.SrcPitch, r.Width, r.Height, st)
		}
		if err != nil {
			return fmt.Errorf("cuda: dfb: blob %s into slot %d: %w", src.Name, dst, err)
		}
		return nil
	})
}

// Launch calls c.Run, which queues Backend ops on the Backend's stream;
// only the compute stream runs computes.
func (d *DFBDevice) Launch(s layering.Stream, c layering.Compute) error {
	if s != computeStream {
		return fmt.Errorf("cuda: dfb: unit %s launched on stream %d: the Backend's ops run on its own stream", c.Unit, s)
	}
	if c.Run == nil {
		return nil
	}
	return c.Run(c.Slot)
}

// Synchronize waits for the compute stream and every stream made here.
func (d *DFBDevice) Synchronize() error {
	return d.run("dfb synchronize", func(g *gpu) error {
		var errs []error
		for i := range d.streams {
			st, _ := d.stream(g, layering.Stream(i))
			if err := g.drv.StreamSynchronize(st); err != nil {
				errs = append(errs, fmt.Errorf("cuda: dfb: synchronize stream %d: %w", i, err))
			}
		}
		return errors.Join(errs...)
	})
}

// Elapsed is cuEventElapsedTime between two reached events.
func (d *DFBDevice) Elapsed(from, to layering.Event) (float64, error) {
	var ms float32
	err := d.run("dfb elapsed", func(g *gpu) error {
		a, err := d.event(from)
		if err != nil {
			return err
		}
		b, err := d.event(to)
		if err != nil {
			return err
		}
		ms, err = g.drv.EventElapsed(a, b)
		return err
	})
	return float64(ms), err
}

// SlotPtr is the device address of a slot, for code that binds weights
// inside it (WeightAt).
func (d *DFBDevice) SlotPtr(s layering.Slot) (driver.DevicePtr, error) {
	blk, err := d.slot(s)
	if err != nil {
		return 0, err
	}
	return blk.ptr, nil
}

// Close waits for the queued work and releases every stream, event, slot
// and pin of d. Later calls fail.
func (d *DFBDevice) Close() error {
	err := d.Synchronize()
	if d.z != nil {
		err = errors.Join(err, d.z.Close())
		d.z = nil
	}
	return errors.Join(err, d.b.run(func(g *gpu) error {
		var errs []error
		for _, e := range d.events {
			errs = append(errs, g.drv.EventDestroy(e))
		}
		for _, s := range d.streams[1:] {
			errs = append(errs, g.drv.StreamDestroy(s))
		}
		for _, blk := range d.slots {
			if blk.live {
				errs = append(errs, g.mem.freeNow(blk))
			}
		}
		for b, p := range d.pinned {
			if err := g.drv.HostUnregister(p); err != nil {
				errs = append(errs, fmt.Errorf("cuda: dfb: unpinning blob %s: %w", b.Name, err))
			}
		}
		d.events, d.streams, d.slots, d.pinned = nil, nil, nil, map[*weights.Blob]unsafe.Pointer{}
		return errors.Join(errs...)
	}))
}

// HostAlloc is a weights.Allocator for blobs that PinHost may register:
// anonymous mmap memory, page-aligned, outside the Go heap. It MUST be
// released with HostFree, after the DFBDevice that pinned it is closed.
// It asks for transparent huge pages (MADV_HUGEPAGE, where the kernel
// allows them): the CPU engine streams these blobs, and 2 MiB pages spare
// it a TLB miss every 4 KiB.
func HostAlloc(size int64) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("cuda: host allocation of %d bytes", size)
	}
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("cuda: mmap of %d bytes: %w", size, err)
	}
	// Advice only: a kernel without THP (or with it off) refuses it, and
	// the memory works as before.
	_ = syscall.Madvise(b, unix.MADV_HUGEPAGE)
	return b, nil
}

// HostFree releases memory from HostAlloc.
func HostFree(b []byte) error {
	if err := syscall.Munmap(b); err != nil {
		return fmt.Errorf("cuda: munmap: %w", err)
	}
	return nil
}
