//go:build !nogocv

package vision

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestDecodePNGIsExact(t *testing.T) {
	img := testImage(33, 17, 5)
	f := encodeFrame(t, img, msgs.EncodingPNG, 0)
	got, err := Decode(&f)
	require.NoError(t, err)
	assert.Equal(t, img, got)

	// The reference images, through OpenCV and through Go's image/png.
	want := readPNG(t, referenceDir+"/grad-1001x777.png")
	data := encodeFrame(t, want, msgs.EncodingPNG, 0)
	got, err = Decode(&data)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestDecodeJPEG(t *testing.T) {
	img := sceneImage(64, 48, 3)
	f := encodeFrame(t, img, msgs.EncodingJPEG, 95)
	got, err := Decode(&f)
	require.NoError(t, err)
	require.Equal(t, img.Width, got.Width)
	require.Equal(t, img.Height, got.Height)
	swapped := NewImage(got.Width, got.Height)
	copyRGB(swapped.Pix, got.Pix, true)
	meanErr := func(a *Image) float64 {
		sum := 0
		for i := range img.Pix {
			d := int(img.Pix[i]) - int(a.Pix[i])
			sum += max(d, -d)
		}
		return float64(sum) / float64(len(img.Pix))
	}
	assert.Less(t, meanErr(got), 8.0, "mean absolute JPEG error, levels")
	assert.Greater(t, meanErr(swapped), 3*meanErr(got), "red and blue swapped?")
}

func TestDecodeCompressedErrors(t *testing.T) {
	img := sceneImage(40, 30, 1)
	jpeg := encodeFrame(t, img, msgs.EncodingJPEG, 90)
	png := encodeFrame(t, img, msgs.EncodingPNG, 0)

	wrongSize := jpeg
	wrongSize.Width = 41
	_, err := Decode(&wrongSize)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "decoded size 40×30 differs from the declared 41×30")

	truncated := jpeg
	truncated.Data = jpeg.Data[:len(jpeg.Data)/2]
	_, err = Decode(&truncated)
	assert.ErrorContains(t, err, "truncated JPEG")

	garbage := jpeg
	garbage.Data = append([]byte{0xFF, 0xD8, 0xFF}, make([]byte, 200)...)
	garbage.Data = append(garbage.Data, 0xFF, 0xD9)
	_, err = Decode(&garbage)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, `camera "front_wide_120fov": jpeg: invalid frame: corrupt or truncated image`)

	brokenPNG := png
	brokenPNG.Data = append([]byte(nil), png.Data[:len(png.Data)/2]...)
	_, err = Decode(&brokenPNG)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "png: invalid frame")
}

// TestProcessFramesCompressed checks the processor's decoding paths (JPEG
// into its scratch, PNG's BGR pixels straight from OpenCV, resized and
// patchified in BGR order) against decoding to RGB first.
func TestProcessFramesCompressed(t *testing.T) {
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	frames := []msgs.Frame{
		encodeFrame(t, sceneImage(640, 480, 1), msgs.EncodingJPEG, 90), // resized
		encodeFrame(t, sceneImage(512, 384, 2), msgs.EncodingPNG, 0),   // not resized
	}
	var b Batch
	require.NoError(t, p.ProcessFrames(&b, frames))
	off := 0
	for i := range frames {
		img, err := Decode(&frames[i])
		require.NoError(t, err)
		want, g, err := p.Preprocess(img)
		require.NoError(t, err)
		assert.Equal(t, g, b.Grids[i])
		assert.Equal(t, want, b.PixelValues[off:off+len(want)], "frame %d", i)
		off += len(want)
	}
	assert.Len(t, b.PixelValues, off)
}
