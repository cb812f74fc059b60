package qwen3

import (
	"context"
	"errors"
	"fmt"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/models"
	"vlanode/placement"
)

// Layer is one decoder layer's weights.
type Layer struct {
	cfg *configs.Qwen3

	InputNorm backend.Tensor // [hidden]
	Q         backend.Tensor // [heads*headDim, hidden]
	K         backend.Tensor // [kvHeads*headDim, hidden]
	V         backend.Tensor // [kvHeads*headDim, hidden]
	O         backend.Tensor // [hidden, heads*headDim]
	QBias     backend.Tensor // [heads*headDim], only with attention_bias
	KBias     backend.Tensor // [kvHeads*headDim]
	VBias     backend.Tensor // [kvHeads*headDim]
	OBias     backend.Tensor // [hidden]
	QNorm     backend.Tensor // [headDim]
	KNorm     backend.Tensor // [headDim]
	PostNorm  backend.Tensor // [hidden]
	Gate      backend.Tensor // [intermediate, hidden]
	Up        backend.Tensor // [intermediate, hidden]
	Down      backend.Tensor // [hidden, intermediate]
}

// NewLayer returns an unbound layer of configuration c; bind its weights
// with models.LoadUnit over Specs.
func NewLayer(c *configs.Qwen3) *Layer { return &Layer{cfg: c} }

// Specs is the one table binding checkpoint names (under the layer's
// prefix, e.g. "model.layers.3.") to the layer's fields, in two parts: the
// attention (placement.Attn) and the MLP (placement.MLP), each its own
// unit (models.Loader.LoadParts).
func (l *Layer) Specs() []models.Spec {
	c := l.cfg
	h, q, kv, ff, hd := c.HiddenSize, c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim, c.IntermediateSize, c.HeadDim
	a, m := placement.Attn, placement.MLP
	s := []models.Spec{
		{Name: "input_layernorm.weight", Shape: []int{h}, Dst: &l.InputNorm, Part: a},
		{Name: "self_attn.q_proj.weight", Shape: []int{q, h}, Dst: &l.Q, Part: a},
		{Name: "self_attn.k_proj.weight", Shape: []int{kv, h}, Dst: &l.K, Part: a},
		{Name: "self_attn.v_proj.weight", Shape: []int{kv, h}, Dst: &l.V, Part: a},
		{Name: "self_attn.o_proj.weight", Shape: []int{h, q}, Dst: &l.O, Part: a},
		{Name: "self_attn.q_norm.weight", Shape: []int{hd}, Dst: &l.QNorm, Part: a},
		{Name: "self_attn.k_norm.weight", Shape: []int{hd}, Dst: &l.KNorm, Part: a},
	}
	if c.AttentionBias {
		s = append(s,
			models.Spec{Name: "self_attn.q_proj.bias", Shape: []int{q}, Dst: &l.QBias, Part: a},
			models.Spec{Name: "self_attn.k_proj.bias", Shape: []int{kv}, Dst: &l.KBias, Part: a},
			models.Spec{Name: "self_attn.v_proj.bias", Shape: []int{kv}, Dst: &l.VBias, Part: a},
			models.Spec{Name: "self_attn.o_proj.bias", Shape: []int{h}, Dst: &l.OBias, Part: a},
		)
	}
	s = append(s,
		models.Spec{Name: "post_attention_layernorm.weight", Shape: []int{h}, Dst: &l.PostNorm, Part: m},
		models.Spec{Name: "mlp.gate_proj.weight", Shape: []int{ff, h}, Dst: &l.Gate, Part: m, Split: placement.SplitRows},
		models.Spec{Name: "mlp.up_proj.weight", Shape: []int{ff, h}, Dst: &l.Up, Part: m, Split: placement.SplitRows},
		models.Spec{Name: "mlp.down_proj.weight", Shape: []int{h, ff}, Dst: &l.Down, Part: m, Split: placement.SplitCols},
	)
	return s
}

func (l *Layer) free(be backend.Backend) {
	for _, s := range l.Specs() {
		if *s.Dst != nil {
			be.Free(*s.Dst)
		}
	}
}

