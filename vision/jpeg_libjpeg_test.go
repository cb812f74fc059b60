//go:build !nogocv

package vision

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocv.io/x/gocv"

	"vlanode/msgs"
)

// openCVRGB decodes f with OpenCV's imdecode, the decoder the JPEG path
// replaced, and returns its pixels in RGB order.
func openCVRGB(t *testing.T, f *msgs.Frame) *Image {
	t.Helper()
	v, err := decodeOpenCV(f)
	require.NoError(t, err)
	defer v.release()
	img := NewImage(f.Width, f.Height)
	copyRGB(img.Pix, v.img.Pix, v.bgr)
	return img
}

// encodeJPEGParams encodes img (3 channels, or 1 if grey) with OpenCV's
// JPEG encoder and the given imwrite parameters.
func encodeJPEGParams(t *testing.T, img *Image, grey bool, params ...int) msgs.Frame {
	t.Helper()
	m, err := gocv.NewMatFromBytes(img.Height, img.Width, gocv.MatTypeCV8UC3, img.Pix)
	require.NoError(t, err)
	defer m.Close()
	if grey {
		g := gocv.NewMat()
		defer g.Close()
		gocv.CvtColor(m, &g, gocv.ColorRGBToGray)
		m.Close()
		m = g.Clone()
	}
	buf, err := gocv.IMEncodeWithParams(gocv.JPEGFileExt, m, params)
	require.NoError(t, err)
	defer buf.Close()
	data := append([]byte(nil), buf.GetBytes()...)
	return msgs.Frame{V: msgs.Version, Camera: "front_wide_120fov", Encoding: msgs.EncodingJPEG, Width: img.Width, Height: img.Height, Data: data}
}

// encodeGoJPEG encodes m with Go's image/jpeg (its own quantization and
// Huffman tables, 4:2:0, or one component for image.Gray).
func encodeGoJPEG(t *testing.T, m image.Image) msgs.Frame {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, jpeg.Encode(&buf, m, &jpeg.Options{Quality: 85}))
	b := m.Bounds()
	return msgs.Frame{V: msgs.Version, Camera: "front_wide_120fov", Encoding: msgs.EncodingJPEG, Width: b.Dx(), Height: b.Dy(), Data: buf.Bytes()}
}

// withoutDHT removes the Huffman table segments of a baseline JPEG, as
// MJPEG cameras send their frames.
func withoutDHT(t *testing.T, data []byte) []byte {
	t.Helper()
	out := append([]byte(nil), data[:2]...)
	i := 2
	for i+4 <= len(data) && data[i] == 0xFF {
		marker := data[i+1]
		n := int(data[i+2])<<8 | int(data[i+3])
		if marker != 0xC4 {
			out = append(out, data[i:i+2+n]...)
		}
		i += 2 + n
		if marker == 0xDA {
			break
		}
	}
	require.Less(t, len(out), i, "no DHT segment found")
	return append(out, data[i:]...)
}

