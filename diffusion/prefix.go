package diffusion

import (
	"fmt"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/tensor"
)

// KV is one VLM layer's KV cache as the expert reads it: K and V F32
// [capacity, kvHeads·headDim], rows [0, Prefix.Len) holding the keys
// (after k_norm and rotary) and values of the prompt and the generated
// tokens. The expert writes its own keys and values into rows
// [Len, Len+Waypoints) on every call, so the capacity must be at least
// Len + Waypoints; the rows are overwritten by each Euler step and Len
// never grows (the source appends and crops back).
type KV struct {
	K, V backend.Tensor
}

// Prefix is what the expert needs from the VLM after reasoning, for one
// sample (each sample has its own reasoning and so its own cache).
type Prefix struct {
	// Cache holds the VLM's cache of each layer; expert layer i reads
	// Cache[i] (the expert has as many layers as the VLM).
	Cache []KV
	// Len is L, the number of cached tokens: the prompt and the generated
	// tokens but the last sampled one, which generate never fed back. The
	// cache holds <|traj_future_start|>.
	Len int
	// Offset is the index (in prompt + generated tokens) of the first
	// <|traj_future_start|> plus one, or the length of the whole sequence
	// when none was generated. Cache rows [Offset, Len) — whatever was
	// generated after the start token — are hidden from the action tokens.
	Offset int
	// RopeDelta is the VLM's rope_deltas: its M-RoPE position of the next
	// text token minus its sequence index (negative with images). The
	// action tokens sit at rotary positions RopeDelta + Offset + i.
	RopeDelta int
}

// check validates p against the expert's configuration.
func (p *Prefix) check(c *ExpertConfig, waypoints int) error {
	if len(p.Cache) != c.NumHiddenLayers {
		return fmt.Errorf("diffusion: prefix has the cache of %d layers, the expert %d: %w", len(p.Cache), c.NumHiddenLayers, models.ErrBadInput)
	}
	if p.Len < 0 || p.Offset < 0 || p.Offset > p.Len+1 {
		return fmt.Errorf("diffusion: prefix of %d tokens with offset %d (want 0 <= offset <= len+1): %w", p.Len, p.Offset, models.ErrBadInput)
	}
	kvw := c.NumKeyValueHeads * c.HeadDim
	for i, kv := range p.Cache {
		for _, t := range []struct {
			name string
			t    backend.Tensor
		}{{"K", kv.K}, {"V", kv.V}} {
			if t.t == nil {
				return fmt.Errorf("diffusion: layer %d: no %s cache: %w", i, t.name, models.ErrBadInput)
			}
			rows, cols := backend.Matrix(t.t)
			if dt := t.t.DType(); (dt != tensor.F32 && dt != tensor.BF16) || cols != kvw || rows < p.Len+waypoints {
				return fmt.Errorf("diffusion: layer %d: %s cache %v %v, want F32 or BF16 [>= %d, %d] (%d cached tokens + %d action tokens): %w",
					i, t.name, dt, t.t.Shape(), p.Len+waypoints, kvw, p.Len, waypoints, models.ErrBadInput)
			}
		}
	}
	return nil
}

// maskFrom is the first hidden cache row; rows [maskFrom, Len) are hidden.
func (p *Prefix) maskFrom() int { return min(p.Offset, p.Len) }
