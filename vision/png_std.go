package vision

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"

	"vlanode/msgs"
)

// PNG frames are decoded with Go's image/png into the RGB pixels OpenCV
// 4.6's imdecode(IMREAD_COLOR) gives through libpng (grfmt_png.cpp), so
// that a binary with or without OpenCV reads the same values:
//   - 16-bit samples keep their high byte (png_set_strip_16);
//   - alpha, from an alpha channel or a tRNS chunk, is dropped, not
//     composited (png_set_strip_alpha);
//   - grey is replicated to the three channels (png_set_gray_to_rgb), and
//     1, 2 and 4-bit grey scaled by 255, 85 and 17, as both decoders do;
//   - a palette index past the palette is black, as in both;
//   - gamma, colour profiles and EXIF orientation are ignored.
// TestPNGMatchesOpenCV checks each colour type and bit depth against
// OpenCV.

// pngChunk bounds each Read of the PNG decoder, so that it sees a done
// context within a few megapixels of inflating (deflate expands at most
// about 1032 times).
const pngChunk = 4 << 10

// ctxReader reads from r at most pngChunk bytes at a time and fails with
// ctx's error once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p[:min(len(p), pngChunk)])
}

// decodePNG decodes the PNG frame f into dst, resized to f's declared
// size, as RGB. The header must already have been checked (checkHeader):
// image/png allocates its image from it. It returns ctx's error once ctx
// is done; its other errors wrap ErrInvalidFrame.
func decodePNG(ctx context.Context, dst *Image, f *msgs.Frame) error {
	m, err := png.Decode(ctxReader{ctx, bytes.NewReader(f.Data)})
	if err != nil {
		if ctx.Err() != nil {
			return cancelled(ctx, f)
		}
		return frameError(f, ErrInvalidFrame, "corrupt or truncated image (%v)", err)
	}
	if b := m.Bounds(); b.Dx() != f.Width || b.Dy() != f.Height {
		return frameError(f, ErrInvalidFrame, "decoded size %d×%d differs from the declared %d×%d", b.Dx(), b.Dy(), f.Width, f.Height)
	}
	dst.Reshape(f.Width, f.Height)
	if err := pngToRGB(dst, m); err != nil {
		return frameError(f, ErrInvalidFrame, "%v", err)
	}
	return nil
}

// pngToRGB writes the RGB bytes of m, one of the image types image/png
// returns, into dst (of m's size).
func pngToRGB(dst *Image, m image.Image) error {
	w, h := dst.Width, dst.Height
	switch m := m.(type) {
	case *image.Gray: // grey 1, 2, 4, 8 bits
		for y := range h {
			src, o := m.Pix[y*m.Stride:][:w], dst.Pix[3*w*y:][:3*w]
			for x, v := range src {
				o[3*x], o[3*x+1], o[3*x+2] = v, v, v
			}
		}
	case *image.Gray16: // 16 bits, big-endian: the high byte first
		for y := range h {
			src, o := m.Pix[y*m.Stride:][:2*w], dst.Pix[3*w*y:][:3*w]
			for x := range w {
				v := src[2*x]
				o[3*x], o[3*x+1], o[3*x+2] = v, v, v
			}
		}
	case *image.RGBA: // opaque RGB 8 bits
		rgbaRows(dst, m.Pix, m.Stride, 4, 1)
	case *image.NRGBA: // RGBA or grey + alpha 8 bits, or a tRNS colour
		rgbaRows(dst, m.Pix, m.Stride, 4, 1)
	case *image.RGBA64: // opaque RGB 16 bits
		rgbaRows(dst, m.Pix, m.Stride, 8, 2)
	case *image.NRGBA64: // RGBA or grey + alpha 16 bits, or a tRNS colour
		rgbaRows(dst, m.Pix, m.Stride, 8, 2)
	case *image.Paletted:
		var lut [256][3]uint8 // past the palette: black
		for i, c := range m.Palette {
			switch c := c.(type) {
			case color.RGBA:
				lut[i] = [3]uint8{c.R, c.G, c.B}
			case color.NRGBA:
				lut[i] = [3]uint8{c.R, c.G, c.B}
			default:
				return fmt.Errorf("PNG palette entry %d is a %T", i, c)
			}
		}
		for y := range h {
			src, o := m.Pix[y*m.Stride:][:w], dst.Pix[3*w*y:][:3*w]
			for x, v := range src {
				p := &lut[v]
				o[3*x], o[3*x+1], o[3*x+2] = p[0], p[1], p[2]
			}
		}
	default:
		return fmt.Errorf("image/png returned a %T", m)
	}
	return nil
}

// rgbaRows copies the first three channels of 4-channel rows (stride
// bytes apart, pixel bytes a pixel, sample bytes a channel, big-endian)
// into dst: the high byte of each sample.
func rgbaRows(dst *Image, pix []uint8, stride, pixel, sample int) {
	w := dst.Width
	for y := range dst.Height {
		src, o := pix[y*stride:][:pixel*w], dst.Pix[3*w*y:][:3*w]
		for x := range w {
			s := src[pixel*x:][:pixel]
			o[3*x], o[3*x+1], o[3*x+2] = s[0], s[sample], s[2*sample]
		}
	}
}
