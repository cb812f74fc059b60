package backend

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPatchImageCheck(t *testing.T) {
	var lut [3][256]float32
	// 40 → 32 columns: two taps each from [i, i+2).
	h := &ResizeFilter{In: 40, Out: 32, Taps: 2, Start: make([]int32, 32), Count: make([]int32, 32), Weights: make([]int32, 64), Precision: 14}
	for i := range 32 {
		h.Start[i], h.Count[i] = int32(i), 2
	}
	good := PatchImage{Width: 40, Height: 16, Horizontal: h, Norm: &lut, PatchSize: 4, MergeSize: 2, TemporalPatch: 2, Row: 3}
	assert.NoError(t, good.Check())
	assert.Equal(t, 32, good.OutWidth())
	assert.Equal(t, 16, good.OutHeight())
	assert.Equal(t, 8*4, good.Patches())
	assert.Equal(t, 3*2*4*4, good.RowSize())
	assert.Equal(t, 3*40*16, good.Bytes())

	for _, tt := range []struct {
		name string
		edit func(im *PatchImage)
		msg  string
	}{
		{"no table", func(im *PatchImage) { im.Norm = nil }, "no normalization table"},
		{"filter for another width", func(im *PatchImage) { im.Width = 41 }, "horizontal filter: from 40 to 32 samples, 2 taps, for 41"},
		{"tap past the input", func(im *PatchImage) {
			f := *h
			f.Start = append([]int32(nil), h.Start...)
			f.Start[31] = 39
			im.Horizontal = &f
		}, "output 31 reads [39, 41) of 40"},
		{"short weights", func(im *PatchImage) {
			f := *h
			f.Weights = f.Weights[:10]
			im.Horizontal = &f
		}, "10 weights for 32 outputs of 2 taps"},
		{"not whole merge blocks", func(im *PatchImage) { im.Height = 12 }, "resized to 32×12, not a multiple of 8"},
		{"negative row", func(im *PatchImage) { im.Row = -1 }, "row -1"},
		{"no patch", func(im *PatchImage) { im.PatchSize = 0 }, "patch 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			im := good
			tt.edit(&im)
			assert.ErrorContains(t, im.Check(), tt.msg)
		})
	}
}
