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

	// Next's buffers, kept between calls: each logit's probability, the
	// candidates' sort keys and ids and the radix sort's other halves, its
	// digit counts, and the probabilities in sorted order.
	probs, sorted []float64
	keys, keys2   []uint32
	ids, ids2     []int32
	count         []int32
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

// Next picks a token from logits (which it does not modify): the
// candidates in order of probability (most probable first, equal ones in
// id order), the smallest prefix whose mass reaches top_p, and a draw
// from it.
func (s *Sampler) Next(logits []float32) (int, error) {
	if s.Temperature == 0 {
		if g := Greedy(logits); g >= 0 && !math.IsInf(float64(logits[g]), -1) {
			return g, nil
		}
		return 0, ErrNoCandidate
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
	if cap(s.probs) < len(logits) {
		s.probs = make([]float64, len(logits))
	}
	probs := s.probs[:len(logits)]
	var sum float64
	for i, v := range logits {
		p := math.Exp((float64(v) - maxV) / s.Temperature)
		probs[i] = p
		if !isNaN(v) { // -Inf adds its 0
			sum += p
		}
	}
	keys, ids := s.keys[:0], s.ids[:0]
	for i, v := range logits {
		if isNaN(v) || math.IsInf(float64(v), -1) {
			continue
		}
		keys = append(keys, descending(v))
		ids = append(ids, int32(i))
	}
	s.keys, s.ids = keys, ids
	// The probability grows with the logit, so the logits' order is the
	// probabilities' but where distinct logits round to one probability:
	// those runs go back to id order.
	ids = s.sort(keys, ids)
	if cap(s.sorted) < len(ids) {
		s.sorted = make([]float64, len(ids))
	}
	sorted := s.sorted[:len(ids)]
	for i, id := range ids {
		sorted[i] = probs[id]
	}
	for i := 0; i < len(ids); {
		j := i + 1
		for j < len(ids) && sorted[j] == sorted[i] {
			j++
		}
		if j-i > 1 {
			slices.Sort(ids[i:j])
		}
		i = j
	}
	// Keep the smallest prefix whose mass reaches top_p (always the first).
	var acc float64
	keep := len(ids)
	for i, p := range sorted {
		acc += p / sum
		if acc >= s.TopP {
			keep = i + 1
			break
		}
	}
	sorted = sorted[:keep]
	var kept float64
	for _, p := range sorted {
		kept += p
	}
	r := s.rng.Float64() * kept
	for i, p := range sorted {
		r -= p
		if r < 0 {
			return int(ids[i]), nil
		}
	}
	return int(ids[keep-1]), nil
}

// descending maps a finite logit to a key whose ascending order is the
// logits' descending order (equal logits, equal keys).
func descending(v float32) uint32 {
	b := math.Float32bits(v)
	if b&(1<<31) != 0 {
		return b // negative: larger magnitude, larger key
	}
	if b == 0 {
		return 1<<31 - 1 // +0 sorts with -0 (0x80000000 inverted below)
	}
	return ^(b | 1<<31)
}

// radixBits is the digit of sort's radix passes.
const radixBits = 16

// sort orders keys ascending and returns ids in that order, equal keys
// keeping their order: a stable least-significant-digit radix sort, linear
// in the candidates. A comparison sort of a vocabulary's 155K candidates
// took 25 ms a call on a 2-core EPYC (BenchmarkNextVocab155k), more than a
// decode step of the standard workload on the GPU; Next now takes 4.4 ms.
func (s *Sampler) sort(keys []uint32, ids []int32) []int32 {
	n := len(keys)
	if cap(s.keys2) < n {
		s.keys2, s.ids2 = make([]uint32, n), make([]int32, n)
	}
	if s.count == nil {
		s.count = make([]int32, 1<<radixBits)
	}
	tk, ti, count := s.keys2[:n], s.ids2[:n], s.count
	for shift := uint(0); shift < 32; shift += radixBits {
		clear(count)
		for _, k := range keys {
			count[(k>>shift)&(1<<radixBits-1)]++
		}
		if int(count[(keys[0]>>shift)&(1<<radixBits-1)]) == n {
			continue // one digit for all: the order stays
		}
		var at int32
		for d, c := range count {
			count[d] = at
			at += c
		}
		for i, k := range keys {
			d := (k >> shift) & (1<<radixBits - 1)
			j := count[d]
			count[d]++
			tk[j], ti[j] = k, ids[i]
		}
		keys, tk = tk, keys
		ids, ti = ti, ids
	}
	return ids
}
