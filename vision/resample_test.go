package vision

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeysCubic(t *testing.T) {
	for _, tt := range []struct{ x, want float64 }{
		{0, 1}, {0.5, 0.5625}, {-0.5, 0.5625}, {1, 0}, {1.5, -0.0625}, {-1.5, -0.0625}, {2, 0}, {3, 0},
	} {
		assert.InDelta(t, tt.want, keysCubic(tt.x), 1e-15, "x = %g", tt.x)
	}
}

func TestAxisFilter(t *testing.T) {
	for _, tt := range []struct{ in, out int }{
		{1920, 576}, {1080, 320}, {640, 512}, {1001, 480}, {400, 384}, {240, 352}, {7, 3}, {3, 7}, {1, 5}, {5, 1},
	} {
		f, err := newAxisFilter(tt.in, tt.out)
		require.NoError(t, err)
		one := int32(1) << f.precision
		for i := range tt.out {
			lo, n := int(f.start[i]), int(f.count[i])
			require.True(t, n >= 1 && n <= f.taps && lo >= 0 && lo+n <= tt.in, "%d→%d sample %d: start %d count %d", tt.in, tt.out, i, lo, n)
			var sum, biggest int32
			for _, w := range f.weights[i*f.taps : (i+1)*f.taps] {
				sum += w
				biggest = max(biggest, w)
			}
			assert.Less(t, biggest, int32(1)<<15, "weights fit int16")
			// Each weight is rounded on its own, so the sum may miss one by
			// half a unit a tap.
			assert.InDelta(t, one, sum, float64(n), "%d→%d sample %d: weights sum", tt.in, tt.out, i)
		}
	}
	_, err := newAxisFilter(0, 3)
	assert.Error(t, err)
}

// floatResize is the same antialiased bicubic resize in float64 with
// unquantized weights, rounding to bytes between the passes: an independent
// check of the fixed-point kernels (within one level).
func floatResize(src *Image, w, h int) *Image {
	weights := func(in, out int) [][]float64 {
		scale := float64(in) / float64(out)
		support, inv := 2.0, 1.0
		if scale >= 1 {
			support, inv = 2*scale, 1/scale
		}
		ws := make([][]float64, out)
		for i := range out {
			center := scale * (float64(i) + 0.5)
			row := make([]float64, in)
			total := 0.0
			for j := max(0, int(center-support+0.5)); j < min(in, int(center+support+0.5)); j++ {
				row[j] = keysCubic((float64(j) - center + 0.5) * inv)
				total += row[j]
			}
			for j := range row {
				row[j] /= total
			}
			ws[i] = row
		}
		return ws
	}
	toByte := func(v float64) uint8 { return uint8(math.Min(255, math.Max(0, math.Round(v)))) }
	mid := NewImage(w, src.Height)
	hw := weights(src.Width, w)
	for y := range src.Height {
		for x := range w {
			for c := range 3 {
				s := 0.0
				for j, k := range hw[x] {
					s += k * float64(src.Pix[3*(y*src.Width+j)+c])
				}
				mid.Pix[3*(y*w+x)+c] = toByte(s)
			}
		}
	}
	out := NewImage(w, h)
	vw := weights(src.Height, h)
	for y := range h {
		for x := range 3 * w {
			s := 0.0
			for j, k := range vw[y] {
				s += k * float64(mid.Pix[j*3*w+x])
			}
			out.Pix[y*3*w+x] = toByte(s)
		}
	}
	return out
}

func TestResizeAgainstFloat(t *testing.T) {
	src := testImage(97, 61, 9)
	for _, size := range [][2]int{{32, 32}, {64, 48}, {96, 64}, {160, 96}, {97, 30}, {40, 61}, {200, 61}, {97, 150}} {
		got, err := Resize(src, size[0], size[1])
		require.NoError(t, err)
		exact, maxDiff := compareBytes(got.Pix, floatResize(src, size[0], size[1]).Pix)
		// One pass is within a level; a level off after the first pass can
		// become two after the second, whose weights add up to more than 1
		// in absolute value.
		limit := 2
		if size[0] == src.Width || size[1] == src.Height {
			limit = 1
		}
		assert.LessOrEqual(t, maxDiff, limit, "%v", size)
		assert.Greater(t, exact, 0.95, "%v", size)
	}
}

func TestResizeWorkersAgree(t *testing.T) {
	src := testImage(301, 203, 4)
	r, err := NewResizer(301, 203, 128, 96)
	require.NoError(t, err)
	var one, three Image
	require.NoError(t, r.Resize(&one, src, nil, 1))
	var s ResizeScratch
	require.NoError(t, r.Resize(&three, src, &s, 3))
	assert.Equal(t, one, three)
	require.NoError(t, r.Resize(&three, src, &s, 2), "scratch reused with fewer workers")
	assert.Equal(t, one, three)
}

func TestResizeSameSizeCopies(t *testing.T) {
	src := testImage(16, 8, 1)
	got, err := Resize(src, 16, 8)
	require.NoError(t, err)
	assert.Equal(t, src, got)
}

func TestResizeConstantImage(t *testing.T) {
	for _, v := range []uint8{0, 1, 128, 254, 255} {
		src := NewImage(50, 40)
		for i := range src.Pix {
			src.Pix[i] = v
		}
		got, err := Resize(src, 23, 71)
		require.NoError(t, err)
		_, maxDiff := compareBytes(got.Pix, func() []uint8 {
			b := make([]uint8, len(got.Pix))
			for i := range b {
				b[i] = v
			}
			return b
		}())
		assert.LessOrEqual(t, maxDiff, 1, "constant %d", v)
	}
}

func TestResizerErrors(t *testing.T) {
	_, err := NewResizer(0, 1, 1, 1)
	assert.Error(t, err)
	r, err := NewResizer(8, 8, 4, 4)
	require.NoError(t, err)
	assert.Error(t, r.Resize(new(Image), testImage(9, 8, 1), nil, 1))
	assert.Error(t, r.Resize(new(Image), &Image{Width: 8, Height: 8}, nil, 1))
}
