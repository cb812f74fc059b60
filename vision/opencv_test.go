//go:build !nogocv

package vision

// These tests compare the decoders with OpenCV 4.6's imdecode, which the
// node used before and whose pixels the reference tests were made with:
// JPEG through libjpeg-turbo and PNG through image/png must give exactly
// OpenCV's RGB values. They also (re)write the golden frames that
// TestFramesGolden checks in every build (-update-frames).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocv.io/x/gocv"

	"vlanode/msgs"
)

var updateFrames = flag.Bool("update-frames", false, "rewrite testdata/vision/frames and its expected.json from OpenCV's decoding")

// encodeFrame encodes img as a JPEG (quality q) or PNG frame with OpenCV.
func encodeFrame(tb testing.TB, img *Image, enc msgs.Encoding, q int) msgs.Frame {
	tb.Helper()
	rgb, err := gocv.NewMatFromBytes(img.Height, img.Width, gocv.MatTypeCV8UC3, img.Pix)
	require.NoError(tb, err)
	defer rgb.Close()
	bgr := gocv.NewMat()
	defer bgr.Close()
	gocv.CvtColor(rgb, &bgr, gocv.ColorBGRToRGB) // the same swap both ways
	var buf *gocv.NativeByteBuffer
	if enc == msgs.EncodingJPEG {
		buf, err = gocv.IMEncodeWithParams(gocv.JPEGFileExt, bgr, []int{gocv.IMWriteJpegQuality, q})
	} else {
		buf, err = gocv.IMEncode(gocv.PNGFileExt, bgr) // gocv 0.32 panics on empty params
	}
	require.NoError(tb, err)
	defer buf.Close()
	data := append([]byte(nil), buf.GetBytes()...)
	return msgs.Frame{V: msgs.Version, Camera: "front_wide_120fov", Encoding: enc, Width: img.Width, Height: img.Height, Data: data}
}

// openCVRGB decodes data with OpenCV's imdecode (IMREAD_COLOR, orientation
// ignored), as the node did, and returns its pixels in RGB order. Only
// files whose header was checked may go there: OpenCV aborts the process
// on some others.
func openCVRGB(tb testing.TB, data []byte) *Image {
	tb.Helper()
	m, err := gocv.IMDecode(data, gocv.IMReadColor|gocv.IMReadIgnoreOrientation)
	require.NoError(tb, err)
	defer m.Close()
	require.False(tb, m.Empty(), "OpenCV could not decode the file")
	require.Equal(tb, gocv.MatTypeCV8UC3, m.Type())
	pix, err := m.DataPtrUint8()
	require.NoError(tb, err)
	img := NewImage(m.Cols(), m.Rows())
	copyRGB(img.Pix, pix, true)
	return img
}

// encodeJPEGParams encodes img (3 channels, or 1 if grey) with OpenCV's
// JPEG encoder and the given imwrite parameters.
func encodeJPEGParams(t testing.TB, img *Image, grey bool, params ...int) msgs.Frame {
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
func encodeGoJPEG(t testing.TB, m image.Image) msgs.Frame {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, jpeg.Encode(&buf, m, &jpeg.Options{Quality: 85}))
	b := m.Bounds()
	return msgs.Frame{V: msgs.Version, Camera: "front_wide_120fov", Encoding: msgs.EncodingJPEG, Width: b.Dx(), Height: b.Dy(), Data: buf.Bytes()}
}

// withoutDHT removes the Huffman table segments of a baseline JPEG, as
// MJPEG cameras send their frames.
func withoutDHT(t testing.TB, data []byte) []byte {
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

// cmykLevel is dcJPEG's content for the CMYK tests: every level of each
// component across the blocks.
func cmykLevel(bx, by, c int) int { return (bx*37 + by*101 + c*59 + bx*by*c*13) & 255 }

// goPNG encodes m with Go's image/png.
func goPNG(t testing.TB, m image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, m))
	return buf.Bytes()
}

// goldenFrame is a file the decoders are checked on.
type goldenFrame struct {
	name string
	enc  msgs.Encoding
	data []byte
}

