package vision

import (
	"image"
	"image/draw"
	"image/png"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// readPNG loads a PNG file as an RGB Image with the standard library, so
// that tests that need no OpenCV run under the nogocv tag too.
func readPNG(t testing.TB, path string) *Image {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	src, err := png.Decode(f)
	require.NoError(t, err)
	b := src.Bounds()
	rgba := image.NewNRGBA(b)
	draw.Draw(rgba, b, src, b.Min, draw.Src)
	img := NewImage(b.Dx(), b.Dy())
	for i := range b.Dx() * b.Dy() {
		copy(img.Pix[3*i:3*i+3], rgba.Pix[4*i:4*i+3])
	}
	return img
}

// testImage returns a deterministic w×h RGB image: gradients with a
// xorshift noise in the low bits, so neighbouring pixels differ.
func testImage(w, h int, seed uint32) *Image {
	img := NewImage(w, h)
	s := seed | 1
	for y := range h {
		for x := range w {
			s ^= s << 13
			s ^= s >> 17
			s ^= s << 5
			i := 3 * (y*w + x)
			img.Pix[i] = uint8(x*255/max(w-1, 1)) ^ uint8(s&15)
			img.Pix[i+1] = uint8(y*255/max(h-1, 1)) ^ uint8(s>>8&15)
			img.Pix[i+2] = uint8((x^y)&255) ^ uint8(s>>16&63)
		}
	}
	return img
}
