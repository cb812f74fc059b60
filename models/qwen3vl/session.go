package qwen3vl

import (
	"context"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/models/qwen3"
	"vlanode/sample"
)

// Session is one sequence: the text decoder's KV cache, and the offset
// between cache rows and rotary positions left by the prompt's images.
type Session struct {
	m     *Model
	text  *qwen3.Session
	delta int
}

// NewSession allocates a KV cache for up to capacity tokens.
func (m *Model) NewSession(capacity int) (*Session, error) {
	t, err := m.Text.NewSession(capacity)
	if err != nil {
		return nil, err
	}
	return &Session{m: m, text: t}, nil
}

// Len is the number of tokens in the cache.
func (s *Session) Len() int { return s.text.Len() }

// Cap is the number of tokens the cache can hold.
func (s *Session) Cap() int { return s.text.Cap() }

// Cache returns text layer i's key and value caches, each
// [Cap(), kvHeads*headDim] F32 (keys after q/k-norm and rotary); rows
// [0, Len()) are valid. They belong to the session.
func (s *Session) Cache(layer int) (k, v backend.Tensor) { return s.text.Cache(layer) }

// RopeDelta is transformers' rope_deltas after Prefill: a text token at
// cache row r has position r + RopeDelta on all three axes.
func (s *Session) RopeDelta() int { return s.delta }

// NextPosition is the rotary position of the next appended token.
func (s *Session) NextPosition() int { return s.Len() + s.delta }

// Truncate drops the cached tokens from row n on; see qwen3.Session.
func (s *Session) Truncate(n int) error { return s.text.Truncate(n) }

// StepGraph reports whether decode steps replay a captured graph, and
// why not when the capture failed (qwen3.Session.StepGraph).
func (s *Session) StepGraph() (bool, error) { return s.text.StepGraph() }

// Close frees the KV cache.
func (s *Session) Close() { s.text.Close() }

// Prefill runs the prompt through the model into an empty session and
// returns float32 logits: every position's when all is set ([T, vocab]
// row-major), else the last one's ([vocab]).
func (s *Session) Prefill(ctx context.Context, p Prompt, all bool) ([]float32, error) {
	m := s.m
	if s.Len() != 0 {
		return nil, fmt.Errorf("qwen3vl: prefill into a session that holds %d tokens: %w", s.Len(), models.ErrBadInput)
	}
	if len(p.IDs) > s.Cap() {
		return nil, fmt.Errorf("qwen3vl: a prompt of %d tokens does not fit the session's %d: %w", len(p.IDs), s.Cap(), models.ErrBadInput)
	}
	types, err := m.checkTypes(p)
	if err != nil {
		return nil, err
	}
	feat, release, err := m.promptFeatures(ctx, p, types)
	if err != nil {
		return nil, err
	}
	defer release()
	var grids []Grid
	if feat != nil {
		grids = feat.Grids
	}
	runs, err := imageRuns(types, grids, m.Config.Vision.SpatialMergeSize)
	if err != nil {
		return nil, err
	}
	pos, delta, err := RopeIndex(types, grids, m.Config.Vision.SpatialMergeSize)
	if err != nil {
		return nil, err
	}
	x, err := m.embedPrompt(p.IDs, runs, feat)
	if err != nil {
		return nil, err
	}
	defer m.be.Free(x)
	cos, sin := m.ropeTables(len(p.IDs))
	MRopeTables(cos, sin, pos, m.invFreq, m.Config.MRopeSection)
	if err := s.text.ForwardEmbedded(ctx, x, cos, sin, m.deepstackHook(runs, feat)); err != nil {
		return nil, err
	}
	s.delta = delta
	return m.Text.Logits(x, all)
}

// Decode appends text tokens after the prompt (positions continue at
// NextPosition on all three axes) and returns their logits as Prefill
// does. Image tokens here are plain tokens: images enter through Prefill.
func (s *Session) Decode(ctx context.Context, ids []int32, all bool) ([]float32, error) {
	x, err := s.decode(ctx, ids)
	if err != nil {
		return nil, err
	}
	defer s.m.be.Free(x)
	return s.m.Text.Logits(x, all)
}

