package qwen3

import (
	"context"
	"errors"
	"fmt"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/tensor"
)

// Session is the state of one sequence: its KV cache and position.
type Session struct {
	m      *Model
	kc, vc []backend.Tensor // per layer [capacity, kvHeads*headDim], views of kAll and vAll
	kAll   backend.Tensor   // every layer's keys [layers*capacity, kvHeads*headDim]
	vAll   backend.Tensor
	len    int
	cap    int
	// step is the scratch of single-token calls, kept across decode steps
	// so that a step allocates and frees no device memory.
	step *Scratch
	// graph replays the decode step's layers, where the backend can.
	graph *stepGraph
	// greedy is the device-fed greedy step (StartGreedy).
	greedy *greedyGraph
}

// stepGraph is the decode step's layers captured in one graph: on a
// backend that captures (backend.Capturer) and reads positions from device
// memory (backend.DevicePos), with every unit computed in place
// (models.Direct), a step costs one launch instead of ~20 per layer. The
// first step runs op by op with the position on the device, which sizes
// the backend's scratch, and is captured while the GPU runs it; later
// ones replay the graph.
// The results are those of the op-by-op path, bit for bit.
type stepGraph struct {
	x, pos backend.Tensor // the step's hidden state [1, hidden], its position (I32)
	models.StepGraph
}

// LayerHook runs after decoder layer i with the residual stream x
// [T, hidden] of the tokens being appended; it may modify x in place
// (Qwen3-VL adds its DeepStack visual features there).
type LayerHook func(layer int, x backend.Tensor) error

// NewSession allocates a KV cache for up to capacity tokens: one tensor
// for every layer's keys and one for their values (the allocator rounds
// each block up to whole pages, so two blocks waste less than 2·layers),
// viewed per layer.
func (m *Model) NewSession(capacity int) (*Session, error) {
	c := m.Config
	if capacity <= 0 || capacity > c.MaxPositionEmbeddings {
		return nil, fmt.Errorf("qwen3: session of %d tokens: %w (max_position_embeddings %d)", capacity, models.ErrBadInput, c.MaxPositionEmbeddings)
	}
	s := &Session{m: m, cap: capacity}
	kvw := c.NumKeyValueHeads * c.HeadDim
	L := len(m.Layers)
	dt := KVCacheDType(m.be, c.HeadDim)
	for _, dst := range []*backend.Tensor{&s.kAll, &s.vAll} {
		t, err := m.be.Alloc("kv-cache", dt, L*capacity, kvw)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("qwen3: allocating the KV cache: %w", err)
		}
		*dst = t
	}
	for i := range L {
		k, err := m.be.Rows(s.kAll, i*capacity, capacity)
		if err != nil {
			s.Close()
			return nil, err
		}
		v, err := m.be.Rows(s.vAll, i*capacity, capacity)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.kc, s.vc = append(s.kc, k), append(s.vc, v)
	}
	return s, nil
}

// KVCacheDType is the element type of KV caches on be: what the backend
// asks for (cuda.Backend.KVCacheDType: bf16 where its attention kernels
// read it), else F32.
func KVCacheDType(be backend.Backend, headDim int) tensor.DType {
	if k, ok := be.(interface {
		KVCacheDType(headDim int) tensor.DType
	}); ok {
		return k.KVCacheDType(headDim)
	}
	return tensor.F32
}

// Len is the number of tokens in the cache.
func (s *Session) Len() int { return s.len }

// Cap is the number of tokens the cache can hold.
func (s *Session) Cap() int { return s.cap }

// Cache returns layer i's key and value caches, each [Cap(), kvHeads*headDim]
// of KVCacheDType (F32 on the cpu backend) with rotary-embedded keys; rows [0, Len()) are valid. The tensors
// belong to the session: valid until Close, not to be freed.
func (s *Session) Cache(layer int) (k, v backend.Tensor) { return s.kc[layer], s.vc[layer] }

// Truncate drops the cached tokens from position n on (n <= Len()), so that
// the next Forward overwrites them.
func (s *Session) Truncate(n int) error {
	if n < 0 || n > s.len {
		return fmt.Errorf("qwen3: truncate to %d tokens, the cache holds %d: %w", n, s.len, models.ErrBadInput)
	}
	s.len = n
	return nil
}