// TestJPEGMatchesOpenCV checks that the libjpeg path decodes every kind of
// JPEG to exactly OpenCV's pixels: the bit-identity of pixel_values for
// JPEG frames rests on it.
func TestJPEGMatchesOpenCV(t *testing.T) {
	scene := sceneImage(512, 384, 7)
	odd := sceneImage(33, 17, 2)
	ref := readPNG(t, referenceDir+"/grad-1001x777.png")
	grey := image.NewGray(image.Rect(0, 0, 45, 31))
	rgba := image.NewRGBA(image.Rect(0, 0, 77, 50))
	for i := range grey.Pix {
		grey.Pix[i] = uint8(i * 37)
	}
	for i := range rgba.Pix {
		rgba.Pix[i] = uint8(i*i>>3) | 3
	}
	mjpeg := encodeFrame(t, odd, msgs.EncodingJPEG, 90)
	mjpeg.Data = withoutDHT(t, mjpeg.Data)
	tests := []struct {
		name   string
		frame  msgs.Frame
		opencv bool // decodeJPEG leaves it to OpenCV
	}{
		{"512x384 q90 4:2:0", encodeFrame(t, scene, msgs.EncodingJPEG, 90), false},
		{"1920x1080 q90", encodeFrame(t, sceneImage(1920, 1080, 3), msgs.EncodingJPEG, 90), false},
		{"1001x777 q95", encodeFrame(t, ref, msgs.EncodingJPEG, 95), false},
		{"33x17 q75", encodeFrame(t, odd, msgs.EncodingJPEG, 75), false},
		{"progressive", encodeJPEGParams(t, scene, false, gocv.IMWriteJpegQuality, 90, gocv.IMWriteJpegProgressive, 1), false},
		{"optimized Huffman", encodeJPEGParams(t, odd, false, gocv.IMWriteJpegQuality, 90, gocv.IMWriteJpegOptimize, 1), false},
		{"restart intervals", encodeJPEGParams(t, scene, false, gocv.IMWriteJpegQuality, 90, gocv.IMWriteJpegRstInterval, 3), false},
		{"4:4:4", encodeJPEGParams(t, scene, false, gocv.IMWriteJpegLumaQuality, 90, gocv.IMWriteJpegChromaQuality, 80), false},
		{"greyscale", encodeJPEGParams(t, odd, true, gocv.IMWriteJpegQuality, 90), false},
		{"Go encoder", encodeGoJPEG(t, rgba), false},
		{"Go encoder, grey", encodeGoJPEG(t, grey), false},
		{"MJPEG without Huffman tables", mjpeg, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &tt.frame
			want := openCVRGB(t, f)
			got, err := Decode(f)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want.Pix, got.Pix), "Decode differs from OpenCV")

			var scratch Image
			v, err := decodeView(f, &scratch)
			require.NoError(t, err)
			defer v.release()
			assert.Equal(t, tt.opencv, v.bgr, "BGR view from OpenCV")
			rgb := NewImage(f.Width, f.Height)
			copyRGB(rgb.Pix, v.img.Pix, v.bgr)
			assert.True(t, bytes.Equal(want.Pix, rgb.Pix), "decodeView differs from OpenCV")

			var direct Image
			err = decodeJPEG(&direct, f)
			if tt.opencv {
				assert.ErrorAs(t, err, new(errJPEGUnsupported))
				return
			}
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want.Pix, direct.Pix), "decodeJPEG differs from OpenCV")
		})
	}
}

func TestDecodeJPEGErrors(t *testing.T) {
	f := encodeFrame(t, sceneImage(64, 48, 1), msgs.EncodingJPEG, 90)
	var img Image

	// Past checkContainer, data that ends early is refused, where OpenCV
	// would leave the missing rows uninitialized.
	cut := f
	cut.Data = f.Data[:len(f.Data)*2/3]
	err := decodeJPEG(&img, &cut)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "libjpeg ran out of data")

	bad := f
	bad.Data = append([]byte{0xFF, 0xD8, 0xFF, 0xC0, 0, 3}, make([]byte, 64)...)
	err = decodeJPEG(&img, &bad)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "corrupt or truncated image (libjpeg: ")

	wide := f
	wide.Width = 65
	err = decodeJPEG(&img, &wide)
	assert.ErrorContains(t, err, "decoded size 64×48 differs from the declared 65×48")

	for i := range 3 {
		g := f
		g.Data = append([]byte(nil), f.Data...)
		for j := len(g.Data) / 2; j < len(g.Data)-2; j += 7 + i {
			g.Data[j] ^= 0x5A
		}
		t.Run(fmt.Sprint("garbled ", i), func(t *testing.T) {
			// Whatever libjpeg makes of it, no crash; and the same as OpenCV
			// when both accept it.
			got, err := Decode(&g)
			v, cvErr := decodeOpenCV(&g)
			if cvErr == nil {
				defer v.release()
			}
			if err == nil && cvErr == nil {
				want := NewImage(g.Width, g.Height)
				copyRGB(want.Pix, v.img.Pix, true)
				assert.True(t, bytes.Equal(want.Pix, got.Pix))
			}
		})
	}
}
