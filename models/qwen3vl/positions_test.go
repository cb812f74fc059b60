package qwen3vl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models"
)

func TestRopeIndexHandChecked(t *testing.T) {
	// text ×2, a 1×4×6 image (2×3 merged tokens), text ×2, a 1×2×2 image
	// (one token), text ×1.
	types := []int32{0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0}
	pos, delta, err := RopeIndex(types, []Grid{{1, 4, 6}, {1, 2, 2}}, 2)
	require.NoError(t, err)
	// The first image starts at 2: t stays 2, h = 2 + row, w = 2 + column;
	// then the counter advances by max(4, 6)/2 = 3 to 5. The second image
	// sits at 7 and advances it by 1.
	assert.Equal(t, []int{0, 1, 2, 2, 2, 2, 2, 2, 5, 6, 7, 8}, pos[0])
	assert.Equal(t, []int{0, 1, 2, 2, 2, 3, 3, 3, 5, 6, 7, 8}, pos[1])
	assert.Equal(t, []int{0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8}, pos[2])
	assert.Equal(t, 8+1-12, delta)
}

func TestRopeIndexFrames(t *testing.T) {
	// A two-frame 2×2 grid: one token per frame, temporal positions 1 and 2.
	pos, delta, err := RopeIndex([]int32{0, 1, 1, 0}, []Grid{{2, 2, 2}}, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1, 2, 2}, pos[0])
	assert.Equal(t, []int{0, 1, 1, 2}, pos[1])
	assert.Equal(t, []int{0, 1, 1, 2}, pos[2])
	assert.Equal(t, -1, delta)
}

func TestRopeIndexTextOnly(t *testing.T) {
	pos, delta, err := RopeIndex([]int32{0, 0, 0}, nil, 2)
	require.NoError(t, err)
	for a := range pos {
		assert.Equal(t, []int{0, 1, 2}, pos[a])
	}
	assert.Zero(t, delta)
}

func TestRopeIndexErrors(t *testing.T) {
	cases := []struct {
		name  string
		types []int32
		grids []Grid
		want  string
	}{
		{"too few tokens", []int32{0, 1, 1, 0}, []Grid{{1, 4, 6}}, "has 2 image tokens"},
		{"two images glued", []int32{1, 1, 1, 1, 1, 1, 1}, []Grid{{1, 4, 6}, {1, 2, 2}}, "has 7 image tokens"},
		{"image without grid", []int32{1, 0, 1}, []Grid{{1, 2, 2}}, "has no image"},
		{"grid without tokens", []int32{0, 1, 0}, []Grid{{1, 2, 2}, {1, 2, 2}}, "1 runs of image tokens for 2 images"},
		{"video", []int32{0, 2}, nil, "videos are not supported"},
		{"bad type", []int32{0, 7}, nil, "type 7"},
		{"empty", nil, nil, "no tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := RopeIndex(c.types, c.grids, 2)
			assert.ErrorIs(t, err, models.ErrBadInput)
			assert.ErrorContains(t, err, c.want)
		})
	}
}

func TestTokenTypes(t *testing.T) {
	assert.Equal(t, []int32{0, 1, 1, 0}, TokenTypes([]int32{5, 9, 9, 8}, 9))
}

func TestFrameSegments(t *testing.T) {
	assert.Equal(t, []int{0, 24, 28, 32, 36}, frameSegments([]Grid{{1, 4, 6}, {3, 2, 2}}))
}
