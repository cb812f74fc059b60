package vision

import (
	"fmt"
	"runtime"
	"sync"
)

// maxCachedResizers bounds the Resizers a Processor keeps, one per pair of
// input and output sizes; a node sees a few camera sizes.
const maxCachedResizers = 64

// Processor is the Qwen2-VL/Qwen3-VL image processor for one Config. It is
// safe for concurrent use and keeps the resize filters of the sizes it has
// seen and per-worker scratch buffers between calls.
type Processor struct {
	cfg       Config
	workers   int                 // goroutines a call may use
	maxPixels int                 // pixels one ProcessFrames call may decode; 0: any
	lut       [3][256]float32     // normalized value of each byte, per channel
	scratch   sync.Pool           // *imageScratch
	mu        sync.Mutex          // guards resizers
	resizers  map[[4]int]*Resizer // by (inW, inH, outW, outH)
}

// Option configures a Processor.
type Option func(*Processor)

// WithWorkers bounds the goroutines one call of the Processor may use;
// n ≤ 0 means GOMAXPROCS (the default).
func WithWorkers(n int) Option { return func(p *Processor) { p.workers = n } }

// WithMaxPixels bounds the pixels one ProcessFrames call decodes: the sum
// of its frames' declared width × height. Frames over it are refused,
// wrapping ErrInvalidFrame, before any is decoded. n ≤ 0 means no bound
// (the default).
func WithMaxPixels(n int) Option { return func(p *Processor) { p.maxPixels = max(n, 0) } }

// MaxPixels returns the bound of WithMaxPixels, 0 for none.
func (p *Processor) MaxPixels() int { return p.maxPixels }

// imageScratch holds one worker's buffers for one image.
type imageScratch struct {
	decoded Image
	resized Image
	resize  ResizeScratch
	strips  [][]float32 // per worker: a merge-block row, normalized, one plane a channel
}

// NewProcessor returns a Processor for cfg.
func NewProcessor(cfg Config, opts ...Option) (*Processor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Processor{cfg: cfg, resizers: make(map[[4]int]*Resizer)}
	for _, o := range opts {
		o(p)
	}
	if p.workers <= 0 {
		p.workers = runtime.GOMAXPROCS(0)
	}
	p.scratch.New = func() any { return new(imageScratch) }
	// transformers fuses rescale and normalize: mean and std are divided by
	// the rescale factor (float32 tensors times a scalar cast to float32),
	// then torchvision's normalize computes (x - mean) / std in float32.
	inv := float32(1 / cfg.RescaleFactor)
	for c := range 3 {
		mean := float32(cfg.ImageMean[c]) * inv
		std := float32(cfg.ImageStd[c]) * inv
		for v := range 256 {
			p.lut[c][v] = (float32(v) - mean) / std
		}
	}
	return p, nil
}

// Config returns the processor's settings.
func (p *Processor) Config() Config { return p.cfg }

// RowSize is the length of one row of pixel values (Config.RowSize).
func (p *Processor) RowSize() int { return p.cfg.RowSize() }

// Grid returns the image_grid_thw of a width × height image and the size it
// is resized to (SmartResize with the processor's settings).
func (p *Processor) Grid(width, height int) (g Grid, resizedW, resizedH int, err error) {
	h, w, err := SmartResize(height, width, p.cfg.Factor(), p.cfg.MinPixels, p.cfg.MaxPixels)
	if err != nil {
		return Grid{}, 0, 0, err
	}
	return Grid{T: 1, H: h / p.cfg.PatchSize, W: w / p.cfg.PatchSize}, w, h, nil
}

// Preprocess returns the pixel values of one image, [grid.Patches(),
// RowSize()] row-major, and its grid. See PreprocessInto.
func (p *Processor) Preprocess(img *Image) ([]float32, Grid, error) {
	if err := img.check(); err != nil {
		return nil, Grid{}, err
	}
	g, _, _, err := p.Grid(img.Width, img.Height)
	if err != nil {
		return nil, Grid{}, err
	}
	dst := make([]float32, g.Patches()*p.RowSize())
	if _, err := p.PreprocessInto(dst, img); err != nil {
		return nil, Grid{}, err
	}
	return dst, g, nil
}

// PreprocessInto writes the pixel values of img into dst, which must hold
// grid.Patches() × RowSize() values, and returns the grid: the image is
// resized to the SmartResize size (skipped when it already has it),
// normalized and cut into patch rows exactly as transformers'
// Qwen2VLImageProcessor does for a single image.
func (p *Processor) PreprocessInto(dst []float32, img *Image) (Grid, error) {
	if err := img.check(); err != nil {
		return Grid{}, err
	}
	s := p.scratch.Get().(*imageScratch)
	defer p.scratch.Put(s)
	return p.preprocess(dst, img, false, s, p.workers)
}

// preprocess is PreprocessInto with the caller's scratch and worker count,
// for RGB or (bgr) BGR pixels.
func (p *Processor) preprocess(dst []float32, img *Image, bgr bool, s *imageScratch, workers int) (Grid, error) {
	g, w, h, err := p.Grid(img.Width, img.Height)
	if err != nil {
		return Grid{}, err
	}
	if need := g.Patches() * p.RowSize(); len(dst) < need {
		return Grid{}, fmt.Errorf("vision: preprocess %d×%d image: %d output values, need %d", img.Width, img.Height, len(dst), need)
	}
	src := img
	if w != img.Width || h != img.Height {
		r, err := p.resizer(img.Width, img.Height, w, h)
		if err != nil {
			return Grid{}, err
		}
		// The resize treats the three channels alike, so BGR stays BGR.
		if err := r.Resize(&s.resized, img, &s.resize, workers); err != nil {
			return Grid{}, err
		}
		src = &s.resized
	}
	if len(s.strips) < workers {
		s.strips = append(s.strips, make([][]float32, workers-len(s.strips))...)
	}
	parallel(g.H/p.cfg.MergeSize, workers, func(chunk, lo, hi int) {
		p.patchRows(dst, src, bgr, lo, hi, &s.strips[chunk])
	})
	return g, nil
}

// resizer returns the cached Resizer between two sizes, making it if needed.
func (p *Processor) resizer(inW, inH, outW, outH int) (*Resizer, error) {
	key := [4]int{inW, inH, outW, outH}
	p.mu.Lock()
	r := p.resizers[key]
	p.mu.Unlock()
	if r != nil {
		return r, nil
	}
	r, err := NewResizer(inW, inH, outW, outH)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if len(p.resizers) >= maxCachedResizers {
		clear(p.resizers)
	}
	p.resizers[key] = r
	p.mu.Unlock()
	return r, nil
}