// StepGraph reports whether decode steps replay a captured graph, and why
// not when the capture failed.
func (s *Session) StepGraph() (bool, error) {
	var captured bool
	var errs []error
	if g := s.graph; g != nil {
		captured = g.Captured()
		errs = append(errs, g.Err())
	}
	if g := s.greedy; g != nil {
		captured = captured || g.Captured()
		errs = append(errs, g.Err())
	}
	return captured, errors.Join(errs...)
}

// Close frees the KV cache.
func (s *Session) Close() {
	if g := s.graph; g != nil {
		_ = g.Close()
		for _, t := range []backend.Tensor{g.x, g.pos} {
			if t != nil {
				s.m.be.Free(t)
			}
		}
		s.graph = nil
	}
	s.closeGreedy()
	if s.step != nil {
		s.step.Free(s.m.be)
		s.step = nil
	}
	for _, t := range []backend.Tensor{s.kAll, s.vAll} {
		if t != nil {
			s.m.be.Free(t)
		}
	}
	s.kAll, s.vAll, s.kc, s.vc = nil, nil, nil, nil
}

// Forward appends ids to the sequence and returns float32 logits: for every
// new position when all is set ([len(ids), vocab] row-major), else for the
// last one only ([vocab]).
func (s *Session) Forward(ctx context.Context, ids []int32, all bool) ([]float32, error) {
	m := s.m
	T := len(ids)
	if T == 0 {
		return nil, fmt.Errorf("qwen3: no tokens: %w", models.ErrBadInput)
	}
	if s.len+T > s.cap {
		return nil, fmt.Errorf("qwen3: %d tokens after %d do not fit the session's %d: %w", T, s.len, s.cap, models.ErrBadInput)
	}
	x, err := s.forwardHidden(ctx, ids)
	if err != nil {
		return nil, err
	}
	defer m.be.Free(x)
	return m.Logits(x, all)
}

// forwardHidden appends ids to the sequence and returns the last layer's
// output for them ([len(ids), hidden], before the final norm), a new
// tensor the caller frees.
func (s *Session) forwardHidden(ctx context.Context, ids []int32) (backend.Tensor, error) {
	m := s.m
	T := len(ids)
	x, err := m.EmbedTokens(ids)
	if err != nil {
		return nil, err
	}
	half := m.Config.HeadDim / 2
	cos, sin := make([]float32, T*half), make([]float32, T*half)
	pos := make([]int, T)
	for i := range pos {
		pos[i] = s.len + i
	}
	models.RopeTables(cos, sin, pos, m.invFreq)
	if err := s.ForwardEmbedded(ctx, x, cos, sin, nil); err != nil {
		m.be.Free(x)
		return nil, err
	}
	return x, nil
}

// ForwardEmbedded runs the decoder layers over x [T, hidden], the embedded
// tokens to append, updating x in place to the last layer's output (before
// the final norm) and writing their keys and values to cache rows
// [Len(), Len()+T). cos and sin are the tokens' rotary tables,
// [T, headDim/2] row-major, computed by the caller (1D positions for Qwen3,
// multimodal ones for Qwen3-VL). after, when not nil, runs after each layer.
func (s *Session) ForwardEmbedded(ctx context.Context, x backend.Tensor, cos, sin []float32, after LayerHook) error {
	m := s.m
	T, cols := backend.Matrix(x)
	if cols != m.Config.HiddenSize {
		return fmt.Errorf("qwen3: hidden states %v are not [T, %d]", x.Shape(), m.Config.HiddenSize)
	}
	if s.len+T > s.cap {
		return fmt.Errorf("qwen3: %d tokens after %d do not fit the session's %d: %w", T, s.len, s.cap, models.ErrBadInput)
	}
	if T == 1 && after == nil {
		if done, err := s.graphStep(ctx, x, cos, sin); done || err != nil {
			return err
		}
	}
	sc, err := s.scratch(T)
	if err != nil {
		return err
	}
	if sc != s.step {
		defer sc.Free(m.be)
	}
	if err := sc.SetRope(m.be, cos, sin); err != nil {
		return err
	}
	for i, l := range m.Layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := m.LayerUnits[i].Forward(m.Exec, m.be, l, x, s.kc[i], s.vc[i], Span{Pos: s.len, Causal: true}, sc)
		if err != nil {
			return fmt.Errorf("qwen3: layer %d: %w", i, err)
		}
		if after != nil {
			if err := after(i, x); err != nil {
				return fmt.Errorf("qwen3: after layer %d: %w", i, err)
			}
		}
	}
	s.len += T
	return nil
}

