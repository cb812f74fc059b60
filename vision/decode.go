package vision

import (
	"bytes"
	"errors"
	"fmt"

	"vlanode/msgs"
)

// ErrInvalidFrame is wrapped by the errors of frames that no decoder could
// accept: a bad size, step or byte count, an unknown encoding, a corrupt
// JPEG or PNG, or a decoded size other than the declared one. A node answers
// them with bad_request.
var ErrInvalidFrame = errors.New("invalid frame")

// ErrNoOpenCV is wrapped by the error of a jpeg or png frame in a binary
// built with the tag nogocv.
var ErrNoOpenCV = errors.New("built without OpenCV (tag nogocv)")

// Decode decodes a frame into a new RGB image. See DecodeInto.
func Decode(f *msgs.Frame) (*Image, error) {
	img := new(Image)
	if err := DecodeInto(img, f); err != nil {
		return nil, err
	}
	return img, nil
}

// DecodeInto decodes a frame into dst, an RGB image of the frame's declared
// width and height, reusing dst.Pix when it is large enough. JPEG and PNG
// decode to the pixels OpenCV's imdecode gives (EXIF orientation ignored,
// grey replicated, alpha dropped; JPEG through the same libjpeg-turbo,
// straight into dst as RGB) and must decode to the declared size. Raw rows
// are Step bytes apart (0 means tightly packed) and Data must hold exactly
// Step × Height bytes; bgr8 is swapped to RGB and mono8 replicated to three
// channels. Errors name the camera and the encoding and wrap
// ErrInvalidFrame or ErrNoOpenCV.
func DecodeInto(dst *Image, f *msgs.Frame) error {
	if f == nil {
		return fmt.Errorf("vision: decode: nil frame: %w", ErrInvalidFrame)
	}
	if err := checkSize(f); err != nil {
		return err
	}
	switch f.Encoding {
	case msgs.EncodingJPEG, msgs.EncodingPNG:
		if err := checkContainer(f); err != nil {
			return err
		}
		v, err := decodeCompressed(f, dst)
		if err != nil {
			return err
		}
		defer v.release()
		if v.bgr || !samePix(v.img.Pix, dst.Pix) {
			dst.Reshape(f.Width, f.Height)
			copyRGB(dst.Pix, v.img.Pix, v.bgr)
		}
		return nil
	case msgs.EncodingRGB8, msgs.EncodingBGR8, msgs.EncodingMono8:
		return decodeRaw(dst, f)
	}
	return frameError(f, ErrInvalidFrame, "unknown encoding (want jpeg, png, rgb8, bgr8 or mono8)")
}

// checkSize checks the declared size of a frame.
func checkSize(f *msgs.Frame) error {
	if f.Width < 1 || f.Height < 1 || f.Width > msgs.MaxDimension || f.Height > msgs.MaxDimension {
		return frameError(f, ErrInvalidFrame, "size %d×%d is outside 1..%d", f.Width, f.Height, msgs.MaxDimension)
	}
	return nil
}

// File signatures and the JPEG end-of-image marker.
var (
	jpegMagic = []byte{0xFF, 0xD8, 0xFF}
	jpegEOI   = []byte{0xFF, 0xD9}
	pngMagic  = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'}
)

// checkContainer checks that a jpeg or png frame holds a file of that
// format, and that a JPEG is complete: libjpeg only warns about a truncated
// file and fills the missing rows with grey, so OpenCV would return an image.
func checkContainer(f *msgs.Frame) error {
	d := f.Data
	if len(d) == 0 {
		return frameError(f, ErrInvalidFrame, "no data")
	}
	if f.Encoding == msgs.EncodingPNG {
		if !bytes.HasPrefix(d, pngMagic) {
			return frameError(f, ErrInvalidFrame, "data is not a PNG file (starts % X)", d[:min(len(d), 8)])
		}
		return nil
	}
	if !bytes.HasPrefix(d, jpegMagic) {
		return frameError(f, ErrInvalidFrame, "data is not a JPEG file (starts % X)", d[:min(len(d), 8)])
	}
	if !bytes.HasSuffix(bytes.TrimRight(d, "\x00"), jpegEOI) {
		return frameError(f, ErrInvalidFrame, "truncated JPEG (%d bytes, no end-of-image marker)", len(d))
	}
	return nil
}

