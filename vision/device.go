package vision

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"vlanode/backend"
	"vlanode/msgs"
	"vlanode/tensor"
)

// stageAlign aligns each image in a stage's memory; stageGrain rounds the
// stage's size when it grows.
const (
	stageAlign = 256
	stageGrain = 16 << 20
)

// DeviceProcessor is a Processor whose resize, normalization and patch
// layout run on a device (backend.ImagePrep) where the model runs: the
// frames are checked as ProcessFrames checks them, decoded on the host's
// cores straight into the page-locked memory of the device's image stage,
// and each handed to the device as soon as it is decoded, so that the
// copies and the device's work overlap the decoding of the frames still
// running. The pixel values are the host path's bit for bit: the device
// runs the same integer filters (Resizer) and normalization table.
//
// Like a backend, it serves one goroutine at a time.
type DeviceProcessor struct {
	p     *Processor
	be    backend.Backend
	prep  backend.ImagePrep
	stage backend.ImageStage // nil until the first call
	busy  bool               // the device may still be copying from the stage
}

// DeviceBatch is ProcessFrames's output on a device: every frame's rows in
// order, as Batch.PixelValues holds them on the host, and their grids.
type DeviceBatch struct {
	PixelValues backend.Tensor // [Σ grid.Patches(), RowSize] F32 on the backend; the caller frees it
	Grids       []Grid
}

// OnDevice returns a DeviceProcessor of p on be, or an error if be cannot
// preprocess images (it does not implement backend.ImagePrep).
func (p *Processor) OnDevice(be backend.Backend) (*DeviceProcessor, error) {
	prep, ok := be.(backend.ImagePrep)
	if !ok {
		return nil, fmt.Errorf("vision: the %s backend cannot preprocess images", be.Name())
	}
	return &DeviceProcessor{p: p, be: be, prep: prep}, nil
}

// Close releases the stage's memory once the device is done with it.
func (d *DeviceProcessor) Close() error {
	if d.stage == nil {
		return nil
	}
	err := d.stage.Close()
	d.stage = nil
	return err
}

// slot is where one frame's RGB bytes go in the stage.
type slot struct{ off, n int }

// ProcessFrames checks frames, decodes them and has the device preprocess
// them into a new tensor of pixel values, which the caller frees. The work
// on the device is queued, not waited for: it runs in order with what the
// caller queues after. Errors are those of Processor.ProcessFrames: the
// first failing frame's in order, ErrInvalidFrame for bad input, ctx's
// when it is done; others come from the backend.
func (d *DeviceProcessor) ProcessFrames(ctx context.Context, frames []msgs.Frame) (*DeviceBatch, error) {
	p := d.p
	grids, offsets, err := p.layout(nil, frames)
	if err != nil {
		return nil, err
	}
	rows := offsets[len(frames)] / p.RowSize()
	slots := make([]slot, len(frames))
	need := 0
	for i := range frames {
		n := 3 * frames[i].Width * frames[i].Height
		slots[i] = slot{off: need, n: n}
		need += (n + stageAlign - 1) / stageAlign * stageAlign
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("vision: no frames: %w", ErrInvalidFrame)
	}
	if err := d.prepareStage(need); err != nil {
		return nil, err
	}
	images := make([]backend.PatchImage, len(frames))
	for i := range frames {
		f := &frames[i]
		im := backend.PatchImage{
			Width: f.Width, Height: f.Height, Norm: &p.lut, Row: offsets[i] / p.RowSize(),
			PatchSize: p.cfg.PatchSize, MergeSize: p.cfg.MergeSize, TemporalPatch: p.cfg.TemporalPatchSize,
		}
		g := grids[i]
		if w, h := g.W*p.cfg.PatchSize, g.H*p.cfg.PatchSize; w != f.Width || h != f.Height {
			r, err := p.resizer(f.Width, f.Height, w, h)
			if err != nil {
				return nil, err
			}
			im.Horizontal, im.Vertical = r.devH, r.devV
		}
		images[i] = im
	}
	dst, err := d.be.Alloc("activations", tensor.F32, rows, p.RowSize())
	if err != nil {
		return nil, fmt.Errorf("vision: pixel values on the device: %w", err)
	}
	if err := d.decodeAndQueue(ctx, dst, frames, slots, images); err != nil {
		d.be.Free(dst)
		return nil, err
	}
	return &DeviceBatch{PixelValues: dst, Grids: grids}, nil
}

// prepareStage makes the stage hold at least need bytes, and waits until
// the device has copied what the last call left there.
func (d *DeviceProcessor) prepareStage(need int) error {
	if d.stage != nil && len(d.stage.Host()) < need {
		if err := d.Close(); err != nil {
			return fmt.Errorf("vision: growing the image stage: %w", err)
		}
	}
	if d.stage == nil {
		s, err := d.prep.NewImageStage((need + stageGrain - 1) / stageGrain * stageGrain)
		if err != nil {
			return fmt.Errorf("vision: image stage: %w", err)
		}
		d.stage, d.busy = s, false
	}
	if d.busy {
		if err := d.stage.Ready(); err != nil {
			return fmt.Errorf("vision: image stage: %w", err)
		}
		d.busy = false
	}
	return nil
}

// decodeAndQueue decodes the frames on the processor's workers into their
// slots of the stage and queues each one's preprocessing as soon as it is
// decoded. After the first error the frames not yet decoded are skipped.
func (d *DeviceProcessor) decodeAndQueue(ctx context.Context, dst backend.Tensor, frames []msgs.Frame, slots []slot, images []backend.PatchImage) error {
	host := d.stage.Host()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(frames))
	done := make(chan int, len(frames))
	var next atomic.Int64
	var wg sync.WaitGroup
	workers := min(d.p.workers, len(frames))
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(frames) {
					return
				}
				s := slots[i]
				region := Image{Pix: host[s.off : s.off+s.n : s.off+s.n]}
				v, err := decodeView(wctx, &frames[i], &region)
				if err == nil && !samePix(v.img.Pix, region.Pix) {
					copy(region.Pix[:s.n], v.img.Pix) // a raw frame, used in place by decodeView
				}
				images[i].BGR = v.bgr
				errs[i] = err
				done <- i
			}
		}()
	}
	var queueErr error
	for range frames {
		i := <-done
		if errs[i] != nil || queueErr != nil {
			cancel()
			continue
		}
		d.busy = true
		if err := d.stage.Patches(dst, slots[i].off, images[i]); err != nil {
			queueErr = fmt.Errorf("vision: camera %q: preprocessing on the device: %w (frame %d of %d)", frames[i].Camera, err, i, len(frames))
			cancel()
		}
	}
	wg.Wait()
	for i, err := range errs {
		// Frames stopped by the cancel above, after another failed, are
		// not the cause.
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.Canceled)) {
			return fmt.Errorf("%w (frame %d of %d)", err, i, len(frames))
		}
	}
	return queueErr
}
