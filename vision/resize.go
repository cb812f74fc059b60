package vision

import (
	"fmt"
	"runtime"

	"vlanode/backend"
)

// Resizer resizes RGB images of one size to another with torchvision's
// antialiased bicubic resize of uint8 images (see resample.go). Its filter
// tables are computed once; it is safe for concurrent use.
type Resizer struct {
	inW, inH, outW, outH int
	horiz, vert          *axisFilter // nil when that side keeps its size
	// The same filters for a device (backend.ImagePrep); nil alike.
	devH, devV *backend.ResizeFilter
}

// NewResizer returns a Resizer from inW × inH to outW × outH pixels.
func NewResizer(inW, inH, outW, outH int) (*Resizer, error) {
	if inW < 1 || inH < 1 || outW < 1 || outH < 1 {
		return nil, fmt.Errorf("vision: resize %d×%d to %d×%d: sizes must be positive", inW, inH, outW, outH)
	}
	r := &Resizer{inW: inW, inH: inH, outW: outW, outH: outH}
	var err error
	if inW != outW {
		if r.horiz, err = newAxisFilter(inW, outW); err != nil {
			return nil, err
		}
		r.devH = r.horiz.device()
	}
	if inH != outH {
		if r.vert, err = newAxisFilter(inH, outH); err != nil {
			return nil, err
		}
		r.devV = r.vert.device()
	}
	return r, nil
}

// ResizeScratch holds the buffers of a resize between calls, so that a
// worker resizing many images allocates only once. The zero value is ready.
type ResizeScratch struct {
	mid    []uint8   // horizontal pass output: outW × inH RGB
	packed [][]int64 // per worker: two input rows packed for the horizontal pass
	acc    [][]int32 // per worker: one row of vertical-pass accumulators
}

// buffers returns the per-worker scratch of chunk.
func (s *ResizeScratch) buffers(chunk, packedLen, accLen int) ([]int64, []int32) {
	return grow(&s.packed[chunk], packedLen), grow(&s.acc[chunk], accLen)
}

// Resize resizes src (inW × inH) into dst, reshaped to outW × outH, with
// up to workers goroutines over rows (≤ 0: GOMAXPROCS). scratch may be nil;
// one scratch must not serve two calls at once.
func (r *Resizer) Resize(dst, src *Image, scratch *ResizeScratch, workers int) error {
	if err := src.check(); err != nil {
		return err
	}
	if src.Width != r.inW || src.Height != r.inH {
		return fmt.Errorf("vision: resizer from %d×%d given a %d×%d image", r.inW, r.inH, src.Width, src.Height)
	}
	if scratch == nil {
		scratch = new(ResizeScratch)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if len(scratch.packed) < workers {
		scratch.packed = append(scratch.packed, make([][]int64, workers-len(scratch.packed))...)
		scratch.acc = append(scratch.acc, make([][]int32, workers-len(scratch.acc))...)
	}
	dst.Reshape(r.outW, r.outH)
	if r.horiz == nil && r.vert == nil {
		copy(dst.Pix, src.Pix)
		return nil
	}
	mid := src.Pix
	if r.horiz != nil {
		if r.vert != nil {
			mid = grow(&scratch.mid, 3*r.outW*r.inH)
		} else {
			mid = dst.Pix
		}
		parallel(r.inH, workers, func(chunk, lo, hi int) {
			packed, _ := scratch.buffers(chunk, 3*r.inW, 0)
			r.horiz.horizontal(mid, src.Pix, packed, lo, hi)
		})
	}
	if r.vert != nil {
		rowLen := 3 * r.outW
		parallel(r.outH, workers, func(chunk, lo, hi int) {
			_, acc := scratch.buffers(chunk, 0, rowLen)
			r.vert.vertical(dst.Pix, mid, rowLen, acc, lo, hi)
		})
	}
	return nil
}

// Resize returns src resized to width × height with torchvision's
// antialiased bicubic resize of uint8 images. For repeated resizes of one
// size, keep a Resizer.
func Resize(src *Image, width, height int) (*Image, error) {
	if err := src.check(); err != nil {
		return nil, err
	}
	r, err := NewResizer(src.Width, src.Height, width, height)
	if err != nil {
		return nil, err
	}
	dst := new(Image)
	if err := r.Resize(dst, src, nil, 1); err != nil {
		return nil, err
	}
	return dst, nil
}

// grow returns (*buf)[:n], reallocating *buf when it is too small.
func grow[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	*buf = (*buf)[:n]
	return *buf
}