// graphStep runs a one-token step through the step graph, and says
// whether it did (false: the backend or the runner cannot; run op by op).
func (s *Session) graphStep(ctx context.Context, x backend.Tensor, cos, sin []float32) (bool, error) {
	m := s.m
	dp, ok := m.be.(backend.DevicePos)
	state := &models.StepGraph{} // before the first step: a fresh graph's
	if s.graph != nil {
		state = &s.graph.StepGraph
	}
	if !ok || m.NoGraphs || !state.Usable(m.be, m.Exec) {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	sc, err := s.scratch(1)
	if err != nil {
		return true, err
	}
	g := s.graph
	if g == nil {
		g = &stepGraph{}
		s.graph = g // Close frees what was allocated
		if g.x, err = m.be.Alloc("activations", tensor.F32, 1, m.Config.HiddenSize); err == nil {
			g.pos, err = m.be.Alloc("activations", tensor.I32, 1)
		}
		if err != nil {
			// A graph is an optimization: without its memory, op by op.
			g.Fail(fmt.Errorf("qwen3: decode step graph: %w", err))
			return false, nil
		}
	}
	if err := sc.SetRope(m.be, cos, sin); err != nil {
		return true, err
	}
	if err := dp.UploadI32(g.pos, []int32{int32(s.len)}); err != nil {
		return true, fmt.Errorf("qwen3: step position: %w", err)
	}
	if err := m.be.Copy(g.x, x); err != nil {
		return true, err
	}
	layers := func() error { return s.stepLayers(ctx, g.x, g.pos, sc) }
	// When the device-position ops refuse the first step (a cache longer
	// than the decode kernel splits), Run says so and the step is redone
	// op by op from x, which is untouched, rewriting the cache rows it
	// wrote.
	if done, err := g.Run(ctx, m.be, layers); !done || err != nil {
		return done, err
	}
	if err := m.be.Copy(x, g.x); err != nil {
		return true, err
	}
	s.len++
	return true, nil
}

// stepLayers queues the decoder layers over one token's hidden state x
// at the cache row that pos holds in device memory (s.len when the step
// runs op by op).
func (s *Session) stepLayers(ctx context.Context, x, pos backend.Tensor, sc *Scratch) error {
	m := s.m
	for i, l := range m.Layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := m.LayerUnits[i].Forward(m.Exec, m.be, l, x, s.kc[i], s.vc[i], Span{Pos: s.len, Causal: true, PosAt: pos}, sc)
		if err != nil {
			return fmt.Errorf("qwen3: layer %d: %w", i, err)
		}
	}
	return nil
}

// EmbedTokens returns the embeddings of ids as a new F32 tensor [len(ids),
// hidden], which the caller frees. An id outside the vocabulary is an error.
func (m *Model) EmbedTokens(ids []int32) (backend.Tensor, error) {
	c := m.Config
	for i, id := range ids {
		if id < 0 || int(id) >= c.VocabSize {
			return nil, fmt.Errorf("qwen3: token %d is id %d, outside the vocabulary of %d: %w", i, id, c.VocabSize, models.ErrBadInput)
		}
	}
	x, err := m.be.Alloc("activations", tensor.F32, len(ids), c.HiddenSize)
	if err != nil {
		return nil, err
	}
	if m.embedHost != nil {
		err = m.gatherHost(x, ids)
	} else {
		err = m.be.Embedding(x, m.Embed, ids)
	}
	if err != nil {
		m.be.Free(x)
		return nil, fmt.Errorf("qwen3: embedding: %w", err)
	}
	return x, nil
}

