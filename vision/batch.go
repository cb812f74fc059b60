package vision

import (
	"context"
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
// grids. Before anything is allocated or decoded, every frame is checked
// (CheckFrame: each JPEG or PNG header must give its frame's declared
// size) and their pixels summed against the processor's budget
// (WithMaxPixels). Frames run in parallel on the
// processor's workers (a frame's resize and patchify also split over rows
// when there are fewer frames than workers). Decoding stops when ctx is
// done. On error b's contents are undefined; the error is that of the
// first failing frame in order and names its index.
func (p *Processor) ProcessFrames(ctx context.Context, b *Batch, frames []msgs.Frame) error {
	grids, offsets, err := p.layout(b.Grids[:0], frames)
	b.Grids = grids
	if err != nil {
		return err
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
			errs[i] = p.processFrame(ctx, b.PixelValues[offsets[i]:offsets[i+1]], &frames[i], s, inner)
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

// layout checks the frames (CheckFrame: declared sizes, data lengths,
// headers) and their pixels against the budget, appends their grids to
// grids and returns where each frame's values start in the pixel values
// (one more offset than frames: the end).
func (p *Processor) layout(grids []Grid, frames []msgs.Frame) ([]Grid, []int, error) {
	offsets := make([]int, len(frames)+1)
	pixels := 0
	for i := range frames {
		f := &frames[i]
		if err := CheckFrame(f); err != nil {
			return grids, nil, fmt.Errorf("%w (frame %d of %d)", err, i, len(frames))
		}
		pixels += f.Width * f.Height
		g, _, _, err := p.Grid(f.Width, f.Height)
		if err != nil {
			return grids, nil, fmt.Errorf("vision: camera %q: %s: %w: %v (frame %d of %d)", f.Camera, f.Encoding, ErrInvalidFrame, err, i, len(frames))
		}
		grids = append(grids, g)
		offsets[i+1] = offsets[i] + g.Patches()*p.RowSize()
	}
	if p.maxPixels > 0 && pixels > p.maxPixels {
		return grids, nil, fmt.Errorf("vision: %d frames of %d pixels in all, more than the %d a request may hold: %w", len(frames), pixels, p.maxPixels, ErrInvalidFrame)
	}
	return grids, offsets, nil
}

// processFrame decodes one frame and preprocesses it into dst, without
// copying the decoded pixels (see decodeView).
func (p *Processor) processFrame(ctx context.Context, dst []float32, f *msgs.Frame, s *imageScratch, workers int) error {
	v, err := decodeView(ctx, f, &s.decoded)
	if err != nil {
		return err
	}
	_, err = p.preprocess(dst, &v.img, v.bgr, s, workers)
	return err
}
