package vision

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"vlanode/msgs"
)

// ErrInvalidFrame is wrapped by the errors of frames that no decoder could
// accept: a bad size, step or byte count, an unknown encoding, a JPEG or
// PNG whose header gives another size than the declared one, a corrupt or
// truncated JPEG or PNG, or frames of more pixels than a Processor's
// budget. A node answers them with bad_request.
var ErrInvalidFrame = errors.New("invalid frame")

// Decode decodes a frame into a new RGB image. See DecodeInto.
func Decode(f *msgs.Frame) (*Image, error) {
	img := new(Image)
	if err := DecodeInto(img, f); err != nil {
		return nil, err
	}
	return img, nil
}

// DecodeInto is DecodeContext without a context.
func DecodeInto(dst *Image, f *msgs.Frame) error {
	return DecodeContext(context.Background(), dst, f)
}

// DecodeContext decodes a frame into dst, an RGB image of the frame's
// declared width and height, reusing dst.Pix when it is large enough.
// JPEG and PNG decode to the pixels OpenCV's imdecode gives (EXIF
// orientation ignored, grey replicated, alpha dropped, CMYK converted as
// OpenCV does): JPEG through libjpeg-turbo, PNG through Go's image/png.
// Their header is read first and must give the declared size, so that no
// more than the declared pixels are ever allocated; data that ends early
// or is corrupt is an error, never padded. Raw rows are Step bytes apart
// (0 means tightly packed) and Data must hold exactly Step × Height
// bytes; bgr8 is swapped to RGB and mono8 replicated to three channels.
// Decoding stops when ctx is done, with an error wrapping ctx.Err().
// Other errors name the camera and the encoding and wrap ErrInvalidFrame.
func DecodeContext(ctx context.Context, dst *Image, f *msgs.Frame) error {
	v, err := decodeView(ctx, f, dst)
	if err != nil {
		return err
	}
	if v.bgr || !samePix(v.img.Pix, dst.Pix) {
		dst.Reshape(f.Width, f.Height)
		copyRGB(dst.Pix, v.img.Pix, v.bgr)
	}
	return nil
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
// format, and that a JPEG ends with its end-of-image marker (trailing
// zeros allowed): a truncated file is refused before libjpeg, which would
// find out only where the data ends.
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
// alias the frame's data, in RGB or BGR order.
type frameView struct {
	img Image // Pix is read-only: it may be the frame's own bytes
	bgr bool  // Pix holds blue, green, red
}

// decodeView decodes f without copying where it can: tightly packed rgb8
// and bgr8 frames are used in place; JPEG and PNG decode into scratch, and
// mono8 and padded rows are copied there.
func decodeView(ctx context.Context, f *msgs.Frame, scratch *Image) (frameView, error) {
	if f == nil {
		return frameView{}, fmt.Errorf("vision: decode: nil frame: %w", ErrInvalidFrame)
	}
	if err := checkSize(f); err != nil {
		return frameView{}, err
	}
	switch f.Encoding {
	case msgs.EncodingJPEG, msgs.EncodingPNG:
		if err := checkContainer(f); err != nil {
			return frameView{}, err
		}
		if _, err := checkHeader(f); err != nil {
			return frameView{}, err
		}
		if ctx.Err() != nil {
			return frameView{}, cancelled(ctx, f)
		}
		var err error
		if f.Encoding == msgs.EncodingJPEG {
			err = decodeJPEG(ctx, scratch, f)
		} else {
			err = decodePNG(ctx, scratch, f)
		}
		if err != nil {
			return frameView{}, err
		}
		return frameView{img: *scratch}, nil
	case msgs.EncodingRGB8, msgs.EncodingBGR8, msgs.EncodingMono8:
		step, err := rawStep(f)
		if err != nil {
			return frameView{}, err
		}
		if f.Encoding.Channels() == 3 && step == 3*f.Width {
			img := Image{Width: f.Width, Height: f.Height, Pix: f.Data}
			return frameView{img: img, bgr: f.Encoding == msgs.EncodingBGR8}, nil
		}
		decodeRaw(scratch, f, step)
		return frameView{img: *scratch}, nil
	}
	return frameView{}, frameError(f, ErrInvalidFrame, "unknown encoding (want jpeg, png, rgb8, bgr8 or mono8)")
}

// cancelled is the error of decoding f stopped because ctx is done.
func cancelled(ctx context.Context, f *msgs.Frame) error {
	return fmt.Errorf("vision: camera %q: %s: decoding stopped: %w", f.Camera, f.Encoding, ctx.Err())
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

// rawStep checks a raw frame's step and byte count and returns its row
// step in bytes.
func rawStep(f *msgs.Frame) (int, error) {
	row := f.Width * f.Encoding.Channels()
	step := f.Step
	if step == 0 {
		step = row
	}
	if step < row {
		return 0, frameError(f, ErrInvalidFrame, "step %d is less than width %d × %d bytes a pixel", step, f.Width, f.Encoding.Channels())
	}
	if step > len(f.Data) || step*f.Height != len(f.Data) {
		return 0, frameError(f, ErrInvalidFrame, "%d×%d with step %d needs %d bytes, got %d", f.Width, f.Height, step, step*f.Height, len(f.Data))
	}
	return step, nil
}

// decodeRaw copies a raw frame, whose rows are step bytes apart (checked
// by rawStep), into dst.
func decodeRaw(dst *Image, f *msgs.Frame, step int) {
	w, h := f.Width, f.Height
	row := w * f.Encoding.Channels()
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
}