// Span says where a call's T tokens sit in the layer's KV cache and what
// they attend to.
type Span struct {
	// Pos is the cache row of the first token: the tokens' keys and values
	// are written to rows [Pos, Pos+T), and they attend to rows [0, Pos+T).
	Pos int
	// Causal masks the later tokens (a decoder); without it the T tokens
	// see each other both ways (Alpamayo's action expert).
	Causal bool
	// MaskFrom and MaskTo hide cache rows [MaskFrom, MaskTo) when
	// MaskTo > MaskFrom.
	MaskFrom, MaskTo int
	// PosAt, when set, holds Pos in device memory (an I32 tensor of the
	// backend.DevicePos backend): the keys and values are written and
	// attended through it, so that a captured graph serves any position.
	PosAt backend.Tensor
	// Groups, when set, split the call's T rows into sequences of their
	// own, in order (their Rows add up to T): each group's keys and values
	// go to its own cache at its own span, and its rows attend only to
	// that cache. The projections (q, k, v, o, the MLP) run once over all
	// T rows, the weights read once; the norms, rotary embedding, cache
	// store and attention run per group, with the shapes a call of that
	// group alone has. The call's own kc, vc and the fields above are
	// unused. Causal and PosAt are not allowed in a group.
	Groups []Group
}

// Group is one sequence of a grouped call (Span.Groups): Rows rows whose
// keys and values go to K and V at Span.Pos, attending as Span says.
type Group struct {
	Rows int
	K, V backend.Tensor
	Span Span
}

// Forward runs the layer as a causal decoder: Attend with the tokens at
// cache rows [pos, pos+T).
func (l *Layer) Forward(be backend.Backend, x backend.Tensor, kc, vc backend.Tensor, pos int, s *Scratch) error {
	return l.Attend(be, x, kc, vc, Span{Pos: pos, Causal: true}, s)
}

// Attend runs the layer on the residual stream x [T, hidden] in place,
// with the tokens placed in the caches kc and vc as sp says; s holds
// activations sized for T tokens and their rotary tables
// (Scratch.SetRope): Attention, then MLP.
func (l *Layer) Attend(be backend.Backend, x backend.Tensor, kc, vc backend.Tensor, sp Span, s *Scratch) error {
	if err := l.Attention(be, x, kc, vc, sp, s); err != nil {
		return err
	}
	return l.MLP(be, x, s, nil)
}

