package sample

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
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

// nextBySort is Next as a comparison sort defines it: every candidate's
// probability, the candidates sorted most probable first (equal ones in
// id order), the smallest prefix reaching top_p, a draw from it.
func nextBySort(s *Sampler, logits []float32) int {
	type cand struct {
		id int
		p  float64
	}
	maxV := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > maxV { // NaN is not
			maxV = float64(v)
		}
	}
	var cands []cand
	var sum float64
	for i, v := range logits {
		if isNaN(v) || math.IsInf(float64(v), -1) {
			continue
		}
		p := math.Exp((float64(v) - maxV) / s.Temperature)
		cands = append(cands, cand{i, p})
		sum += p
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(b.p, a.p) })
	var acc float64
	keep := len(cands)
	for i, c := range cands {
		acc += c.p / sum
		if acc >= s.TopP {
			keep = i + 1
			break
		}
	}
	cands = cands[:keep]
	var kept float64
	for _, c := range cands {
		kept += c.p
	}
	r := s.rng.Float64() * kept
	for _, c := range cands {
		r -= c.p
		if r < 0 {
			return c.id
		}
	}
	return cands[len(cands)-1].id
}

// TestNextMatchesSort checks the radix-sorted sampler against the
// comparison sort, draw for draw, on logits with ties (equal logits, and
// distinct logits whose probabilities round to one: far below the
// maximum they underflow to 0), signed zeros, NaN and -Inf, flat and
// peaked, at several temperatures and top_p values.
func TestNextMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	inf := float32(math.Inf(-1))
	shapes := map[string]func(i int) float32{
		"normal":     func(int) float32 { return float32(rng.NormFloat64()) },
		"peaked":     func(i int) float32 { return float32(rng.NormFloat64()) + float32(20*(i%97/96)) },
		"coarse":     func(int) float32 { return float32(rng.IntN(7)) - 3 }, // many equal logits
		"underflow":  func(int) float32 { return float32(-2000 * rng.Float64()) },
		"zeros":      func(i int) float32 { return float32(math.Copysign(0, float64(i%2*2-1))) },
		"nan-inf":    func(i int) float32 { return []float32{1, float32(math.NaN()), inf, -1, 0}[i%5] },
		"wide-range": func(int) float32 { return float32(rng.NormFloat64() * 1e4) },
	}
	for name, gen := range shapes {
		for _, n := range []int{1, 5, 300, 20_000} {
			logits := make([]float32, n)
			for i := range logits {
				logits[i] = gen(i)
			}
			if name == "underflow" {
				logits[n-1] = 0 // the maximum
			}
			for _, tp := range [][2]float64{{1, 1}, {0.6, 0.98}, {0.3, 0.5}, {2, 0.9}} {
				a, err := NewSampler(tp[0], tp[1], 11)
				require.NoError(t, err)
				b, err := NewSampler(tp[0], tp[1], 11)
				require.NoError(t, err)
				for d := range 8 {
					got, err := a.Next(logits)
					require.NoError(t, err)
					require.Equal(t, nextBySort(b, logits), got, "%s, %d logits, temperature %g, top_p %g, draw %d", name, n, tp[0], tp[1], d)
				}
			}
		}
	}
}

func TestNextNoCandidate(t *testing.T) {
	s, err := NewSampler(0.6, 0.98, 1)
	require.NoError(t, err)
	_, err = s.Next([]float32{float32(math.NaN()), float32(math.Inf(-1))})
	assert.ErrorIs(t, err, ErrNoCandidate)
}
