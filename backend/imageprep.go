package backend

import "fmt"

// ImagePrep is a backend that preprocesses camera images for a vision
// model on the device (cuda): the host decodes frames into the page-locked
// memory of an ImageStage, and the device resizes, normalizes and cuts
// them into pixel_values rows with the host's integer filters and lookup
// tables (PatchImage), so that the values are the host's bit for bit.
// Package vision describes each image (vision.DeviceProcessor).
type ImagePrep interface {
	// NewImageStage returns a stage of at least bytes bytes of page-locked
	// host memory.
	NewImageStage(bytes int) (ImageStage, error)
}

// ImageStage is page-locked host memory for decoded images, and the
// device memory that preprocesses them. Its methods serve one goroutine
// at a time, as the backend's do; the bytes of Host may be written by any
// goroutines, each image before the Patches call that reads it and, once
// a Patches call has read them, only after Ready.
type ImageStage interface {
	// Host returns the stage's page-locked memory.
	Host() []byte
	// Patches queues the copy of the image im at Host()[off:] to the
	// device and its preprocessing into rows [im.Row, im.Row +
	// im.Patches()) of dst, an F32 tensor of im.RowSize() columns.
	Patches(dst Tensor, off int, im PatchImage) error
	// Ready waits until the copies queued by Patches have read Host's
	// memory.
	Ready() error
	// Close waits for the queued work that reads the stage and releases
	// its memory.
	Close() error
}

// PatchImage is one image for ImageStage.Patches: RGB (or BGR) bytes,
// rows tightly packed, resized by Horizontal then Vertical (nil: that side
// keeps its size), each byte normalized through Norm, and cut into
// patches as transformers' Qwen2-VL processor does: row r = ((bh·W/(mP) +
// bw)·m + mh)·m + mw holds patch (bh·m + mh, bw·m + mw) of the resized
// image as (channel, t, y, x) for t < TemporalPatch, the same values for
// every t. The filters and Norm must not change once passed: a backend
// may keep its copy of them.
type PatchImage struct {
	Width, Height int  // the image, before resizing
	BGR           bool // bytes are blue, green, red
	Horizontal    *ResizeFilter
	Vertical      *ResizeFilter
	Norm          *[3][256]float32 // the value of each byte of channel c (red, green, blue)
	PatchSize     int
	MergeSize     int
	TemporalPatch int
	Row           int // the image's first row of pixel values
}

// ResizeFilter is one axis of a separable resize in fixed point: output
// sample i is clamp((2^(Precision−1) + Σ_{j<Count[i]}
// Weights[i·Taps+j] · input[Start[i]+j]) >> Precision) to 0..255, the sum
// in int32 and the shift arithmetic. The horizontal pass runs first and
// the vertical one reads its bytes.
type ResizeFilter struct {
	In, Out   int
	Taps      int     // weights stored for each output sample
	Start     []int32 // [Out]
	Count     []int32 // [Out], each ≤ Taps
	Weights   []int32 // [Out × Taps]
	Precision uint    // 1..22
}

// OutWidth is the image's width after resizing.
func (im *PatchImage) OutWidth() int {
	if im.Horizontal != nil {
		return im.Horizontal.Out
	}
	return im.Width
}

// OutHeight is the image's height after resizing.
func (im *PatchImage) OutHeight() int {
	if im.Vertical != nil {
		return im.Vertical.Out
	}
	return im.Height
}

// Patches is the rows of pixel values the image becomes.
func (im *PatchImage) Patches() int {
	return (im.OutWidth() / im.PatchSize) * (im.OutHeight() / im.PatchSize)
}

// RowSize is the values of one row: 3 · TemporalPatch · PatchSize².
func (im *PatchImage) RowSize() int { return 3 * im.TemporalPatch * im.PatchSize * im.PatchSize }

// Bytes is the size of the image's pixels on the host: 3 · Width · Height.
func (im *PatchImage) Bytes() int { return 3 * im.Width * im.Height }

// Check reports the first inconsistency of im: sizes, filters that do
// not fit the image, a resized size that is not a whole number of merge
// blocks.
func (im *PatchImage) Check() error {
	switch {
	case im.Width < 1 || im.Height < 1:
		return fmt.Errorf("patch image: size %d×%d", im.Width, im.Height)
	case im.PatchSize < 1 || im.MergeSize < 1 || im.TemporalPatch < 1:
		return fmt.Errorf("patch image: patch %d, merge %d, temporal patch %d", im.PatchSize, im.MergeSize, im.TemporalPatch)
	case im.Norm == nil:
		return fmt.Errorf("patch image: no normalization table")
	case im.Row < 0:
		return fmt.Errorf("patch image: row %d", im.Row)
	}
	for _, a := range []struct {
		name string
		f    *ResizeFilter
		in   int
	}{{"horizontal", im.Horizontal, im.Width}, {"vertical", im.Vertical, im.Height}} {
		if a.f != nil {
			if err := a.f.check(a.in); err != nil {
				return fmt.Errorf("patch image: %s filter: %w", a.name, err)
			}
		}
	}
	if b := im.PatchSize * im.MergeSize; im.OutWidth()%b != 0 || im.OutHeight()%b != 0 {
		return fmt.Errorf("patch image: resized to %d×%d, not a multiple of %d", im.OutWidth(), im.OutHeight(), b)
	}
	return nil
}

// check reports whether f is a filter from in samples whose taps stay
// inside its input.
func (f *ResizeFilter) check(in int) error {
	switch {
	case f.In != in || f.Out < 1 || f.Taps < 1:
		return fmt.Errorf("from %d to %d samples, %d taps, for %d", f.In, f.Out, f.Taps, in)
	case len(f.Start) != f.Out || len(f.Count) != f.Out || len(f.Weights) != f.Out*f.Taps:
		return fmt.Errorf("%d starts, %d counts, %d weights for %d outputs of %d taps", len(f.Start), len(f.Count), len(f.Weights), f.Out, f.Taps)
	case f.Precision < 1 || f.Precision > 22:
		return fmt.Errorf("precision %d", f.Precision)
	}
	for i := range f.Out {
		if s, n := f.Start[i], f.Count[i]; s < 0 || n < 0 || int(n) > f.Taps || int(s)+int(n) > in {
			return fmt.Errorf("output %d reads [%d, %d) of %d", i, s, s+n, in)
		}
	}
	return nil
}