// Attention runs the layer's attention part on x in place: input norm,
// q, k, v, their norms and rotary embedding, the cache store, attention,
// o and the residual.
func (l *Layer) Attention(be backend.Backend, x backend.Tensor, kc, vc backend.Tensor, sp Span, s *Scratch) error {
	if len(sp.Groups) > 0 {
		return l.attentionGroups(be, x, sp.Groups, s)
	}
	c := l.cfg
	eps := float32(c.RMSNormEps)
	pos := sp.Pos
	o := backend.AttnOpts{
		Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim,
		NKV: pos + s.t, Scale: s.scale, MaskFrom: sp.MaskFrom, MaskTo: sp.MaskTo,
	}
	if sp.Causal {
		o.Causal, o.QPos0 = true, pos
	}
	type step struct {
		name string
		run  func() error
	}
	steps := []step{{"input norm, q, k, v", func() error {
		return backend.RMSNormMatMuls(be, []backend.Tensor{s.q, s.k, s.v}, s.h, x, l.InputNorm, eps,
			[]backend.Tensor{l.Q, l.K, l.V}, []backend.Tensor{l.QBias, l.KBias, l.VBias})
	}}}
	if sp.PosAt != nil {
		// A decode step at a device position: the norms, rotary embedding,
		// cache store and attention as one op (one kernel where the
		// backend fuses them).
		o.NKV, _ = backend.Matrix(kc)
		steps = append(steps, step{"q, k norms and rope, k and v to the cache, attention", func() error {
			return backend.QKNormRopeCacheAttentionAt(be, s.attn, s.q, s.k, s.v, l.QNorm, l.KNorm, s.cos, s.sin, eps,
				kc, vc, o, sp.PosAt)
		}})
	} else {
		steps = append(steps, step{"q, k norms and rope, k and v to the cache", func() error {
			return backend.QKNormRopeCache(be, s.q, s.k, s.v, l.QNorm, l.KNorm, s.cos, s.sin, c.HeadDim, eps,
				kc, vc, backend.CacheAt{Pos: sp.Pos})
		}}, step{"attention", func() error { return be.Attention(s.attn, s.q, kc, vc, o) }})
	}
	steps = append(steps, step{"o and attention residual", func() error {
		return backend.MatMulResidual(be, x, s.h, s.attn, l.O, l.OBias)
	}})
	for _, st := range steps {
		if err := st.run(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	return nil
}

// attentionGroups is Attention over groups of rows (Span.Groups): q, k
// and v of every row in one call, then per group the norms, rotary
// embedding and cache store, and attention on its own cache, then o and
// the residual of every row in one call.
func (l *Layer) attentionGroups(be backend.Backend, x backend.Tensor, groups []Group, s *Scratch) error {
	c := l.cfg
	eps := float32(c.RMSNormEps)
	total := 0
	for i, g := range groups {
		if g.Rows <= 0 || g.K == nil || g.V == nil || g.Span.Causal || g.Span.PosAt != nil || len(g.Span.Groups) > 0 {
			return fmt.Errorf("group %d: want rows > 0, its own cache, no causal mask, no device position and no groups", i)
		}
		total += g.Rows
	}
	if total != s.t {
		return fmt.Errorf("groups of %d rows in all for a call of %d", total, s.t)
	}
	if err := backend.RMSNormMatMuls(be, []backend.Tensor{s.q, s.k, s.v}, s.h, x, l.InputNorm, eps,
		[]backend.Tensor{l.Q, l.K, l.V}, []backend.Tensor{l.QBias, l.KBias, l.VBias}); err != nil {
		return fmt.Errorf("input norm, q, k, v: %w", err)
	}
	row := 0
	for i, g := range groups {
		views, err := rowViews(be, row, g.Rows, s.q, s.k, s.v, s.attn, s.cos, s.sin)
		if err != nil {
			return fmt.Errorf("group %d: %w", i, err)
		}
		q, k, v, attn, cos, sin := views[0], views[1], views[2], views[3], views[4], views[5]
		if err := backend.QKNormRopeCache(be, q, k, v, l.QNorm, l.KNorm, cos, sin, c.HeadDim, eps,
			g.K, g.V, backend.CacheAt{Pos: g.Span.Pos}); err != nil {
			return fmt.Errorf("group %d: q, k norms and rope, k and v to the cache: %w", i, err)
		}
		o := backend.AttnOpts{
			Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim,
			NKV: g.Span.Pos + g.Rows, Scale: s.scale, MaskFrom: g.Span.MaskFrom, MaskTo: g.Span.MaskTo,
		}
		if err := be.Attention(attn, q, g.K, g.V, o); err != nil {
			return fmt.Errorf("group %d: attention: %w", i, err)
		}
		row += g.Rows
	}
	if err := backend.MatMulResidual(be, x, s.h, s.attn, l.O, l.OBias); err != nil {
		return fmt.Errorf("o and attention residual: %w", err)
	}
	return nil
}

// rowViews are rows [row, row+n) of each of ts.
func rowViews(be backend.Backend, row, n int, ts ...backend.Tensor) ([]backend.Tensor, error) {
	out := make([]backend.Tensor, len(ts))
	for i, t := range ts {
		v, err := be.Rows(t, row, n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// MLP runs the layer's MLP part on x in place: post norm, gate, up,
// SwiGLU, down and the residual; with a split (sp not nil) the CPU
// computes its share of the intermediate size (mlpSplit).
func (l *Layer) MLP(be backend.Backend, x backend.Tensor, s *Scratch, sp *models.Split) error {
	if sp != nil {
		if err := l.mlpSplit(be, x, s, sp); err != nil {
			return fmt.Errorf("post norm, mlp and residual split with the CPU: %w", err)
		}
		return nil
	}
	err := backend.RMSNormMLP(be, x, s.h, s.gate, s.up, l.PostNorm, float32(l.cfg.RMSNormEps), l.Gate, l.Up, l.Down)
	if err != nil {
		return fmt.Errorf("post norm, mlp and residual: %w", err)
	}
	return nil
}

// The MLP part's tensors in its table's order (Specs): what the CPU reads
// of the unit's host tensors.
const (
	mlpPostNorm = iota
	mlpGate
	mlpUp
	mlpDown
)

// mlpSplit runs the MLP part with the CPU computing the first sp.CPU rows
// of gate and up and the same columns of down (all of them when sp.Whole)
// from the host weights, and the GPU the rest from its share, which the
// layer's fields are bound to: the GPU hands x to the CPU engine (which
// normalizes it itself, so it need not wait for the GPU's copy), computes
// its share into the residual, and adds the CPU's partial sums after it.
// The sums are float32 both ways, but in two parts: not bit-identical to
// the unsplit MLP, and deterministic.
func (l *Layer) mlpSplit(be backend.Backend, x backend.Tensor, s *Scratch, sp *models.Split) error {
	c := l.cfg
	eps := float32(c.RMSNormEps)
	n := s.t * c.HiddenSize
	if len(sp.Host) != 4 {
		return fmt.Errorf("the CPU has %d of the MLP's 4 tensors", len(sp.Host))
	}
	share, ok := sp.Backend.(backend.ShardMLP)
	if !ok {
		return fmt.Errorf("the CPU engine's %s backend computes no MLP share", sp.Backend.Name())
	}
	ex, cpu, err := s.split(be, sp.Backend, c)
	if err != nil {
		return err
	}
	cut := sp.CPU
	if sp.Whole {
		cut = c.IntermediateSize
	}
	cbe := sp.Backend
	t, err := offload(ex, x, sp, n, func(in []float32) ([]float32, error) {
		if err := cbe.Upload(cpu[0], in[:n]); err != nil {
			return nil, err
		}
		if err := cbe.RMSNorm(cpu[1], cpu[0], sp.Host[mlpPostNorm], eps); err != nil {
			return nil, err
		}
		if err := share.MLPShare(cpu[2], cpu[1], sp.Host[mlpGate], sp.Host[mlpUp], sp.Host[mlpDown], 0, cut); err != nil {
			return nil, err
		}
		return cbe.Download(cpu[2])
	})
	if err != nil {
		return err
	}
	if !sp.Whole {
		rest := c.IntermediateSize - cut
		gate, err := rowsView(be, s.gate, s.t, rest)
		if err != nil {
			return err
		}
		up, err := rowsView(be, s.up, s.t, rest)
		if err != nil {
			return err
		}
		if err := be.RMSNorm(s.h, x, l.PostNorm, eps); err != nil {
			return err
		}
		if err := backend.SwiGLUDown(be, s.h, gate, up, s.h, l.Gate, l.Up, l.Down); err != nil {
			return err
		}
		if err := be.Add(x, x, s.h); err != nil {
			return err
		}
	}
	return sp.Join(func() error { return ex.Receive(x, t, true) })
}

// offload hands x to the CPU engine through ex and queues the share's
// task there: once x has arrived, compute turns the exchange's Out into
// the share's result, which goes back as the first n values of its In
// (handBack); offload returns once the engine has taken the task
// (Split.Ready), with the ticket the GPU receives the result by.
func offload(ex backend.Exchange, x backend.Tensor, sp *models.Split, n int, compute func(in []float32) ([]float32, error)) (backend.Ticket, error) {
	t, err := ex.Send(x)
	if err != nil {
		return t, err
	}
	err = sp.Offload(func(computing func()) error {
		err := ex.Wait(context.Background(), t)
		computing()
		var y []float32
		if err == nil {
			y, err = compute(ex.Out())
		}
		return handBack(ex, t, ex.In()[:n], y, err)
	})
	if err != nil {
		return t, err
	}
	return t, sp.Ready()
}

// handBack ends a CPU share's task: it writes the share's result v (when
// err is nil) into in, the exchange's In, and posts ticket t. A result
// goes back even when the share failed (zeros): the device waits for it.
func handBack(ex backend.Exchange, t backend.Ticket, in, v []float32, err error) error {
	if err == nil {
		copy(in, v)
	} else {
		clear(in)
	}
	return errors.Join(err, ex.Post(t))
}

// rowsView is the first t·cols elements of a [t, ≥cols] scratch tensor,
// viewed as [t, cols].
func rowsView(be backend.Backend, m backend.Tensor, t, cols int) (backend.Tensor, error) {
	flat, err := be.Reshape(m, backend.Elements(m))
	if err != nil {
		return nil, err
	}
	part, err := be.Rows(flat, 0, t*cols)
	if err != nil {
		return nil, err
	}
	return be.Reshape(part, t, cols)
}
