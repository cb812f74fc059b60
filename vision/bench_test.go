//go:build !nogocv

package vision

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"gocv.io/x/gocv"

	"vlanode/msgs"
)

// benchFrames returns n JPEG frames (quality 90) of w×h camera-like images:
// smooth gradients, hard-edged blocks and a little noise, different in
// each frame.
func benchFrames(b *testing.B, n, w, h int) []msgs.Frame {
	b.Helper()
	frames := make([]msgs.Frame, n)
	for i := range frames {
		img := sceneImage(w, h, uint32(i+1))
		frames[i] = encodeFrame(b, img, msgs.EncodingJPEG, 90)
		frames[i].Camera = fmt.Sprintf("cam%d", i%4)
	}
	return frames
}

// sceneImage is a camera-like test picture: gradients, blocks with hard
// edges, and ±4 levels of noise.
func sceneImage(w, h int, seed uint32) *Image {
	img := NewImage(w, h)
	s := seed*2654435761 | 1
	for y := range h {
		for x := range w {
			s ^= s << 13
			s ^= s >> 17
			s ^= s << 5
			n := int(s&7) - 4
			i := 3 * (y*w + x)
			block := ((x/(w/12+1))+(y/(h/8+1))+int(seed))%5 == 0
			r, g, bl := x*255/w, y*255/h, (x+y)*255/(w+h)
			if block {
				r, g, bl = 230-r/4, 40+g/3, 90
			}
			img.Pix[i] = clampByte(r + n)
			img.Pix[i+1] = clampByte(g + n)
			img.Pix[i+2] = clampByte(bl + n)
		}
	}
	return img
}

func clampByte(v int) uint8 { return uint8(min(max(v, 0), 255)) }

// encodeFrame encodes img as a JPEG (quality q) or PNG frame with OpenCV.
func encodeFrame(tb testing.TB, img *Image, enc msgs.Encoding, q int) msgs.Frame {
	tb.Helper()
	rgb, err := gocv.NewMatFromBytes(img.Height, img.Width, gocv.MatTypeCV8UC3, img.Pix)
	if err != nil {
		tb.Fatal(err)
	}
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
	if err != nil {
		tb.Fatal(err)
	}
	defer buf.Close()
	data := append([]byte(nil), buf.GetBytes()...)
	return msgs.Frame{V: msgs.Version, Camera: "front_wide_120fov", Encoding: enc, Width: img.Width, Height: img.Height, Data: data}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchProcessFrames times ProcessFrames on frames, reusing one Batch.
func benchProcessFrames(b *testing.B, frames []msgs.Frame) {
	p, err := NewProcessor(AlpamayoConfig())
	if err != nil {
		b.Fatal(err)
	}
	var batch Batch
	if err := p.ProcessFrames(&batch, frames); err != nil { // warm: buffers, filters
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		if err := p.ProcessFrames(&batch, frames); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/batch")
	// On a shared machine wall time includes waiting for other processes;
	// the CPU time of this process (all threads) does not.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1e3/float64(b.N), "cpu-ms/batch")
}

// BenchmarkProcessFrames16JPEG512x384 is the no-resize path: 16 JPEG frames
// of 512×384 decoded, normalized and patchified (768 rows each).
func BenchmarkProcessFrames16JPEG512x384(b *testing.B) {
	benchProcessFrames(b, benchFrames(b, 16, 512, 384))
}

// BenchmarkProcessFrames16JPEG1920x1080 is Alpamayo's standard workload:
// 16 JPEG frames of 1920×1080 decoded, resized to 576×320, normalized and
// patchified (720 rows each).
func BenchmarkProcessFrames16JPEG1920x1080(b *testing.B) {
	benchProcessFrames(b, benchFrames(b, 16, 1920, 1080))
}

// BenchmarkDecodeJPEG1920x1080 times one frame's decode alone.
func BenchmarkDecodeJPEG1920x1080(b *testing.B) {
	f := benchFrames(b, 1, 1920, 1080)[0]
	var img Image
	for b.Loop() {
		if err := DecodeInto(&img, &f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeJPEG512x384 times one frame's decode alone.
func BenchmarkDecodeJPEG512x384(b *testing.B) {
	f := benchFrames(b, 1, 512, 384)[0]
	var img Image
	for b.Loop() {
		if err := DecodeInto(&img, &f); err != nil {
			b.Fatal(err)
		}
	}
}
