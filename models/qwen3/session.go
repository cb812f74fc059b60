package qwen3

import (
	"context"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/tensor"
)

// scratch is the activation memory of one forward call of t tokens.
type scratch struct {
	t          int
	h          backend.Tensor // [t, hidden]
	q, attn    backend.Tensor // [t, heads*headDim]
	k, v       backend.Tensor // [t, kvHeads*headDim]
	gate, up   backend.Tensor // [t, intermediate]
	cos, sin   backend.Tensor // [t, headDim/2]
	scale      float32
	allocated  []backend.Tensor
	cosH, sinH []float32
}

// Session is the state of one sequence: its KV cache and position.
type Session struct {
	m      *Model
	kc, vc []backend.Tensor // per layer [capacity, kvHeads*headDim]
	len    int
	cap    int
}

// NewSession allocates a KV cache for up to capacity tokens.
func (m *Model) NewSession(capacity int) (*Session, error) {
	c := m.Config
	if capacity <= 0 || capacity > c.MaxPositionEmbeddings {
		return nil, fmt.Errorf("qwen3: session of %d tokens: %w (max_position_embeddings %d)", capacity, models.ErrBadInput, c.MaxPositionEmbeddings)
	}
	s := &Session{m: m, cap: capacity}
	kvw := c.NumKeyValueHeads * c.HeadDim
	for range m.Layers {
		k, err := m.be.Alloc("kv-cache", tensor.F32, capacity, kvw)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("qwen3: allocating the KV cache: %w", err)
		}
		v, err := m.be.Alloc("kv-cache", tensor.F32, capacity, kvw)
		if err != nil {
			m.be.Free(k)
			s.Close()
			return nil, fmt.Errorf("qwen3: allocating the KV cache: %w", err)
		}
		s.kc, s.vc = append(s.kc, k), append(s.vc, v)
	}
	return s, nil
}

// Len is the number of tokens in the cache.
func (s *Session) Len() int { return s.len }

// Close frees the KV cache.
func (s *Session) Close() {
	for i := range s.kc {
		s.m.be.Free(s.kc[i])
		s.m.be.Free(s.vc[i])
	}
	s.kc, s.vc = nil, nil
}

// Forward appends ids to the sequence and returns float32 logits: for every
// new position when all is set ([len(ids), vocab] row-major), else for the
// last one only ([vocab]).
func (s *Session) Forward(ctx context.Context, ids []int32, all bool) ([]float32, error) {
	m, c := s.m, s.m.Config
	T := len(ids)
	if T == 0 {
		return nil, fmt.Errorf("qwen3: no tokens: %w", models.ErrBadInput)
	}
	if s.len+T > s.cap {
		return nil, fmt.Errorf("qwen3: %d tokens after %d do not fit the session's %d: %w", T, s.len, s.cap, models.ErrBadInput)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= c.VocabSize {
			return nil, fmt.Errorf("qwen3: token %d is id %d, outside the vocabulary of %d: %w", i, id, c.VocabSize, models.ErrBadInput)
		}
	}
	sc, err := m.newScratch(T)
	if err != nil {
		return nil, err
	}
	defer sc.free(m.be)
	pos := make([]int, T)
	for i := range pos {
		pos[i] = s.len + i
	}
	models.RopeTables(sc.cosH, sc.sinH, pos, m.invFreq)
	if err := m.be.Upload(sc.cos, sc.cosH); err != nil {
		return nil, err
	}
	if err := m.be.Upload(sc.sin, sc.sinH); err != nil {
		return nil, err
	}
	x, err := m.be.Alloc("activations", tensor.F32, T, c.HiddenSize)
	if err != nil {
		return nil, err
	}
	defer m.be.Free(x)
	if err := m.be.Embedding(x, m.Embed, ids); err != nil {
		return nil, fmt.Errorf("qwen3: embedding: %w", err)
	}
	for i, l := range m.Layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := l.Forward(m.be, x, s.kc[i], s.vc[i], s.len, sc); err != nil {
			return nil, fmt.Errorf("qwen3: layer %d: %w", i, err)
		}
	}
	s.len += T
	return m.logits(x, all)
}

// logits applies the final norm and the LM head to all rows of x, or to
// its last row.
func (m *Model) logits(x backend.Tensor, all bool) ([]float32, error) {
	c := m.Config
	rows, _ := backend.Matrix(x)
	if !all {
		last, err := m.be.Rows(x, rows-1, 1)
		if err != nil {
			return nil, err
		}
		x, rows = last, 1
	}
	h, err := m.be.Alloc("activations", tensor.F32, rows, c.HiddenSize)
	if err != nil {
		return nil, err
	}
	defer m.be.Free(h)
	if err := m.be.RMSNorm(h, x, m.Norm, float32(c.RMSNormEps)); err != nil {
		return nil, fmt.Errorf("qwen3: final norm: %w", err)
	}
	out, err := m.be.Alloc("activations", tensor.F32, rows, c.VocabSize)
	if err != nil {
		return nil, err
	}
	defer m.be.Free(out)
	if err := m.be.MatMul(out, h, m.LMHead, nil); err != nil {
		return nil, fmt.Errorf("qwen3: lm head: %w", err)
	}
	return m.be.Download(out)
}

func (m *Model) newScratch(T int) (*scratch, error) {
	c := m.Config
	s := &scratch{t: T, scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	half := c.HeadDim / 2
	s.cosH, s.sinH = make([]float32, T*half), make([]float32, T*half)
	for _, a := range []struct {
		dst  *backend.Tensor
		cols int
	}{
		{&s.h, c.HiddenSize}, {&s.q, c.NumAttentionHeads * c.HeadDim}, {&s.attn, c.NumAttentionHeads * c.HeadDim},
		{&s.k, c.NumKeyValueHeads * c.HeadDim}, {&s.v, c.NumKeyValueHeads * c.HeadDim},
		{&s.gate, c.IntermediateSize}, {&s.up, c.IntermediateSize}, {&s.cos, half}, {&s.sin, half},
	} {
		t, err := m.be.Alloc("activations", tensor.F32, T, a.cols)
		if err != nil {
			s.free(m.be)
			return nil, fmt.Errorf("qwen3: allocating activations: %w", err)
		}
		*a.dst = t
		s.allocated = append(s.allocated, t)
	}
	return s, nil
}

func (s *scratch) free(be backend.Backend) {
	for _, t := range s.allocated {
		be.Free(t)
	}
	s.allocated = nil
}
