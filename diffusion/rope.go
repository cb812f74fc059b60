package diffusion

import (
	"fmt"

	"vlanode/models"
)

// Rotary positions of the action tokens.
//
// Qwen3-VL's text layers use interleaved M-RoPE (transformers'
// Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope): with three position
// rows (T, H, W) and sections [s_T, s_H, s_W] of the head_dim/2 frequencies,
// frequency j takes its angle from the H row when j%3 == 1 and j < 3·s_H,
// from the W row when j%3 == 2 and j < 3·s_W, and from the T row otherwise;
// the angles are cat(f, f) under rotate_half. The source gives the action
// tokens position_ids [3, b, 64] whose three rows are all
// rope_deltas + offset + i. With equal rows every frequency's angle is
// p·inv_freq[j] whichever row it comes from, so for these tokens
// interleaved (and chunked) M-RoPE is exactly plain 1-D RoPE at position
// p: what models.RopeTables and backend.Rope compute.
// TestMRoPEEqualRowsIsPlainRoPE checks the index bookkeeping, and the
// reference test checks it against transformers.

// positions returns the rotary positions of n action tokens after prefix p:
// RopeDelta + Offset + i.
func (p *Prefix) positions(n int) []int {
	pos := make([]int, n)
	for i := range pos {
		pos[i] = p.RopeDelta + p.Offset + i
	}
	return pos
}

// uploadRope fills s's rotary tables for the action tokens after prefix p.
// Every Euler step of a sample uses the same positions, so the tables are
// rebuilt only when the first position changes.
func (e *Expert) uploadRope(p *Prefix, s *scratch) error {
	first := p.RopeDelta + p.Offset
	if s.ropeValid && s.ropeFirst == first {
		return nil
	}
	s.ropeValid = false
	models.RopeTables(s.cosH, s.sinH, p.positions(s.t), e.invFreq)
	if err := s.layer.SetRope(e.be, s.cosH, s.sinH); err != nil {
		return fmt.Errorf("diffusion: %w", err)
	}
	s.ropeFirst, s.ropeValid = first, true
	return nil
}