// Logits applies the final norm and the LM head to all rows of x, or to
// its last row, and returns float32 logits ([rows, vocab] row-major).
func (m *Model) Logits(x backend.Tensor, all bool) ([]float32, error) {
	c := m.Config
	rows, _ := backend.Matrix(x)
	if !all {
		last, err := m.be.Rows(x, rows-1, 1)
		if err != nil {
			return nil, err
		}
		x, rows = last, 1
	}
	if len(m.Head) == 1 || rows == 1 {
		out, err := m.logitsOnDevice(x)
		if err != nil {
			return nil, err
		}
		defer m.be.Free(out)
		return m.be.Download(out)
	}
	h, err := m.be.Alloc("activations", tensor.F32, rows, c.HiddenSize)
	if err != nil {
		return nil, err
	}
	defer m.be.Free(h)
	logits := make([]float32, rows*c.VocabSize)
	for i, b := range m.Head {
		dst, err := m.be.Alloc("activations", tensor.F32, rows, b.Rows)
		if err != nil {
			return nil, err
		}
		err = m.headBlock(i, b, h, x, dst)
		var part []float32
		if err == nil {
			part, err = m.be.Download(dst)
		}
		m.be.Free(dst)
		if err != nil {
			return nil, err
		}
		for r := range rows {
			copy(logits[r*c.VocabSize+b.Lo:], part[r*b.Rows:(r+1)*b.Rows])
		}
	}
	return logits, nil
}

// logitsOnDevice returns the logits of x's rows as a new F32 tensor
// [rows, vocab] that the caller frees: one output, a head block's logits a
// run of each row's columns (one row, or one block).
func (m *Model) logitsOnDevice(x backend.Tensor) (backend.Tensor, error) {
	c := m.Config
	rows, _ := backend.Matrix(x)
	h, err := m.be.Alloc("activations", tensor.F32, rows, c.HiddenSize)
	if err != nil {
		return nil, err
	}
	defer m.be.Free(h)
	out, err := m.be.Alloc("activations", tensor.F32, rows, c.VocabSize)
	if err != nil {
		return nil, err
	}
	for i, b := range m.Head {
		dst := out
		if len(m.Head) > 1 {
			if dst, err = columns(m.be, out, b.Lo, b.Rows); err != nil {
				m.be.Free(out)
				return nil, err
			}
		}
		if err := m.headBlock(i, b, h, x, dst); err != nil {
			m.be.Free(out)
			return nil, err
		}
	}
	return out, nil
}

// GreedyNext is sample.Greedy of Logits(x, false) with the logits at
// [maskLo, maskHi] taken as -Inf, picked on the device where the backend
// is a backend.Argmaxer: one index comes back instead of the vocabulary's
// logits. ok is false, with nothing done, on other backends.
func (m *Model) GreedyNext(x backend.Tensor, maskLo, maskHi int) (id int, ok bool, err error) {
	am, isAM := m.be.(backend.Argmaxer)
	if !isAM || m.HostGreedy {
		return 0, false, nil
	}
	rows, _ := backend.Matrix(x)
	last, err := m.be.Rows(x, rows-1, 1)
	if err != nil {
		return 0, true, err
	}
	out, err := m.logitsOnDevice(last)
	if err != nil {
		return 0, true, err
	}
	defer m.be.Free(out)
	id, err = am.Argmax(out, maskLo, maskHi)
	return id, true, err
}

// headBlock runs LM head block i into dst: the final norm of x into h
// first (its weight is in block 0's unit), then h · Wᵀ.
func (m *Model) headBlock(i int, b *HeadBlock, h, x, dst backend.Tensor) error {
	return models.Do(m.Exec, b.Unit, func() error {
		if i == 0 {
			if err := m.be.RMSNorm(h, x, m.Norm, float32(m.Config.RMSNormEps)); err != nil {
				return fmt.Errorf("qwen3: final norm: %w", err)
			}
		}
		if sp := b.Unit.Split(); sp != nil {
			if err := m.headSplit(i, b, h, dst, sp); err != nil {
				return fmt.Errorf("qwen3: lm head rows [%d, %d) split with the CPU: %w", b.Lo, b.Lo+b.Rows, err)
			}
			return nil
		}
		if err := m.be.MatMul(dst, h, b.W, nil); err != nil {
			return fmt.Errorf("qwen3: lm head rows [%d, %d): %w", b.Lo, b.Lo+b.Rows, err)
		}
		return nil
	})
}