// DecodeGreedy is Decode of ids, then sample.Greedy of the last row's
// logits with those at [maskLo, maskHi] taken as -Inf: picked on the
// device where the backend can (backend.Argmaxer), so that a decode step
// brings back one index instead of the vocabulary's logits. It returns -1
// when every logit is NaN.
func (s *Session) DecodeGreedy(ctx context.Context, ids []int32, maskLo, maskHi int) (int, error) {
	x, err := s.decode(ctx, ids)
	if err != nil {
		return 0, err
	}
	defer s.m.be.Free(x)
	id, ok, err := s.m.Text.GreedyNext(x, maskLo, maskHi)
	if ok || err != nil {
		return id, err
	}
	logits, err := s.m.Text.Logits(x, false)
	if err != nil {
		return 0, err
	}
	for i := max(maskLo, 0); i <= maskHi && i < len(logits); i++ {
		logits[i] = float32(math.Inf(-1))
	}
	return sample.Greedy(logits), nil
}

// decode runs ids through the text model after the session's tokens and
// returns their hidden states, which the caller frees.
func (s *Session) decode(ctx context.Context, ids []int32) (backend.Tensor, error) {
	m := s.m
	if len(ids) == 0 {
		return nil, fmt.Errorf("qwen3vl: no tokens: %w", models.ErrBadInput)
	}
	x, err := m.Text.EmbedTokens(ids)
	if err != nil {
		return nil, err
	}
	cos, sin := s.textRope(len(ids))
	if err := s.text.ForwardEmbedded(ctx, x, cos, sin, nil); err != nil {
		m.be.Free(x)
		return nil, err
	}
	return x, nil
}

// textRope returns the rotary tables of n text tokens appended at
// NextPosition (the same position on all three axes).
func (s *Session) textRope(n int) (cos, sin []float32) {
	m := s.m
	var pos Positions
	for a := range pos {
		pos[a] = make([]int, n)
		for i := range n {
			pos[a][i] = s.NextPosition() + i
		}
	}
	cos, sin = m.ropeTables(n)
	MRopeTables(cos, sin, pos, m.invFreq, m.Config.MRopeSection)
	return cos, sin
}

// Greedy is a run of greedy decode steps fed on the device
// (qwen3.Greedy), at Qwen3-VL's positions.
type Greedy struct {
	s *Session
	r *qwen3.Greedy
}

// StartGreedy begins a run of greedy steps picking with the logits at
// [maskLo, maskHi] taken as -Inf (qwen3.Session.StartGreedy): nil, and no
// error, where the steps cannot be fed on the device (then use
// DecodeGreedy). Close the run when done.
func (s *Session) StartGreedy(maskLo, maskHi int) (*Greedy, error) {
	r, err := s.text.StartGreedy(maskLo, maskHi)
	if r == nil || err != nil {
		return nil, err
	}
	return &Greedy{s: s, r: r}, nil
}

// Queue queues a step feeding id (>= 0), or the token the step before it
// picks (id < 0), at NextPosition (qwen3.Greedy.Queue).
func (g *Greedy) Queue(ctx context.Context, id int32) error {
	cos, sin := g.s.textRope(1)
	return g.r.Queue(ctx, id, cos, sin)
}

// Next waits for the oldest unread step's pick (qwen3.Greedy.Next).
func (g *Greedy) Next() (int, error) { return g.r.Next() }

// Drop takes the last queued step back (qwen3.Greedy.Drop).
func (g *Greedy) Drop() error { return g.r.Drop() }

// Close releases the picks not read (qwen3.Greedy.Close).
func (g *Greedy) Close() { g.r.Close() }

func (m *Model) ropeTables(T int) (cos, sin []float32) {
	n := T * len(m.invFreq)
	return make([]float32, n), make([]float32, n)
}