// frameView is a decoded frame as the processor reads it: pixels that may
// alias the frame's data or OpenCV's buffer, in RGB or BGR order.
type frameView struct {
	img     Image  // Pix is read-only: it may be the frame's own bytes
	bgr     bool   // Pix holds blue, green, red
	release func() // frees OpenCV's buffer; never nil
}

func noRelease() {}

// decodeView decodes f without copying where it can: tightly packed rgb8 and
// bgr8 frames are used in place, JPEG decodes straight into scratch, PNG
// stays in OpenCV's BGR buffer, and only mono8 and padded rows are copied,
// into scratch. The caller calls release when done with the view.
func decodeView(f *msgs.Frame, scratch *Image) (frameView, error) {
	fail := frameView{release: noRelease}
	tight := f != nil && f.Encoding.Channels() == 3 && (f.Step == 0 || f.Step == 3*f.Width)
	compressed := f != nil && (f.Encoding == msgs.EncodingJPEG || f.Encoding == msgs.EncodingPNG)
	if !tight && !compressed {
		if err := DecodeInto(scratch, f); err != nil {
			return fail, err
		}
		return frameView{img: *scratch, release: noRelease}, nil
	}
	if err := checkSize(f); err != nil {
		return fail, err
	}
	if compressed {
		if err := checkContainer(f); err != nil {
			return fail, err
		}
		return decodeCompressed(f, scratch)
	}
	if n := 3 * f.Width * f.Height; len(f.Data) != n {
		return fail, frameError(f, ErrInvalidFrame, "%d×%d with step %d needs %d bytes, got %d", f.Width, f.Height, 3*f.Width, n, len(f.Data))
	}
	img := Image{Width: f.Width, Height: f.Height, Pix: f.Data}
	return frameView{img: img, bgr: f.Encoding == msgs.EncodingBGR8, release: noRelease}, nil
}

// samePix reports whether a and b start at the same byte.
func samePix(a, b []uint8) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// frameError formats an error about frame f, wrapping kind.
func frameError(f *msgs.Frame, kind error, format string, args ...any) error {
	return fmt.Errorf("vision: camera %q: %s: %w: %s", f.Camera, f.Encoding, kind, fmt.Sprintf(format, args...))
}

// copyRGB copies RGB pixels from src to dst, swapping red and blue when src
// is BGR.
func copyRGB(dst, src []uint8, bgr bool) {
	if !bgr {
		copy(dst, src)
		return
	}
	src = src[:len(dst)]
	for x := 0; x+2 < len(src); x += 3 {
		dst[x], dst[x+1], dst[x+2] = src[x+2], src[x+1], src[x]
	}
}

// decodeRaw copies a raw frame into dst, honouring the row step.
func decodeRaw(dst *Image, f *msgs.Frame) error {
	ch := f.Encoding.Channels()
	w, h := f.Width, f.Height
	row := w * ch
	step := f.Step
	if step == 0 {
		step = row
	}
	if step < row {
		return frameError(f, ErrInvalidFrame, "step %d is less than width %d × %d bytes a pixel", step, w, ch)
	}
	if step > len(f.Data) || step*h != len(f.Data) {
		return frameError(f, ErrInvalidFrame, "%d×%d with step %d needs %d bytes, got %d", w, h, step, step*h, len(f.Data))
	}
	dst.Reshape(w, h)
	out := dst.Pix
	for y := range h {
		src := f.Data[y*step : y*step+row]
		o := out[3*w*y : 3*w*(y+1)]
		switch f.Encoding {
		case msgs.EncodingRGB8:
			copy(o, src)
		case msgs.EncodingBGR8:
			copyRGB(o, src, true)
		case msgs.EncodingMono8:
			for x, v := range src {
				o[3*x], o[3*x+1], o[3*x+2] = v, v, v
			}
		}
	}
	return nil
}