// headSplit runs LM head block i (not the first: its h is the first
// block's norm, computed on the GPU) with the CPU computing the logits of
// its first sp.CPU rows (all of them when sp.Whole) from the host weights
// and the GPU the rest from its share, which b.W is bound to: the GPU
// hands h to the CPU engine, computes its columns of dst, and takes the
// CPU's columns after it. One row only (a decode step, a prompt's last
// position). Each logit is one float32 sum either way; the CPU's products
// round h to bf16 as the GPU's do.
func (m *Model) headSplit(i int, b *HeadBlock, h, dst backend.Tensor, sp *models.Split) error {
	if rows, _ := backend.Matrix(h); rows != 1 || i == 0 {
		return fmt.Errorf("block %d of %d rows: only a one-row product of a block after the first splits", i, rows)
	}
	mm, ok := sp.Backend.(backend.ShardMatMul)
	if !ok {
		return fmt.Errorf("the CPU engine's %s backend computes no matrix share", sp.Backend.Name())
	}
	if len(sp.Host) != 1 {
		return fmt.Errorf("the CPU has %d of the block's 1 tensor", len(sp.Host))
	}
	ex, cx, cy, err := m.headExchange(i, b, sp.Backend)
	if err != nil {
		return err
	}
	cut := sp.CPU
	if sp.Whole {
		cut = b.Rows
	}
	hidden := m.Config.HiddenSize
	cbe := sp.Backend
	t, err := offload(ex, h, sp, cut, func(in []float32) ([]float32, error) {
		if err := cbe.Upload(cx, in[:hidden]); err != nil {
			return nil, err
		}
		y, err := columns(cbe, cy, 0, cut)
		if err != nil {
			return nil, err
		}
		if err := mm.MatMulShare(y, cx, sp.Host[0], 0, cut); err != nil {
			return nil, err
		}
		return cbe.Download(y)
	})
	if err != nil {
		return err
	}
	if !sp.Whole {
		rest, err := columns(m.be, dst, cut, b.Rows-cut)
		if err != nil {
			return err
		}
		if err := m.be.MatMul(rest, h, b.W, nil); err != nil {
			return err
		}
	}
	mine, err := columns(m.be, dst, 0, cut)
	if err != nil {
		return err
	}
	return sp.Join(func() error { return ex.Receive(mine, t, false) })
}

// headExchange is block i's hand-off to the CPU engine on cpu (one per
// block: a block's Receive may be queued after the next block's Send),
// and the CPU's h [1, hidden] and logits [1, largest block], made on
// first use.
func (m *Model) headExchange(i int, b *HeadBlock, cpu backend.Backend) (backend.Exchange, backend.Tensor, backend.Tensor, error) {
	hidden := m.Config.HiddenSize
	if m.headEx == nil {
		m.headEx = make([]backend.Exchange, len(m.Head))
	}
	if m.headEx[i] == nil {
		hx, ok := m.be.(backend.HostExchange)
		if !ok {
			return nil, nil, nil, fmt.Errorf("the %s backend cannot hand activations to the CPU", m.be.Name())
		}
		ex, err := hx.NewExchange(hidden, b.Rows)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("hand-off to the CPU: %w", err)
		}
		m.headEx[i] = ex
	}
	if m.headCPU == nil || m.headCPUBE != cpu {
		for _, t := range m.headCPU {
			m.headCPUBE.Free(t)
		}
		m.headCPU, m.headCPUBE = nil, cpu
		widest := 0
		for _, hb := range m.Head {
			widest = max(widest, hb.Rows)
		}
		for _, cols := range []int{hidden, widest} {
			t, err := cpu.Alloc("activations", tensor.F32, 1, cols)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("the CPU's activations: %w", err)
			}
			m.headCPU = append(m.headCPU, t)
		}
	}
	return m.headEx[i], m.headCPU[0], m.headCPU[1], nil
}

// columns is the view of columns [lo, lo+n) of a one-row matrix t.
func columns(be backend.Backend, t backend.Tensor, lo, n int) (backend.Tensor, error) {
	flat, err := be.Reshape(t, backend.Elements(t))
	if err != nil {
		return nil, err
	}
	part, err := be.Rows(flat, lo, n)
	if err != nil {
		return nil, err
	}
	return be.Reshape(part, 1, n)
}

// scratch returns activations for T tokens: the session's kept decode
// scratch when T is 1, else a new one the caller frees (over the model's
// Shared activations when set).
func (s *Session) scratch(T int) (*Scratch, error) {
	if T != 1 {
		if sh := s.m.Shared; sh != nil {
			return sh.Get(T)
		}
		return NewScratch(s.m.be, s.m.Config, T)
	}
	if s.step == nil {
		sc, err := NewScratch(s.m.be, s.m.Config, 1)
		if err != nil {
			return nil, err
		}
		s.step = sc
	}
	return s.step, nil
}
