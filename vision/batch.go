package vision

import (
	"fmt"
	"sync"
	"sync/atomic"

	"vlanode/msgs"
)

// Batch is the processor's output for a list of images, as transformers
// returns it for one call: the images' rows one after another.
type Batch struct {
	PixelValues []float32 // pixel_values: [Σ grid.Patches(), RowSize] row-major, images in order
	Grids       []Grid    // image_grid_thw: one per image
}

// Rows is the number of rows of PixelValues.
func (b *Batch) Rows() int {
	n := 0
	for _, g := range b.Grids {
		n += g.Patches()
	}
	return n
}

// GridTHW returns image_grid_thw as transformers does: [len(Grids), 3]
// row-major int64.
func (b *Batch) GridTHW() []int64 {
	out := make([]int64, 0, 3*len(b.Grids))
	for _, g := range b.Grids {
		out = append(out, int64(g.T), int64(g.H), int64(g.W))
	}
	return out
}

// ProcessFrames decodes frames and preprocesses them into b, reusing b's
// buffers: b.PixelValues gets every frame's rows in order, b.Grids their
// grids. Frames run in parallel on the processor's workers (a frame's resize
// and patchify also split over rows when there are fewer frames than
// workers). The output layout comes from each frame's declared size, which
// decoding checks. On error b's contents are undefined; the error is that
// of the first failing frame in order and names its index.
func (p *Processor) ProcessFrames(b *Batch, frames []msgs.Frame) error {
	b.Grids = b.Grids[:0]
	offsets := make([]int, len(frames)+1)
	for i := range frames {
		g, _, _, err := p.Grid(frames[i].Width, frames[i].Height)
		if err != nil {
			f := &frames[i]
			return fmt.Errorf("vision: camera %q: %s: %w: %v (frame %d of %d)", f.Camera, f.Encoding, ErrInvalidFrame, err, i, len(frames))
		}
		b.Grids = append(b.Grids, g)
		offsets[i+1] = offsets[i] + g.Patches()*p.RowSize()
	}
	b.PixelValues = grow(&b.PixelValues, offsets[len(frames)])
	if len(frames) == 0 {
		return nil
	}

	workers := min(p.workers, len(frames))
	inner := max(1, p.workers/max(1, len(frames)))
	errs := make([]error, len(frames))
	var next atomic.Int64
	var wg sync.WaitGroup
	work := func() {
		defer wg.Done()
		s := p.scratch.Get().(*imageScratch)
		defer p.scratch.Put(s)
		for {
			i := int(next.Add(1) - 1)
			if i >= len(frames) {
				return
			}
			errs[i] = p.processFrame(b.PixelValues[offsets[i]:offsets[i+1]], &frames[i], s, inner)
		}
	}
	wg.Add(workers)
	for range workers - 1 {
		go work()
	}
	work()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%w (frame %d of %d)", err, i, len(frames))
		}
	}
	return nil
}

// processFrame decodes one frame and preprocesses it into dst, without
// copying the decoded pixels (see decodeView).
func (p *Processor) processFrame(dst []float32, f *msgs.Frame, s *imageScratch, workers int) error {
	v, err := decodeView(f, &s.decoded)
	if err != nil {
		return err
	}
	defer v.release()
	_, err = p.preprocess(dst, &v.img, v.bgr, s, workers)
	return err
}
