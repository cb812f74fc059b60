package vision

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"vlanode/msgs"
)

// benchFrames returns n JPEG frames (quality 90, 4:2:0, Go's encoder, so
// that a build without OpenCV has them too) of w×h camera-like images:
// smooth gradients, hard-edged blocks and a little noise, different in
// each frame.
func benchFrames(b *testing.B, n, w, h int) []msgs.Frame {
	b.Helper()
	frames := make([]msgs.Frame, n)
	for i := range frames {
		img := sceneImage(w, h, uint32(i+1))
		frames[i] = goJPEGFrame(b, img, 90)
		frames[i].Camera = fmt.Sprintf("cam%d", i%4)
	}
	return frames
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
	if err := p.ProcessFrames(context.Background(), &batch, frames); err != nil { // warm: buffers, filters
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		if err := p.ProcessFrames(context.Background(), &batch, frames); err != nil {
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