// goldenFrames makes the frames of testdata/vision/frames: every kind of
// JPEG and PNG the decoders take.
func goldenFrames(t testing.TB) []goldenFrame {
	const w, h = 33, 17
	scene := sceneImage(64, 48, 7)
	odd := sceneImage(w, h, 2)
	jpg := func(name string, f msgs.Frame) goldenFrame {
		return goldenFrame{name + ".jpg", msgs.EncodingJPEG, f.Data}
	}
	pngOf := func(name string, d []byte) goldenFrame { return goldenFrame{name + ".png", msgs.EncodingPNG, d} }
	spec := func(depth, color int, interlace bool, chunks ...[2]string) pngSpec {
		return pngSpec{w: w, h: h, depth: depth, color: color, interlace: interlace, chunks: chunks, sample: func(x, y, c int) int {
			return (x*7 + y*13 + c*29 + x*y) & (1<<depth - 1)
		}}
	}
	grey := image.NewGray(image.Rect(0, 0, 45, 31))
	for i := range grey.Pix {
		grey.Pix[i] = uint8(i * 37)
	}
	rgba := image.NewRGBA(image.Rect(0, 0, 77, 50))
	for i := range rgba.Pix {
		rgba.Pix[i] = uint8(i*i>>3) | 3
	}
	nrgba := image.NewNRGBA(image.Rect(0, 0, w, h))
	nrgba64 := image.NewNRGBA64(image.Rect(0, 0, w, h))
	rgba64 := image.NewRGBA64(image.Rect(0, 0, w, h))
	grey8 := image.NewGray(image.Rect(0, 0, w, h))
	grey16 := image.NewGray16(image.Rect(0, 0, w, h))
	pal := image.NewPaletted(image.Rect(0, 0, w, h), nil)
	pal1 := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.RGBA{10, 200, 30, 255}, color.RGBA{250, 5, 99, 255}})
	for i := range 200 {
		pal.Palette = append(pal.Palette, color.NRGBA{uint8(i * 7), uint8(255 - i), uint8(i * i), uint8(i * 3)})
	}
	for y := range h {
		for x := range w {
			v := x*131 + y*257 + x*y*17
			nrgba.SetNRGBA(x, y, color.NRGBA{uint8(v), uint8(v >> 3), uint8(v >> 5), uint8(x * 9)})
			nrgba64.SetNRGBA64(x, y, color.NRGBA64{uint16(v * 61), uint16(v * 17), uint16(v * 5), uint16(x * 2000)})
			rgba64.SetRGBA64(x, y, color.RGBA64{uint16(v * 61), uint16(v * 17), uint16(v * 5), 0xFFFF})
			grey8.Pix[y*grey8.Stride+x] = uint8(v)
			grey16.SetGray16(x, y, color.Gray16{uint16(v * 41)})
			pal.Pix[y*pal.Stride+x] = uint8(v % 200)
			pal1.Pix[y*pal1.Stride+x] = uint8(v & 1)
		}
	}
	short := spec(4, 3, false, [2]string{"PLTE", "\x10\x20\x30\xF0\xE0\xD0\x80\x80\x80"}) // 3 entries, indices to 15
	mjpeg := encodeFrame(t, odd, msgs.EncodingJPEG, 90)
	mjpeg.Data = withoutDHT(t, mjpeg.Data)
	return []goldenFrame{
		jpg("baseline-97x61-q90", encodeFrame(t, sceneImage(97, 61, 1), msgs.EncodingJPEG, 90)),
		jpg("progressive-64x48", encodeJPEGParams(t, scene, false, gocv.IMWriteJpegQuality, 90, gocv.IMWriteJpegProgressive, 1)),
		jpg("optimized-33x17", encodeJPEGParams(t, odd, false, gocv.IMWriteJpegQuality, 90, gocv.IMWriteJpegOptimize, 1)),
		jpg("restart-64x48", encodeJPEGParams(t, scene, false, gocv.IMWriteJpegQuality, 90, gocv.IMWriteJpegRstInterval, 3)),
		jpg("444-64x48", encodeJPEGParams(t, scene, false, gocv.IMWriteJpegLumaQuality, 90, gocv.IMWriteJpegChromaQuality, 80)),
		jpg("grey-33x17", encodeJPEGParams(t, odd, true, gocv.IMWriteJpegQuality, 90)),
		jpg("goenc-77x50", encodeGoJPEG(t, rgba)),
		jpg("goenc-grey-45x31", encodeGoJPEG(t, grey)),
		jpg("mjpeg-no-dht-33x17", mjpeg),
		{"cmyk-48x32.jpg", msgs.EncodingJPEG, dcJPEG(48, 32, 4, -1, cmykLevel)},
		{"cmyk-adobe-48x32.jpg", msgs.EncodingJPEG, dcJPEG(48, 32, 4, 0, cmykLevel)},
		{"ycck-48x32.jpg", msgs.EncodingJPEG, dcJPEG(48, 32, 4, 2, cmykLevel)},
		pngOf("rgb8", goPNG(t, rgbaOf(odd))),
		pngOf("rgba8", goPNG(t, nrgba)),
		pngOf("rgb16", goPNG(t, rgba64)),
		pngOf("rgba16", goPNG(t, nrgba64)),
		pngOf("grey8", goPNG(t, grey8)),
		pngOf("grey16", goPNG(t, grey16)),
		pngOf("palette8-trns", goPNG(t, pal)),
		pngOf("palette1", goPNG(t, pal1)),
		pngOf("palette4-short", writePNG(t, short)),
		pngOf("grey1", writePNG(t, spec(1, 0, false))),
		pngOf("grey2", writePNG(t, spec(2, 0, false))),
		pngOf("grey4", writePNG(t, spec(4, 0, false))),
		pngOf("grey-alpha8", writePNG(t, spec(8, 4, false))),
		pngOf("grey-alpha16", writePNG(t, spec(16, 4, false))),
		pngOf("grey8-trns", writePNG(t, spec(8, 0, false, [2]string{"tRNS", "\x00\x07"}))),
		pngOf("rgb8-trns", writePNG(t, spec(8, 2, false, [2]string{"tRNS", "\x00\x07\x00\x14\x00\x21"}))),
		pngOf("rgb8-gamma", writePNG(t, spec(8, 2, false, [2]string{"gAMA", "\x00\x00\xB1\x8F"}))),
		pngOf("interlaced-rgb8", writePNG(t, spec(8, 2, true))),
		pngOf("interlaced-rgba16", writePNG(t, spec(16, 6, true))),
		pngOf("interlaced-grey2", writePNG(t, spec(2, 0, true))),
	}
}

