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

// HostPrefix makes a Prefix on the expert's backend from a VLM cache held
// on the host (a reference's, or one saved elsewhere): k and v hold each
// layer's length cached rows, [layers][length][kvHeads·headDim] row-major.
// Each layer's K and V become F32 [length+Waypoints, kvHeads·headDim]
// tensors (purpose "kv-cache"), with room for the action tokens' rows;
// FreePrefix releases them. (Where a backend keeps bf16 caches, cuda's
// flash kernels round float K and V to bf16 as they load them: the values
// a bf16 cache would hold, and ActionKV can read float rows back.)
func (e *Expert) HostPrefix(k, v []float32, length, offset, ropeDelta int) (Prefix, error) {
	c := &e.Config.Expert
	kvw := c.NumKeyValueHeads * c.HeadDim
	p := Prefix{Len: length, Offset: offset, RopeDelta: ropeDelta}
	want := c.NumHiddenLayers * length * kvw
	if length < 0 || len(k) != want || len(v) != want {
		return p, fmt.Errorf("diffusion: a cache of %d and %d values for %d rows, want %d×%d×%d: %w",
			len(k), len(v), length, c.NumHiddenLayers, length, kvw, models.ErrBadInput)
	}
	rows := length + e.Waypoints()
	buf := make([]float32, rows*kvw)
	for i := range c.NumHiddenLayers {
		var kv KV
		for _, h := range []struct {
			dst *backend.Tensor
			src []float32
		}{{&kv.K, k}, {&kv.V, v}} {
			t, err := e.be.Alloc("kv-cache", tensor.F32, rows, kvw)
			if err != nil {
				e.FreePrefix(p)
				return Prefix{}, fmt.Errorf("diffusion: the cache of layer %d: %w", i, err)
			}
			*h.dst = t
			copy(buf, h.src[i*length*kvw:(i+1)*length*kvw])
			if err := e.be.Upload(t, buf); err != nil {
				e.be.Free(t)
				*h.dst = nil
				e.FreePrefix(p)
				return Prefix{}, fmt.Errorf("diffusion: uploading the cache of layer %d: %w", i, err)
			}
		}
		p.Cache = append(p.Cache, kv)
	}
	if err := p.check(c, e.Waypoints()); err != nil {
		e.FreePrefix(p)
		return Prefix{}, err
	}
	return p, nil
}

// FreePrefix releases the caches of a Prefix from HostPrefix.
func (e *Expert) FreePrefix(p Prefix) {
	for _, kv := range p.Cache {
		for _, t := range []backend.Tensor{kv.K, kv.V} {
			if t != nil {
				e.be.Free(t)
			}
		}
	}
}

// ActionKV downloads the keys and values the last Velocity or Hidden call
// wrote into p's F32 caches (HostPrefix's): rows [Len, Len+Waypoints) of
// every layer, [layers][Waypoints][kvHeads·headDim] row-major.
func (e *Expert) ActionKV(p Prefix) (k, v []float32, err error) {
	n := e.Waypoints()
	for i, kv := range p.Cache {
		for _, h := range []struct {
			dst *[]float32
			src backend.Tensor
		}{{&k, kv.K}, {&v, kv.V}} {
			rows, err := e.be.Rows(h.src, p.Len, n)
			if err != nil {
				return nil, nil, fmt.Errorf("diffusion: the action rows of layer %d's cache: %w", i, err)
			}
			got, err := e.be.Download(rows)
			if err != nil {
				return nil, nil, fmt.Errorf("diffusion: downloading the action rows of layer %d's cache: %w", i, err)
			}
			*h.dst = append(*h.dst, got...)
		}
	}
	return k, v, nil
}
