package qwen3

import (
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/tensor"
)

// Scratch is the activation memory of one forward call of T tokens through
// the decoder layers, with the rotary tables of those tokens. It MUST be
// released with Free.
type Scratch struct {
	t         int
	h         backend.Tensor // [T, hidden]
	q, attn   backend.Tensor // [T, heads*headDim]
	k, v      backend.Tensor // [T, kvHeads*headDim]
	gate, up  backend.Tensor // [T, intermediate]
	cos, sin  backend.Tensor // [T, headDim/2]
	scale     float32
	allocated []backend.Tensor

	// The hand-off of a split MLP (mlpSplit): the exchange with the CPU
	// engine, and the CPU's tensors on its backend.
	ex    backend.Exchange
	cpuBE backend.Backend
	cpu   []backend.Tensor // x, h, y [T, hidden] on cpuBE
}

// NewScratch allocates the activations of T tokens for a model of
// configuration c.
func NewScratch(be backend.Backend, c *configs.Qwen3, T int) (*Scratch, error) {
	s := &Scratch{t: T, scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	half := c.HeadDim / 2
	for _, a := range []struct {
		dst  *backend.Tensor
		cols int
	}{
		{&s.h, c.HiddenSize}, {&s.q, c.NumAttentionHeads * c.HeadDim}, {&s.attn, c.NumAttentionHeads * c.HeadDim},
		{&s.k, c.NumKeyValueHeads * c.HeadDim}, {&s.v, c.NumKeyValueHeads * c.HeadDim},
		{&s.gate, c.IntermediateSize}, {&s.up, c.IntermediateSize}, {&s.cos, half}, {&s.sin, half},
	} {
		t, err := be.Alloc("activations", tensor.F32, T, a.cols)
		if err != nil {
			s.Free(be)
			return nil, fmt.Errorf("qwen3: allocating activations: %w", err)
		}
		*a.dst = t
		s.allocated = append(s.allocated, t)
	}
	return s, nil
}

// SharedScratch hands out scratches whose activations are shared: for a
// batch whose sequences run each unit one after the other (never two at
// once), every sequence's call of T tokens uses the same activations, and
// only its rotary tables, which it uploads once for all the layers, are
// its own. It serves one goroutine at a time and MUST be released with
// Free.
type SharedScratch struct {
	be backend.Backend
	c  *configs.Qwen3
	by map[int]*Scratch // the shared activations, by tokens
}

// NewSharedScratch makes a SharedScratch for a model of configuration c.
func NewSharedScratch(be backend.Backend, c *configs.Qwen3) *SharedScratch {
	return &SharedScratch{be: be, c: c, by: map[int]*Scratch{}}
}

// Get returns a scratch of T tokens over the shared activations, with
// rotary tables of its own; freeing it frees only those.
func (p *SharedScratch) Get(T int) (*Scratch, error) {
	base, ok := p.by[T]
	if !ok {
		var err error
		if base, err = NewScratch(p.be, p.c, T); err != nil {
			return nil, err
		}
		p.by[T] = base
	}
	s := &Scratch{t: T, h: base.h, q: base.q, attn: base.attn, k: base.k, v: base.v, gate: base.gate, up: base.up, scale: base.scale}
	for _, dst := range []*backend.Tensor{&s.cos, &s.sin} {
		t, err := p.be.Alloc("activations", tensor.F32, T, p.c.HeadDim/2)
		if err != nil {
			s.Free(p.be)
			return nil, fmt.Errorf("qwen3: allocating rotary tables: %w", err)
		}
		*dst = t
		s.allocated = append(s.allocated, t)
	}
	return s, nil
}

// Free releases the shared activations.
func (p *SharedScratch) Free() {
	for _, s := range p.by {
		s.Free(p.be)
	}
	clear(p.by)
}

// Rows is a view of rows [lo, lo+n) of the scratch: its activations and
// rotary tables, for a call over those rows of a larger one's input (a
// batch's sequence, run with the shapes it has alone). The view owns
// nothing: freeing it frees nothing, and it must not outlive s. It has no
// hand-off to the CPU of its own.
func (s *Scratch) Rows(be backend.Backend, lo, n int) (*Scratch, error) {
	v := &Scratch{t: n, scale: s.scale}
	for _, a := range []struct{ dst, src *backend.Tensor }{
		{&v.h, &s.h}, {&v.q, &s.q}, {&v.attn, &s.attn}, {&v.k, &s.k}, {&v.v, &s.v},
		{&v.gate, &s.gate}, {&v.up, &s.up}, {&v.cos, &s.cos}, {&v.sin, &s.sin},
	} {
		t, err := be.Rows(*a.src, lo, n)
		if err != nil {
			return nil, fmt.Errorf("qwen3: rows [%d, %d) of the activations: %w", lo, lo+n, err)
		}
		*a.dst = t
	}
	return v, nil
}

// Tokens is the number of tokens T the scratch holds.
func (s *Scratch) Tokens() int { return s.t }

// SetRope uploads the rotary tables of the T tokens: cos and sin are
// [T, headDim/2] row-major (see backend.Backend.Rope).
func (s *Scratch) SetRope(be backend.Backend, cos, sin []float32) error {
	if err := be.Upload(s.cos, cos); err != nil {
		return fmt.Errorf("qwen3: rotary cos table: %w", err)
	}
	if err := be.Upload(s.sin, sin); err != nil {
		return fmt.Errorf("qwen3: rotary sin table: %w", err)
	}
	return nil
}

// Free releases the activations (and the hand-off to the CPU, if a split
// MLP made one). With a hand-off it first waits for the backend: the CPU
// engine may still be computing the shares this scratch handed it (the
// queueing goroutine runs ahead of the device, and of the engine), and
// Sync returns once the Receives queued before it have their Posts
// (backend.HostExchange rule 6). Closing the exchange earlier failed the
// engine's waiting tasks ("exchange closed", a prefill pass of a text
// model on the H200) and released the device from Receives never posted;
// freeing the CPU's tensors earlier freed what a task still used.
func (s *Scratch) Free(be backend.Backend) {
	if s.ex != nil {
		_ = be.Sync()
		_ = s.ex.Close()
		s.ex = nil
	}
	for _, t := range s.cpu {
		s.cpuBE.Free(t)
	}
	s.cpu = nil
	for _, t := range s.allocated {
		be.Free(t)
	}
	s.allocated = nil
}

// split returns the scratch's exchange with the CPU engine and the CPU's
// tensors on its backend cpu, made on first use.
func (s *Scratch) split(be, cpu backend.Backend, c *configs.Qwen3) (backend.Exchange, []backend.Tensor, error) {
	if s.ex == nil {
		hx, ok := be.(backend.HostExchange)
		if !ok {
			return nil, nil, fmt.Errorf("qwen3: the %s backend cannot hand activations to the CPU", be.Name())
		}
		ex, err := hx.NewExchange(s.t*c.HiddenSize, s.t*c.HiddenSize)
		if err != nil {
			return nil, nil, fmt.Errorf("qwen3: hand-off to the CPU: %w", err)
		}
		s.ex = ex
	}
	if s.cpu == nil || s.cpuBE != cpu {
		s.cpuBE = cpu
		s.cpu = nil
		for range 3 {
			t, err := cpu.Alloc("activations", tensor.F32, s.t, c.HiddenSize)
			if err != nil {
				return nil, nil, fmt.Errorf("qwen3: the CPU's activations: %w", err)
			}
			s.cpu = append(s.cpu, t)
		}
	}
	return s.ex, s.cpu, nil
}
