// Package sample picks the next token from a row of logits: greedy argmax,
// or temperature and nucleus (top-p) sampling.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Greedy returns the index of the largest logit; ties go to the lowest
// index, as torch.argmax does. NaNs are never chosen.
func Greedy(logits []float32) int {
	best, bestV := -1, float32(math.Inf(-1))
	for i, v := range logits {
		if v > bestV || (best < 0 && !isNaN(v)) {
			best, bestV = i, v
		}
	}
	return best
}

func isNaN(v float32) bool { return v != v }

// Sampler draws tokens with temperature and top-p. The zero value is
// unusable; build one with NewSampler.
type Sampler struct {
	Temperature float64
	TopP        float64
	rng         *rand.Rand
}

// NewSampler returns a sampler seeded for reproducible draws. A temperature
// of 0 means greedy.
func NewSampler(temperature, topP float64, seed uint64) (*Sampler, error) {
	if temperature < 0 || math.IsNaN(temperature) {
		return nil, fmt.Errorf("sample: temperature %g must be ≥ 0", temperature)
	}
	if !(topP > 0 && topP <= 1) {
		return nil, fmt.Errorf("sample: top_p %g must be in (0, 1]", topP)
	}
	return &Sampler{Temperature: temperature, TopP: topP, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
}

// ErrNoCandidate is returned when every logit is -Inf or NaN.
var ErrNoCandidate = errors.New("sample: no finite logit to sample from")

// Next picks a token from logits (which it does not modify).
func (s *Sampler) Next(logits []float32) (int, error) {
	if s.Temperature == 0 {
		if g := Greedy(logits); g >= 0 && !math.IsInf(float64(logits[g]), -1) {
			return g, nil
		}
		return 0, ErrNoCandidate
	}
	type cand struct {
		id int
		p  float64
	}
	maxV := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > maxV {
			maxV = float64(v)
		}
	}
	if math.IsInf(maxV, -1) {
		return 0, ErrNoCandidate
	}
	cands := make([]cand, 0, len(logits))
	var sum float64
	for i, v := range logits {
		if isNaN(v) || math.IsInf(float64(v), -1) {
			continue
		}
		p := math.Exp((float64(v) - maxV) / s.Temperature)
		cands = append(cands, cand{i, p})
		sum += p
	}
	// Most probable first; equal probabilities in id order, so draws are
	// reproducible.
	slices.SortFunc(cands, func(a, b cand) int {
		switch {
		case a.p > b.p:
			return -1
		case a.p < b.p:
			return 1
		}
		return a.id - b.id
	})
	// Keep the smallest prefix whose mass reaches top_p (always the first).
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
			return c.id, nil
		}
	}
	return cands[len(cands)-1].id, nil
}
