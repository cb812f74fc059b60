package ntstore

import (
	"testing"
)

// want is Patch written out plainly.
func want(src []float32, size, rowStride, planeStride, channels, times int) []float32 {
	var out []float32
	for c := range channels {
		for range times {
			for y := range size {
				out = append(out, src[c*planeStride+y*rowStride:][:size]...)
			}
		}
	}
	return out
}

func TestPatch(t *testing.T) {
	src := make([]float32, 16384)
	for i := range src {
		src[i] = float32(i) + 0.25
	}
	for _, tt := range []struct{ size, rowStride, planeStride, channels, times int }{
		{16, 512, 1024, 3, 2}, // the Qwen3-VL patch
		{16, 16, 256, 3, 1},
		{8, 40, 400, 3, 2},
		{4, 7, 100, 2, 3},
		{14, 30, 500, 3, 2}, // Qwen2-VL: not a multiple of 4, plain copies
		{3, 5, 20, 1, 1},
	} {
		w := want(src[5:], tt.size, tt.rowStride, tt.planeStride, tt.channels, tt.times)
		buf := make([]float32, len(w)+8)
		for off := range 5 { // aligned (0, 4) and not
			dst := buf[off:][:len(w)]
			clear(buf)
			Patch(dst, src[5:], tt.size, tt.rowStride, tt.planeStride, tt.channels, tt.times)
			Fence()
			for i := range w {
				if dst[i] != w[i] {
					t.Fatalf("%+v, offset %d: value %d is %g, want %g", tt, off, i, dst[i], w[i])
				}
			}
			for i, v := range buf {
				if (i < off || i >= off+len(w)) && v != 0 {
					t.Fatalf("%+v, offset %d: wrote outside dst at %d", tt, off, i)
				}
			}
		}
	}
}

func TestPatchPanicsOnShortSlices(t *testing.T) {
	src := make([]float32, 100)
	for name, f := range map[string]func(){
		"dst": func() { Patch(make([]float32, 10), src, 4, 4, 16, 1, 1) },
		"src": func() { Patch(make([]float32, 64), src, 4, 30, 50, 2, 2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("short %s: no panic", name)
				}
			}()
			f()
		}()
	}
}