// TestFramesGoldenAreOpenCVs checks that testdata/vision/frames/
// expected.json holds OpenCV's pixels for each committed file (or
// rewrites both with -update-frames), so that TestFramesGolden, which
// runs in every build, compares the decoders with OpenCV.
func TestFramesGoldenAreOpenCVs(t *testing.T) {
	if *updateFrames {
		var m []goldenEntry
		require.NoError(t, os.MkdirAll(goldenDir, 0o755))
		for _, g := range goldenFrames(t) {
			require.NoError(t, os.WriteFile(filepath.Join(goldenDir, g.name), g.data, 0o644))
			img := openCVRGB(t, g.data)
			sum := sha256.Sum256(img.Pix)
			m = append(m, goldenEntry{File: g.name, Encoding: g.enc, Width: img.Width, Height: img.Height, RGBSHA256: hex.EncodeToString(sum[:])})
		}
		out, err := json.MarshalIndent(m, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(goldenDir, "expected.json"), append(out, '\n'), 0o644))
		t.Logf("wrote %d frames to %s", len(m), goldenDir)
	}
	made := map[string]bool{}
	for _, g := range goldenFrames(t) {
		made[g.name] = true
	}
	for _, e := range readGolden(t) {
		t.Run(e.File, func(t *testing.T) {
			assert.True(t, made[e.File], "not made by goldenFrames")
			data, err := os.ReadFile(filepath.Join(goldenDir, e.File))
			require.NoError(t, err)
			img := openCVRGB(t, data)
			sum := sha256.Sum256(img.Pix)
			assert.Equal(t, [2]int{e.Width, e.Height}, [2]int{img.Width, img.Height})
			assert.Equal(t, e.RGBSHA256, hex.EncodeToString(sum[:]), "OpenCV's pixels")
		})
	}
}

