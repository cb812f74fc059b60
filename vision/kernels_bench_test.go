package vision

import (
	"context"
	"testing"

	"vlanode/msgs"
)

// BenchmarkResize1920x1080 times one 1920×1080 → 576×320 resize on one
// goroutine.
func BenchmarkResize1920x1080(b *testing.B) {
	src := testImage(1920, 1080, 7)
	r, err := NewResizer(1920, 1080, 576, 320)
	if err != nil {
		b.Fatal(err)
	}
	var dst Image
	var s ResizeScratch
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Resize(&dst, src, &s, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPatchify512x384 times normalize + patchify of one 512×384 image
// on one goroutine.
func BenchmarkPatchify512x384(b *testing.B) {
	p, err := NewProcessor(AlpamayoConfig(), WithWorkers(1))
	if err != nil {
		b.Fatal(err)
	}
	img := testImage(512, 384, 3)
	dst := make([]float32, 768*p.RowSize())
	b.SetBytes(int64(4 * len(dst)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.PreprocessInto(dst, img); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRawFrames times ProcessFrames on n rgb8 frames of w×h, which need
// no decoding: the processor's own cost, also in a nogocv build.
func benchRawFrames(b *testing.B, n, w, h int) {
	frames := make([]msgs.Frame, n)
	for i := range frames {
		frames[i] = rawFrame(testImage(w, h, uint32(i+1)), msgs.EncodingRGB8, 0)
	}
	p, err := NewProcessor(AlpamayoConfig())
	if err != nil {
		b.Fatal(err)
	}
	var batch Batch
	if err := p.ProcessFrames(context.Background(), &batch, frames); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := p.ProcessFrames(context.Background(), &batch, frames); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/batch")
}

// BenchmarkProcessFrames16RGB8512x384: normalize + patchify of 16 raw frames.
func BenchmarkProcessFrames16RGB8512x384(b *testing.B) { benchRawFrames(b, 16, 512, 384) }

// BenchmarkProcessFrames16RGB81920x1080: resize + normalize + patchify of
// 16 raw 1920×1080 frames.
func BenchmarkProcessFrames16RGB81920x1080(b *testing.B) { benchRawFrames(b, 16, 1920, 1080) }
