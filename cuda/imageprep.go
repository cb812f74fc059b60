package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"vlanode/backend"
	"vlanode/cuda/driver"
)

// This file is backend.ImagePrep: camera images resized, normalized and
// cut into a vision model's pixel values on the GPU (kernels/imageprep.cu),
// from RGB bytes that the host decodes into a stage's page-locked memory.

// PurposeImages counts the device memory of image stages: one image and
// its horizontally resized copy at a time, and the filter tables.
const PurposeImages = "images"

// maxStageParams bounds the filters and tables a stage keeps on the device
// (a node sees a few camera sizes); past it they are all dropped, before
// an image's are looked up.
const maxStageParams = 64

// imageStage is a backend.ImageStage.
type imageStage struct {
	b      *Backend
	host   unsafe.Pointer // page-locked, size bytes
	size   int
	img    *block         // one image's bytes on the device
	mid    *block         // its horizontal pass
	params map[any]*block // device copies of filters and tables, by the host's pointer
	ev     driver.Event   // recorded after the last copy from host
	closed bool           // Close was called
}

var _ backend.ImagePrep = (*Backend)(nil)

// NewImageStage allocates bytes of page-locked host memory for decoded
// images (backend.ImagePrep). The stage's device memory is counted under
// PurposeImages.
func (b *Backend) NewImageStage(bytes int) (backend.ImageStage, error) {
	if bytes < 1 {
		return nil, fmt.Errorf("cuda: image stage of %d bytes", bytes)
	}
	s := &imageStage{b: b, size: bytes, params: map[any]*block{}}
	err := b.run(func(g *gpu) error {
		if err := g.inCapture("image stage"); err != nil {
			return err
		}
		p, err := g.drv.HostAlloc(int64(bytes), 0)
		if err != nil {
			return fmt.Errorf("cuda: image stage of %s: %w", formatBytes(int64(bytes)), err)
		}
		if s.ev, err = g.drv.EventCreate(driver.EventDisableTiming); err != nil {
			return fmt.Errorf("cuda: image stage: %w", errors.Join(err, g.drv.FreeHost(p)))
		}
		s.host = p
		if g.stages == nil {
			g.stages = map[*imageStage]struct{}{}
		}
		g.stages[s] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Host returns the stage's page-locked memory (nil once closed).
func (s *imageStage) Host() []byte {
	if s.closed {
		return nil
	}
	return unsafe.Slice((*byte)(s.host), s.size)
}

// Ready waits until the copies queued so far have read the host memory.
func (s *imageStage) Ready() error {
	if s.closed {
		return fmt.Errorf("cuda: image stage: closed")
	}
	return s.b.run(func(g *gpu) error {
		if err := g.drv.EventSynchronize(s.ev); err != nil {
			return fmt.Errorf("cuda: image stage: %w", err)
		}
		return nil
	})
}

// Close waits for the queued work, then frees the stage's memory.
func (s *imageStage) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.b.run(func(g *gpu) error {
		delete(g.stages, s)
		return g.closeStage(s)
	})
}

// closeStage releases s: the host memory once the stream has run, the
// device blocks to the allocator.
func (g *gpu) closeStage(s *imageStage) error {
	errs := []error{g.drv.StreamSynchronize(g.stream), g.drv.FreeHost(s.host), g.drv.EventDestroy(s.ev)}
	for _, blk := range []*block{s.img, s.mid} {
		if blk != nil {
			errs = append(errs, g.mem.free(blk))
		}
	}
	errs = append(errs, g.dropParams(s))
	s.host, s.img, s.mid = nil, nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cuda: closing an image stage: %w", err)
	}
	return nil
}

// dropParams frees s's device copies of filters and tables (the work
// queued before reads them first: a freed block goes to later work).
func (g *gpu) dropParams(s *imageStage) error {
	var errs []error
	for k, blk := range s.params {
		errs = append(errs, g.mem.free(blk))
		delete(s.params, k)
	}
	return errors.Join(errs...)
}

// Patches queues the copy of im's bytes at Host()[off:] to the device, its
// resize (vla_resize_h, then the vertical filter inside vla_patchify),
// normalization and patch layout into rows [im.Row, im.Row +
// im.Patches()) of dst (backend.ImageStage).
func (s *imageStage) Patches(dst backend.Tensor, off int, im backend.PatchImage) error {
	const op = "image patches"
	if s.closed {
		return fmt.Errorf("cuda: %s: stage closed", op)
	}
	d, err := s.b.dstArg(op, "dst", dst)
	if err != nil {
		return err
	}
	if err := im.Check(); err != nil {
		return fmt.Errorf("cuda: %s: %w", op, err)
	}
	rows, cols := backend.Matrix(d)
	n := im.Bytes()
	outW, outH := im.OutWidth(), im.OutHeight()
	switch {
	case cols != im.RowSize():
		return fmt.Errorf("cuda: %s: dst %v for rows of %d values", op, d, im.RowSize())
	case im.Row+im.Patches() > rows:
		return fmt.Errorf("cuda: %s: rows [%d, %d) outside dst %v", op, im.Row, im.Row+im.Patches(), d)
	case off < 0 || off > s.size-n:
		return fmt.Errorf("cuda: %s: %d bytes at %d outside the stage's %d", op, n, off, s.size)
	case int64(3)*int64(outW)*int64(max(outH, im.Height)) > math.MaxInt32 || n > math.MaxInt32:
		return fmt.Errorf("cuda: %s: %d×%d image too large", op, im.Width, im.Height)
	}
	return s.b.run(func(g *gpu) error {
		if err := g.inCapture(op); err != nil {
			return err
		}
		if err := g.stageBlock(&s.img, n); err != nil {
			return err
		}
		// Room for this image's three parameters: dropping them all now,
		// not between two lookups, so that none of this call's is freed.
		if len(s.params)+3 > maxStageParams {
			if err := g.dropParams(s); err != nil {
				return err
			}
		}
		src := s.img.ptr
		if im.Horizontal != nil {
			if err := g.stageBlock(&s.mid, 3*outW*im.Height); err != nil {
				return err
			}
		}
		var hp, vp driver.DevicePtr
		var err error
		if im.Horizontal != nil {
			if hp, err = g.stageParam(s, im.Horizontal); err != nil {
				return err
			}
		}
		if im.Vertical != nil {
			if vp, err = g.stageParam(s, im.Vertical); err != nil {
				return err
			}
		}
		lut, err := g.stageParam(s, im.Norm)
		if err != nil {
			return err
		}
		err = g.traced(func() string { return "upload (image)" }, func() error {
			return g.drv.CopyHtoDAsync(s.img.ptr, unsafe.Add(s.host, off), int64(n), g.stream)
		})
		if err == nil {
			err = g.drv.EventRecord(s.ev, g.stream)
		}
		if err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		if f := im.Horizontal; f != nil {
			g.args.Reset()
			g.args.Ptr(s.mid.ptr).Ptr(src)
			filterArgs(g.args, hp, f)
			g.args.I32(int32(im.Width)).I32(int32(outW)).I32(int32(im.Height))
			if err := g.elementwise("resize h", g.k.resizeH, int64(outW)*int64(im.Height)); err != nil {
				return err
			}
			src = s.mid.ptr
		}
		g.args.Reset()
		g.args.Ptr(d.ptr + driver.DevicePtr(int64(im.Row)*int64(cols)*4)).Ptr(src)
		if f := im.Vertical; f != nil {
			filterArgs(g.args, vp, f)
		} else {
			g.args.Ptr(0).Ptr(0).Ptr(0).I32(0).I32(0)
		}
		bgr := int32(0)
		if im.BGR {
			bgr = 1
		}
		g.args.Ptr(lut).I32(bgr).I32(int32(outW)).I32(int32(outH)).
			I32(int32(im.PatchSize)).I32(int32(im.MergeSize)).I32(int32(im.TemporalPatch))
		return g.elementwise("patchify", g.k.patchify, 3*int64(outW)*int64(outH))
	})
}

// filterArgs appends a filter's tables (start, count, weights at p, as
// stageParam laid them out), taps and precision to a launch's arguments.
func filterArgs(a *driver.Args, p driver.DevicePtr, f *backend.ResizeFilter) {
	a.Ptr(p).Ptr(p + driver.DevicePtr(4*f.Out)).Ptr(p + driver.DevicePtr(8*f.Out)).I32(int32(f.Taps)).I32(int32(f.Precision))
}

// stageBlock makes *blk a device block of at least n bytes, replacing a
// smaller one (which the work queued before still reads: a freed block
// goes to later work only).
func (g *gpu) stageBlock(blk **block, n int) error {
	if *blk != nil && (*blk).bytes >= int64(n) {
		return nil
	}
	if *blk != nil {
		if err := g.mem.free(*blk); err != nil {
			return err
		}
		*blk = nil
	}
	b, err := g.mem.alloc(PurposeImages, int64(n))
	if err != nil {
		return err
	}
	*blk = b
	return nil
}

// stageParam returns the device copy of a filter (its starts, counts and
// weights as int32s, one after another) or a normalization table (768
// float32s), uploading it on first use.
func (g *gpu) stageParam(s *imageStage, key any) (driver.DevicePtr, error) {
	if blk := s.params[key]; blk != nil {
		return blk.ptr, nil
	}
	var data []byte
	switch p := key.(type) {
	case *backend.ResizeFilter:
		data = make([]byte, 0, 4*(2*p.Out+len(p.Weights)))
		for _, t := range [][]int32{p.Start, p.Count, p.Weights} {
			for _, v := range t {
				data = binary.LittleEndian.AppendUint32(data, uint32(v))
			}
		}
	case *[3][256]float32:
		data = make([]byte, 0, 3*256*4)
		for c := range p {
			for _, v := range p[c] {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
			}
		}
	default:
		return 0, fmt.Errorf("cuda: image stage: parameter %T", key)
	}
	blk, err := g.mem.alloc(PurposeImages, int64(len(data)))
	if err != nil {
		return 0, err
	}
	buf, err := g.stage.take(g.drv, int64(len(data)))
	if err == nil {
		copy(buf, data)
		err = g.drv.CopyHtoDAsync(blk.ptr, unsafe.Pointer(&buf[0]), int64(len(data)), g.stream)
	}
	if err == nil {
		err = g.stage.queued(g.drv, g.stream)
	}
	if err != nil {
		return 0, fmt.Errorf("cuda: image stage: %w", errors.Join(err, g.mem.free(blk)))
	}
	s.params[key] = blk
	return blk.ptr, nil
}
