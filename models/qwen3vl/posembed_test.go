package qwen3vl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

func TestLinspace32(t *testing.T) {
	assert.Equal(t, []float32{0, 1.4, 2.8, 4.2, 5.6, 7}, linspace32(0, 7, 6))
	assert.Equal(t, []float32{0}, linspace32(0, 7, 1))
	assert.Equal(t, []float32{0, 7}, linspace32(0, 7, 2))
}

// f32Table makes a posTable of side×side rows of width 1 holding f(r, c).
func f32Table(side int, f func(r, c int) float32) posTable {
	v := make([]float32, side*side)
	for r := range side {
		for c := range side {
			v[r*side+c] = f(r, c)
		}
	}
	data, _ := tensor.FromF32(tensor.F32, v)
	return posTable{dt: tensor.F32, data: data, hidden: 1}
}

func TestBilinearPlanCorners(t *testing.T) {
	// A 2×2 grid over a 3×3 table samples its four corners exactly.
	plan := bilinearPlan(Grid{1, 2, 2}, 3, 2)
	require.Len(t, plan, 4)
	for i, want := range []int{0, 2, 6, 8} {
		c := plan[i]
		assert.Equal(t, want, c.idx[0], "patch %d", i)
		assert.Equal(t, float32(1), c.w[0]+c.w[1]+c.w[2]+c.w[3])
		if want%3 == 2 || want >= 6 { // last row or column: the ceil index is clipped
			continue
		}
		assert.Equal(t, [4]float32{1, 0, 0, 0}, c.w, "patch %d", i)
	}
}

func TestInterpolateLinearTable(t *testing.T) {
	// Bilinear interpolation reproduces a linear table: sampling a 3×3 table
	// of 10·r + c at a 4×6 grid gives 10·h + w at h = linspace(0, 2, 4),
	// w = linspace(0, 2, 6), in the 2×2 merge-block order.
	tab := f32Table(3, func(r, c int) float32 { return float32(10*r + c) })
	out, err := interpolatePositions(tab, &gridCache{}, []Grid{{2, 4, 6}}, 3, 2)
	require.NoError(t, err)
	require.Len(t, out, 2*24)
	hs, ws := linspace32(0, 2, 4), linspace32(0, 2, 6)
	rows, cols := patchCoords([]Grid{{2, 4, 6}}, 2)
	for p := range out {
		want := 10*hs[rows[p]] + ws[cols[p]]
		assert.InDelta(t, want, out[p], 2e-6, "patch %d (row %d, col %d)", p, rows[p], cols[p])
	}
	assert.Equal(t, out[:24], out[24:], "the second frame repeats the first")
}

func TestInterpolateReadsBF16(t *testing.T) {
	v := []float32{1, 2, 3, 4}
	data, err := tensor.FromF32(tensor.BF16, v)
	require.NoError(t, err)
	out, err := interpolatePositions(posTable{dt: tensor.BF16, data: data, hidden: 1}, &gridCache{}, []Grid{{1, 2, 2}}, 2, 2)
	require.NoError(t, err)
	assert.Equal(t, v, out)
	_, err = interpolatePositions(posTable{dt: tensor.BF16, data: data[:4], hidden: 1}, &gridCache{}, []Grid{{1, 2, 2}}, 2, 2)
	assert.ErrorContains(t, err, "outside")
}

// interpolatePositions is gridPositions for each of grids, put together.
func interpolatePositions(t posTable, cache *gridCache, grids []Grid, side, merge int) ([]float32, error) {
	var out []float32
	for _, g := range grids {
		v, err := gridPositions(t, cache, g, side, merge)
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	return out, nil
}

// TestPositionCache: repeated and cached grids give the same rows as a
// fresh computation, each grid computed once.
func TestPositionCache(t *testing.T) {
	const hidden, side = 3, 4
	vals := make([]float32, side*side*hidden)
	for i := range vals {
		vals[i] = float32(i%7) - 3
	}
	data, err := tensor.FromF32(tensor.F32, vals)
	require.NoError(t, err)
	tab := posTable{dt: tensor.F32, data: data, hidden: hidden}
	grids := []Grid{{1, 4, 6}, {1, 6, 4}, {1, 4, 6}}
	var cache gridCache
	first, err := interpolatePositions(tab, &cache, grids, side, 2)
	require.NoError(t, err)
	var want []float32
	for _, g := range grids {
		one, err := interpolateGrid(tab, g, side, 2)
		require.NoError(t, err)
		want = append(want, one...)
	}
	require.Equal(t, want, first)
	require.Len(t, cache.entries, 2)
	a, err := gridPositions(tab, &cache, grids[0], side, 2)
	require.NoError(t, err)
	b, err := gridPositions(tab, &cache, grids[2], side, 2)
	require.NoError(t, err)
	assert.Same(t, &a[0], &b[0], "a grid seen before reuses its rows")
}
