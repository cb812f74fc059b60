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

// uploadRope fills s's rotary tables for the groups' action tokens: each
// group's rows at its prefix's positions. Every Euler step uses the same
// positions, so the tables are rebuilt only when the first position of a
// lone group changes (a pass of several groups always rebuilds them).
func (e *Expert) uploadRope(gs []group, s *scratch) error {
	first := gs[0].p.RopeDelta + gs[0].p.Offset
	if len(gs) == 1 && s.ropeValid && s.ropeFirst == first {
		return nil
	}
	s.ropeValid = false
	n := e.Waypoints()
	half := len(s.cosH) / s.t
	for i, g := range gs {
		models.RopeTables(s.cosH[i*n*half:(i+1)*n*half], s.sinH[i*n*half:(i+1)*n*half], g.p.positions(n), e.invFreq)
	}
	if err := s.layer.SetRope(e.be, s.cosH, s.sinH); err != nil {
		return fmt.Errorf("diffusion: %w", err)
	}
	s.ropeFirst, s.ropeValid = first, len(gs) == 1
	return nil
}
