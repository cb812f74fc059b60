package qwen3vl

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"vlanode/models"
)

func TestMRopeAxisQwen3VL8B(t *testing.T) {
	// [24, 20, 20] over 64 frequencies: height where j%3 == 1 and width
	// where j%3 == 2 below 60; temporal elsewhere, including 60..63.
	s := [3]int{24, 20, 20}
	count := [3]int{}
	for j := range 64 {
		a := mropeAxis(j, s)
		count[a]++
		switch {
		case j >= 60 || j%3 == 0:
			assert.Equal(t, 0, a, "frequency %d", j)
		case j%3 == 1:
			assert.Equal(t, 1, a, "frequency %d", j)
		default:
			assert.Equal(t, 2, a, "frequency %d", j)
		}
	}
	assert.Equal(t, s, count, "each axis gets its section's count")
}

func TestMRopeAxisSmallSection(t *testing.T) {
	// [4, 2, 2] over 8 frequencies: T H W T H W T T.
	want := []int{0, 1, 2, 0, 1, 2, 0, 0}
	for j, w := range want {
		assert.Equal(t, w, mropeAxis(j, [3]int{4, 2, 2}), "frequency %d", j)
	}
}

func TestMRopeTables(t *testing.T) {
	inv := []float32{1, 0.5, 0.25, 0.125}
	pos := Positions{{3}, {5}, {7}} // one token at t=3, h=5, w=7
	cos, sin := make([]float32, 4), make([]float32, 4)
	MRopeTables(cos, sin, pos, inv, [3]int{2, 1, 1})
	// axes: T H W T
	for j, p := range []float64{3, 5, 7, 3} {
		a := p * float64(inv[j])
		assert.InDelta(t, math.Cos(a), cos[j], 1e-7, "cos %d", j)
		assert.InDelta(t, math.Sin(a), sin[j], 1e-7, "sin %d", j)
	}
	// With all three axes equal it is plain 1D rope.
	pos = Positions{{4}, {4}, {4}}
	c1, s1 := make([]float32, 4), make([]float32, 4)
	MRopeTables(cos, sin, pos, inv, [3]int{2, 1, 1})
	models.RopeTables(c1, s1, []int{4}, inv)
	assert.Equal(t, c1, cos)
	assert.Equal(t, s1, sin)
}

func TestPatchCoordsMergeOrder(t *testing.T) {
	// A 2×4 grid in 2×2 blocks: block (0,0) then block (0,1), each in raster order.
	rows, cols := patchCoords([]Grid{{1, 2, 4}}, 2)
	assert.Equal(t, []int{0, 0, 1, 1, 0, 0, 1, 1}, rows)
	assert.Equal(t, []int{0, 1, 0, 1, 2, 3, 2, 3}, cols)
}

func TestVisionRopeTables(t *testing.T) {
	// head_dim 8: two frequencies for the row, two for the column.
	inv := models.RopeInvFreq(4, 10000) // [1, 0.01]
	cos, sin := visionRopeTables([]Grid{{1, 2, 4}}, 2, inv)
	assert.Len(t, cos, 8*4)
	// patch 5 is at row 0, column 3
	p := 5
	want := []float64{0 * float64(inv[0]), 0 * float64(inv[1]), 3 * float64(inv[0]), 3 * float64(inv[1])}
	for i, a := range want {
		assert.InDelta(t, math.Cos(a), cos[p*4+i], 1e-7)
		assert.InDelta(t, math.Sin(a), sin[p*4+i], 1e-7)
	}
}
