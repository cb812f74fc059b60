package vision

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSmartResize(t *testing.T) {
	c := AlpamayoConfig()
	tests := []struct {
		h, w, wantH, wantW int
		why                string
	}{
		{1080, 1920, 320, 576, "Alpamayo's cameras: scaled down to max_pixels, floored"},
		{480, 640, 384, 512, "scaled down"},
		{384, 512, 384, 512, "already valid"},
		{400, 512, 384, 512, "400/32 = 12.5 rounds half to even, to 12"},
		{432, 512, 384, 480, "432/32 = 13.5 rounds to 14: too many pixels, so both sides shrink"},
		{240, 320, 352, 480, "scaled up to min_pixels, ceiled"},
		{777, 1001, 384, 480, "odd size"},
		{1, 1, 416, 416, "tiny: rounds to 0, then scaled up"},
	}
	for _, tt := range tests {
		h, w, err := SmartResize(tt.h, tt.w, c.Factor(), c.MinPixels, c.MaxPixels)
		if assert.NoError(t, err, tt.why) {
			assert.Equal(t, [2]int{tt.wantH, tt.wantW}, [2]int{h, w}, "%d×%d (h×w): %s", tt.h, tt.w, tt.why)
		}
	}
}

func TestSmartResizeErrors(t *testing.T) {
	c := AlpamayoConfig()
	for _, tt := range []struct{ h, w int }{{1, 201}, {300, 1}, {0, 10}, {10, -1}} {
		_, _, err := SmartResize(tt.h, tt.w, c.Factor(), c.MinPixels, c.MaxPixels)
		assert.Error(t, err, "%d×%d", tt.h, tt.w)
	}
	_, _, err := SmartResize(1, 200, c.Factor(), c.MinPixels, c.MaxPixels)
	assert.NoError(t, err, "an aspect ratio of exactly 200 is allowed")
}