// TestJPEGMatchesOpenCV checks that the libjpeg path decodes every kind of
// JPEG to exactly OpenCV's pixels, through Decode and the processor's
// view: the bit-identity of pixel_values for JPEG frames rests on it.
func TestJPEGMatchesOpenCV(t *testing.T) {
	scene := sceneImage(512, 384, 7)
	ref := readPNG(t, referenceDir+"/grad-1001x777.png")
	tests := []struct {
		name  string
		frame msgs.Frame
	}{
		{"512x384 q90 4:2:0", encodeFrame(t, scene, msgs.EncodingJPEG, 90)},
		{"1920x1080 q90", encodeFrame(t, sceneImage(1920, 1080, 3), msgs.EncodingJPEG, 90)},
		{"1920x1080 q90, Go's encoder", goJPEGFrame(t, sceneImage(1920, 1080, 4), 90)},
		{"1001x777 q95", encodeFrame(t, ref, msgs.EncodingJPEG, 95)},
		{"progressive 512x384", encodeJPEGParams(t, scene, false, gocv.IMWriteJpegQuality, 90, gocv.IMWriteJpegProgressive, 1)},
		{"restart intervals 512x384", encodeJPEGParams(t, scene, false, gocv.IMWriteJpegQuality, 90, gocv.IMWriteJpegRstInterval, 3)},
		{"CMYK 256x128", msgs.Frame{Encoding: msgs.EncodingJPEG, Width: 256, Height: 128, Data: dcJPEG(256, 128, 4, 0, cmykLevel)}},
		{"YCCK 256x128", msgs.Frame{Encoding: msgs.EncodingJPEG, Width: 256, Height: 128, Data: dcJPEG(256, 128, 4, 2, cmykLevel)}},
	}
	for _, g := range goldenFrames(t) {
		if g.enc == msgs.EncodingJPEG {
			h, err := jpegHeader(g.data)
			require.NoError(t, err)
			tests = append(tests, struct {
				name  string
				frame msgs.Frame
			}{g.name, msgs.Frame{Encoding: msgs.EncodingJPEG, Width: h.Width, Height: h.Height, Data: g.data}})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &tt.frame
			want := openCVRGB(t, f.Data)
			got, err := Decode(f)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want.Pix, got.Pix), "Decode differs from OpenCV")

			var scratch Image
			v, err := decodeView(context.Background(), f, &scratch)
			require.NoError(t, err)
			assert.False(t, v.bgr)
			assert.True(t, bytes.Equal(want.Pix, v.img.Pix), "decodeView differs from OpenCV")
		})
	}
}

// TestPNGMatchesOpenCV checks image/png's pixels against OpenCV's on
// every colour type and bit depth, alpha and tRNS, interlacing, and the
// reference images.
func TestPNGMatchesOpenCV(t *testing.T) {
	frames := []msgs.Frame{
		encodeFrame(t, testImage(33, 17, 5), msgs.EncodingPNG, 0),
		encodeFrame(t, readPNG(t, referenceDir+"/grad-1001x777.png"), msgs.EncodingPNG, 0),
	}
	names := []string{"OpenCV's encoder 33x17", "OpenCV's encoder 1001x777"}
	for _, g := range goldenFrames(t) {
		if g.enc == msgs.EncodingPNG {
			h, err := pngHeader(g.data)
			require.NoError(t, err)
			frames = append(frames, msgs.Frame{Encoding: msgs.EncodingPNG, Width: h.Width, Height: h.Height, Data: g.data})
			names = append(names, g.name)
		}
	}
	for i := range frames {
		t.Run(names[i], func(t *testing.T) {
			f := &frames[i]
			want := openCVRGB(t, f.Data)
			got, err := Decode(f)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want.Pix, got.Pix), "Decode differs from OpenCV")
		})
	}
}

// TestDecodeJPEGGarbled flips bytes in the scan data: libjpeg must fail
// or give OpenCV's pixels, never crash.
func TestDecodeJPEGGarbled(t *testing.T) {
	f := encodeFrame(t, sceneImage(64, 48, 1), msgs.EncodingJPEG, 90)
	for i := range 8 {
		g := f
		g.Data = append([]byte(nil), f.Data...)
		for j := len(g.Data) / 2; j < len(g.Data)-2; j += 7 + i {
			g.Data[j] ^= 0x5A
		}
		t.Run(fmt.Sprint("garbled ", i), func(t *testing.T) {
			got, err := Decode(&g)
			if err != nil {
				assert.ErrorIs(t, err, ErrInvalidFrame)
				return
			}
			assert.True(t, bytes.Equal(openCVRGB(t, g.Data).Pix, got.Pix))
		})
	}
}

// TestProcessFramesCompressed checks the processor's decoding paths (JPEG
// and PNG into its scratch) against decoding to RGB first.
func TestProcessFramesCompressed(t *testing.T) {
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	frames := []msgs.Frame{
		encodeFrame(t, sceneImage(640, 480, 1), msgs.EncodingJPEG, 90), // resized
		encodeFrame(t, sceneImage(512, 384, 2), msgs.EncodingPNG, 0),   // not resized
	}
	var b Batch
	require.NoError(t, p.ProcessFrames(context.Background(), &b, frames))
	off := 0
	for i := range frames {
		want, g, err := p.Preprocess(openCVRGB(t, frames[i].Data))
		require.NoError(t, err)
		assert.Equal(t, g, b.Grids[i])
		assert.Equal(t, want, b.PixelValues[off:off+len(want)], "frame %d", i)
		off += len(want)
	}
	assert.Len(t, b.PixelValues, off)
}
