package sample

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGreedy(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		name   string
		logits []float32
		want   int
	}{
		{"max", []float32{0, 3, 1}, 1},
		{"tie goes to lowest", []float32{2, 5, 5}, 1},
		{"negative", []float32{-3, -1, -2}, 1},
		{"nan skipped", []float32{nan, 1, 0}, 1},
		{"all -inf picks first", []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { assert.Equal(t, c.want, Greedy(c.logits)) })
	}
}

func TestSamplerValidation(t *testing.T) {
	_, err := NewSampler(-1, 0.9, 1)
	assert.ErrorContains(t, err, "temperature")
	_, err = NewSampler(1, 0, 1)
	assert.ErrorContains(t, err, "top_p")
	_, err = NewSampler(1, 1.5, 1)
	assert.ErrorContains(t, err, "top_p")
}

func TestTopPKeepsNucleus(t *testing.T) {
	// Probabilities ≈ 0.64, 0.24, 0.09, 0.03: top_p 0.8 keeps the first two.
	logits := []float32{3, 2, 1, 0}
	s, err := NewSampler(1, 0.8, 7)
	require.NoError(t, err)
	seen := map[int]int{}
	for i := 0; i < 2000; i++ {
		id, err := s.Next(logits)
		require.NoError(t, err)
		seen[id]++
	}
	assert.Zero(t, seen[2]+seen[3], "tokens outside the nucleus were drawn")
	assert.InDelta(t, 0.64/0.88, float64(seen[0])/2000, 0.05)
}

func TestSamplerReproducible(t *testing.T) {
	logits := []float32{1, 1.1, 0.9, 1.2, 0.5}
	draw := func() []int {
		s, err := NewSampler(0.7, 0.95, 42)
		require.NoError(t, err)
		out := make([]int, 50)
		for i := range out {
			out[i], err = s.Next(logits)
			require.NoError(t, err)
		}
		return out
	}
	assert.Equal(t, draw(), draw())
}

func TestTemperatureZeroIsGreedy(t *testing.T) {
	s, err := NewSampler(0, 1, 1)
	require.NoError(t, err)
	id, err := s.Next([]float32{0, 9, 3})
	require.NoError(t, err)
	assert.Equal(t, 1, id)
	_, err = s.Next([]float32{float32(math.Inf(-1))})
	assert.ErrorIs(t, err, ErrNoCandidate)
}
