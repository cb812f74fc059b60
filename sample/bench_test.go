package sample

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkNextVocab155k(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 155697)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	s, err := NewSampler(0.6, 0.98, 1)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if _, err := s.Next(logits); err != nil {
			b.Fatal(err)
		}
	}
}
