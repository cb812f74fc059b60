package diffusion

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// interleavedMRoPEAngles follows transformers' apply_interleaved_mrope: the
// angle of frequency j comes from the H row when j%3 == 1 and j < 3·s_H,
// from the W row when j%3 == 2 and j < 3·s_W, else from the T row.
func interleavedMRoPEAngles(rows [3]int, sections [3]int, invFreq []float32) []float32 {
	out := make([]float32, len(invFreq))
	for j, f := range invFreq {
		row := 0
		switch {
		case j%3 == 1 && j < 3*sections[1]:
			row = 1
		case j%3 == 2 && j < 3*sections[2]:
			row = 2
		}
		out[j] = float32(rows[row]) * f
	}
	return out
}

// TestMRoPEEqualRowsIsPlainRoPE: with the three position rows equal, as the
// source gives the action tokens, interleaved M-RoPE's angles are plain
// RoPE's; with unequal rows (image tokens) they are not.
func TestMRoPEEqualRowsIsPlainRoPE(t *testing.T) {
	inv := make([]float32, 64)
	for j := range inv {
		inv[j] = 1 / float32(j+1)
	}
	sections := [3]int{24, 20, 20}
	for _, p := range []int{0, 17, 3093} {
		plain := make([]float32, len(inv))
		for j, f := range inv {
			plain[j] = float32(p) * f
		}
		assert.Equal(t, plain, interleavedMRoPEAngles([3]int{p, p, p}, sections, inv), "position %d", p)
	}
	assert.NotEqual(t, interleavedMRoPEAngles([3]int{5, 5, 5}, sections, inv), interleavedMRoPEAngles([3]int{5, 2, 9}, sections, inv))
}

func TestPrefixPositions(t *testing.T) {
	p := Prefix{Len: 40, Offset: 29, RopeDelta: -13}
	assert.Equal(t, []int{16, 17, 18}, p.positions(3))
	assert.Equal(t, 29, p.maskFrom())
	p.Offset = 41 // no <|traj_future_start|>: offset = sequence length = L+1
	assert.Equal(t, 40, p.maskFrom(), "nothing hidden")
}
