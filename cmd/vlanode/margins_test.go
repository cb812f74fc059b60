package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompareLogits: the largest difference over finite logits, the
// reference's smallest top-1 margin, and a step whose top token moved,
// with both margins.
func TestCompareLogits(t *testing.T) {
	inf := float32(math.Inf(-1))
	ref := [][]float32{
		{1, 5, 2, inf},   // top 1 (margin 3)
		{4, 3.9, 0, inf}, // top 0 (margin 0.1)
		{0, 0, 7, 6},     // top 2 (margin 1)
	}
	got := [][]float32{
		{1, 5, 2.5, inf},    // |Δ| 0.5
		{3.95, 4.0, 0, inf}, // top 1 now: |Δ| 0.1
		{0, 0, 7, 6},
		{1, 2, 3, 4}, // a step the reference does not have
	}
	m := compareLogits(ref, got)
	assert.Equal(t, 3, m.Steps)
	assert.InDelta(t, 0.5, m.MaxAbsDiff, 1e-6)
	assert.Equal(t, 0, m.MaxDiffStep)
	assert.InDelta(t, 0.1, m.MinMargin, 1e-6)
	assert.Equal(t, 1, m.MinMarginStep)
	require.Len(t, m.Flips, 1)
	f := m.Flips[0]
	assert.Equal(t, 1, f.Step)
	assert.Equal(t, 0, f.RefToken)
	assert.Equal(t, 1, f.Token)
	assert.InDelta(t, 0.1, f.RefMargin, 1e-6)
	assert.InDelta(t, 0.05, f.Margin, 1e-6)
	assert.InDelta(t, 0.1, f.StepMaxDiff, 1e-6)
	assert.Contains(t, m.String(), "step 1: token 1 over the reference's 0")

	same := compareLogits(ref, ref)
	assert.Zero(t, same.MaxAbsDiff)
	assert.Empty(t, same.Flips)
	assert.Contains(t, same.String(), "every step's top token the reference's")
}

// TestTop2 takes the first of equal values, as the greedy pick does, and
// skips what is not finite.
func TestTop2(t *testing.T) {
	nan := float32(math.NaN())
	a, b := top2([]float32{nan, 2, 2, 1})
	assert.Equal(t, 1, a)
	assert.Equal(t, 2, b)
	a, b = top2([]float32{float32(math.Inf(-1)), 3})
	assert.Equal(t, 1, a)
	assert.Equal(t, -1, b)
}
