package qwen3

import (
	"context"
	"errors"
	"fmt"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/tensor"
)

// ErrNoFeed says that a Greedy run cannot go on: its first step was
// refused by the device-position ops (a cache longer than the decode
// kernels take). Nothing was appended; decode that token the usual way.
var ErrNoFeed = errors.New("qwen3: greedy steps fed on the device are refused here")

// Greedy is a run of greedy decode steps queued ahead of their tokens: on
// a backend.TokenFeed each step embeds, on the device, the token the step
// before it picked, and picks its own there, so the host queues step t+1
// before it reads token t and the device never waits for the host between
// steps (with a serial loop it waited ~0.1 ms a step: the host's work and
// its round trip). Every step is one replay of a graph captured during
// the first (layers, final norm, LM head, argmax), where the backend
// captures. The tokens and the cache are those of DecodeGreedy-style
// steps, bit for bit: the same ops in the same order.
type Greedy struct {
	s              *Session
	maskLo, maskHi int
	g              *greedyGraph
	pending        []backend.Fetch // picks of the queued steps not read yet, oldest first
	steps          int             // steps queued
}

// greedyGraph is the step's memory and graph, kept by the session across
// runs.
type greedyGraph struct {
	tok, pos  backend.Tensor // the token fed (then the one picked), the step's cache row (I32)
	x, h, out backend.Tensor // hidden state, its final norm, the logits
	outs      []backend.Tensor
	lo, hi    int // the mask the graph was captured with
	models.StepGraph
}

// StartGreedy begins a run of greedy steps that pick with the logits at
// [maskLo, maskHi] taken as -Inf. It returns nil, and no error, where the
// steps cannot be fed on the device: a backend that is not a
// backend.TokenFeed and backend.DevicePos, units not all in place
// (models.Direct), NoGraphs, HostGreedy or SerialGreedy set. The caller then decodes
// with DecodeGreedy-style steps. Close the run when done.
func (s *Session) StartGreedy(maskLo, maskHi int) (*Greedy, error) {
	m := s.m
	tf, ok := m.be.(backend.TokenFeed)
	if _, dp := m.be.(backend.DevicePos); !ok || !dp || m.NoGraphs || m.HostGreedy || m.SerialGreedy || !models.Direct(m.Exec) {
		return nil, nil
	}
	if g := s.greedy; g != nil {
		if g.Err() != nil {
			return nil, nil // refused before: the same again
		}
		if g.lo != maskLo || g.hi != maskHi {
			s.closeGreedy()
		}
	}
	if _, err := m.feedTable(tf); err != nil {
		return nil, err
	}
	if s.greedy == nil {
		g := &greedyGraph{lo: maskLo, hi: maskHi}
		s.greedy = g
		if err := g.alloc(m); err != nil {
			s.closeGreedy()
			return nil, fmt.Errorf("qwen3: greedy steps: %w", err)
		}
	}
	return &Greedy{s: s, maskLo: maskLo, maskHi: maskHi, g: s.greedy}, nil
}

// alloc allocates the step's tensors and views.
func (g *greedyGraph) alloc(m *Model) error {
	c := m.Config
	var err error
	for _, a := range []struct {
		dst   *backend.Tensor
		dt    tensor.DType
		shape []int
	}{
		{&g.tok, tensor.I32, []int{1}}, {&g.pos, tensor.I32, []int{1}},
		{&g.x, tensor.F32, []int{1, c.HiddenSize}}, {&g.h, tensor.F32, []int{1, c.HiddenSize}},
		{&g.out, tensor.F32, []int{1, c.VocabSize}},
	} {
		if *a.dst, err = m.be.Alloc("activations", a.dt, a.shape...); err != nil {
			return err
		}
	}
	for _, b := range m.Head {
		dst := g.out
		if len(m.Head) > 1 {
			if dst, err = columns(m.be, g.out, b.Lo, b.Rows); err != nil {
				return err
			}
		}
		g.outs = append(g.outs, dst)
	}
	return nil
}

// feedTable is the embedding table as EmbeddingAt reads it: the resident
// one, or a copy of the host one in page-locked memory the device reads
// (made on first use, kept until Close).
func (m *Model) feedTable(tf backend.TokenFeed) (backend.Tensor, error) {
	switch {
	case m.Embed != nil:
		return m.Embed, nil
	case m.embedFeed != nil:
		return m.embedFeed, nil
	}
	e, data, err := m.embedHost.Tensor("embed_tokens.weight")
	if err != nil {
		return nil, err
	}
	t, err := tf.HostTable(e.DType, e.Shape[0], e.Shape[1], data)
	if err != nil {
		return nil, fmt.Errorf("qwen3: the embedding table for device-fed steps: %w", err)
	}
	m.embedFeed = t
	return t, nil
}

// Queue queues one step: it feeds id when id >= 0 (a token the host
// knows), else the token the step queued before it picks; the step's
// keys and values go to cache row Len(), which it counts. cos and sin are
// the token's rotary tables ([1, headDim/2]). Next returns what the step
// picks. On the first step of a run whose device-position ops refuse it,
// Queue returns ErrNoFeed with nothing appended.
func (r *Greedy) Queue(ctx context.Context, id int32, cos, sin []float32) error {
	s, m, g := r.s, r.s.m, r.g
	if err := ctx.Err(); err != nil {
		return err
	}
	if id < 0 && r.steps == 0 {
		return fmt.Errorf("qwen3: the first greedy step needs its token: %w", models.ErrBadInput)
	}
	if id >= int32(m.Config.VocabSize) {
		return fmt.Errorf("qwen3: token id %d outside the vocabulary of %d: %w", id, m.Config.VocabSize, models.ErrBadInput)
	}
	if s.len+1 > s.cap {
		return fmt.Errorf("qwen3: a token after %d does not fit the session's %d: %w", s.len, s.cap, models.ErrBadInput)
	}
	dp, tf := m.be.(backend.DevicePos), m.be.(backend.TokenFeed)
	sc, err := s.scratch(1)
	if err != nil {
		return err
	}
	if id >= 0 {
		if err := dp.UploadI32(g.tok, []int32{id}); err != nil {
			return fmt.Errorf("qwen3: greedy step token: %w", err)
		}
	}
	if err := sc.SetRope(m.be, cos, sin); err != nil {
		return err
	}
	if err := dp.UploadI32(g.pos, []int32{int32(s.len)}); err != nil {
		return fmt.Errorf("qwen3: greedy step position: %w", err)
	}
	table := m.Embed
	if table == nil {
		table = m.embedFeed
	}
	step := func() error {
		if err := tf.EmbeddingAt(g.x, table, g.tok); err != nil {
			return fmt.Errorf("qwen3: embedding: %w", err)
		}
		if err := s.stepLayers(ctx, g.x, g.pos, sc); err != nil {
			return err
		}
		for i, b := range m.Head {
			if err := m.headBlock(i, b, g.h, g.x, g.outs[i]); err != nil {
				return err
			}
		}
		return tf.ArgmaxAt(g.tok, g.out, r.maskLo, r.maskHi)
	}
	done, err := g.Run(ctx, m.be, step)
	switch {
	case err != nil:
		return err
	case !done:
		return ErrNoFeed
	}
	f, err := tf.FetchI32(g.tok)
	if err != nil {
		return fmt.Errorf("qwen3: greedy step: %w", err)
	}
	r.pending = append(r.pending, f)
	r.steps++
	s.len++
	return nil
}

// Next waits for the token that the oldest step not yet read picked (not
// for the steps queued after it) and returns it: -1 when every logit was
// NaN.
func (r *Greedy) Next() (int, error) {
	if len(r.pending) == 0 {
		return 0, errors.New("qwen3: greedy: no step queued")
	}
	f := r.pending[0]
	r.pending = r.pending[1:]
	v, err := f.Wait()
	if err != nil {
		return 0, err
	}
	return int(v[0]), nil
}

// Drop takes the last queued step back: its token is not part of the
// sequence (Len drops by one; the next step overwrites its cache row),
// and its pick, if not read, is released.
func (r *Greedy) Drop() error {
	if r.steps == 0 || r.s.len == 0 {
		return errors.New("qwen3: greedy: no step to drop")
	}
	if n := len(r.pending); n > 0 {
		r.pending[n-1].Release()
		r.pending = r.pending[:n-1]
	}
	r.steps--
	r.s.len--
	return nil
}

// Close releases the picks not read. The session keeps the step's graph
// for its next run.
func (r *Greedy) Close() {
	for _, f := range r.pending {
		f.Release()
	}
	r.pending = nil
}

// closeGreedy frees the session's greedy step.
func (s *Session) closeGreedy() {
	g := s.greedy
	if g == nil {
		return
	}
	_ = g.Close()
	for _, t := range []backend.Tensor{g.tok, g.pos, g.x, g.h, g.out} {
		if t != nil {
			s.m.be.Free(t)
		}
	}
	s.greedy = nil
}
