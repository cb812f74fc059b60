// Package qwen3 implements the Qwen3 text decoder (transformers'
// Qwen3ForCausalLM): RMSNorm, grouped-query attention with per-head q/k
// RMSNorm, rotary embeddings, SwiGLU, tied or untied LM head.
package qwen3

import (
	"fmt"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/models"
	"vlanode/models/layered"
	"vlanode/placement"
	"vlanode/safetensors"
	"vlanode/tensor"
	"vlanode/weights"
)

// Model is a loaded Qwen3 causal LM.
type Model struct {
	Config *configs.Qwen3
	be     backend.Backend

	// Embed is the embedding table [vocab, hidden]; nil when the table
	// stays on the host (its rows are gathered there).
	Embed  backend.Tensor
	Layers []*Layer
	Norm   backend.Tensor // [hidden]
	// Head is the LM head ([vocab, hidden]; the embedding when tied), in
	// one or more blocks of rows.
	Head []*HeadBlock

	// Units are the flat weight blobs, in execution order: the embedding,
	// each layer's attention and MLP parts (module placement.VLM), then the
	// LM head's blocks (Loader.HeadBlocks).
	Units []*models.Unit
	// LayerUnits and the blocks' units are what Exec runs.
	LayerUnits []LayerUnits
	// Exec runs each unit's compute where its weights are; nil runs them
	// in place (every unit resident).
	Exec models.Runner
	// NoGraphs runs decode steps op by op even where a graph could replay
	// them (see Session.ForwardEmbedded): for comparisons.
	NoGraphs bool
	// HostGreedy makes GreedyNext refuse (ok false), so that greedy tokens
	// are picked on the host from downloaded logits (benchmarks).
	HostGreedy bool
	// SerialGreedy makes StartGreedy refuse, so that each greedy step
	// waits on the host for the token it feeds (benchmarks).
	SerialGreedy bool

	// layered is the plan's executor (LoadWith with a Layering); Exec is
	// it then.
	layered   *layered.Executor
	unplaced  error          // why the last Replan failed: nothing runs until one succeeds
	embedHost *weights.Blob  // the table's blob when it stays on the host
	embedFeed backend.Tensor // its copy that device-fed greedy steps read (feedTable)
	gathered  []float32      // gatherHost's rows, reused
	// headEx are the hand-offs of the LM head's blocks split with the CPU
	// (headSplit), one per block, made on first use; headCPU the CPU's x
	// and output on its backend headCPUBE.
	headEx    []backend.Exchange
	headCPU   []backend.Tensor
	headCPUBE backend.Backend
	invFreq   []float32
}

// LayerUnits are a decoder layer's two parts, each its own unit.
type LayerUnits struct {
	Attn, MLP *models.Unit
}

// LoadLayer loads decoder layer l as the units of its parts, index i of
// module m, its checkpoint tensors under prefix.
func LoadLayer(ld *models.Loader, l *Layer, m placement.Module, i int, prefix string) (LayerUnits, error) {
	us, err := ld.LoadParts(placement.ID{Module: m, Index: i}, prefix, l.Specs(), nil)
	if err != nil {
		return LayerUnits{}, err
	}
	return LayerUnits{Attn: us[0], MLP: us[1]}, nil
}

// Forward runs layer l through exec as its two units (see Layer.Attend).
func (u LayerUnits) Forward(exec models.Runner, be backend.Backend, l *Layer, x, kc, vc backend.Tensor, sp Span, s *Scratch) error {
	if err := models.Do(exec, u.Attn, func() error { return l.Attention(be, x, kc, vc, sp, s) }); err != nil {
		return err
	}
	return models.Do(exec, u.MLP, func() error { return l.MLP(be, x, s, u.MLP.Split()) })
}

// HeadBlock is rows [Lo, Lo+Rows) of the LM head, one unit; the first
// block's unit also holds the final norm.
type HeadBlock struct {
	Lo, Rows int
	W        backend.Tensor
	Unit     *models.Unit
}

// Load reads a Qwen3 checkpoint directory (config.json and safetensors).
// The checkpoint must stay open while the model is used.
func Load(be backend.Backend, dir string, ck *safetensors.Checkpoint) (*Model, error) {
	cfg, err := configs.LoadQwen3(dir)
	if err != nil {
		return nil, err
	}
	return New(models.NewLoader(be, ck), cfg, "model.", "lm_head.weight")
}

// New binds a checkpoint's tensors to a model of configuration cfg, placed
// as ld says. prefix is the text model's tensor prefix ("model." for
// Qwen3ForCausalLM) and lmHead the LM head's tensor name.
func New(ld *models.Loader, cfg *configs.Qwen3, prefix, lmHead string) (*Model, error) {
	be := ld.Backend
	m := &Model{Config: cfg, be: be, invFreq: models.RopeInvFreq(cfg.HeadDim, cfg.RopeTheta)}
	h, v := cfg.HiddenSize, cfg.VocabSize
	embedName := prefix + "embed_tokens.weight"
	emb, err := ld.Load(placement.ID{Module: placement.Embedding}, prefix, []models.Spec{
		{Name: "embed_tokens.weight", Shape: []int{v, h}, Dst: &m.Embed, Table: true},
	}, nil)
	if err != nil {
		return nil, err
	}
	switch emb.Weights {
	case placement.Host:
		if m.Embed != nil {
			be.Free(m.Embed)
			m.Embed = nil
		}
		m.embedHost = emb.Blob
	case placement.Streamed:
		return nil, fmt.Errorf("qwen3: the embedding table cannot be streamed: place it resident or on the host")
	}
	m.Units = append(m.Units, emb)
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		l := NewLayer(cfg)
		u, err := LoadLayer(ld, l, placement.VLM, i, fmt.Sprintf("%slayers.%d.", prefix, i))
		if err != nil {
			return nil, err
		}
		m.Layers = append(m.Layers, l)
		m.Units = append(m.Units, u.Attn, u.MLP)
		m.LayerUnits = append(m.LayerUnits, u)
	}
	if err := m.loadHead(ld, prefix, lmHead, embedName); err != nil {
		return nil, err
	}
	return m, nil
}

// loadHead loads the final norm and the LM head: one unit (lm_head.0), or
// ld.HeadBlocks blocks of ⌈vocab/n⌉ rows (lm_head.0 holds the norm too).
func (m *Model) loadHead(ld *models.Loader, prefix, lmHead, embedName string) error {
	cfg := m.Config
	h, v := cfg.HiddenSize, cfg.VocabSize
	norm := models.Spec{Name: prefix + "norm.weight", Shape: []int{h}, Dst: &m.Norm}
	src := lmHead
	if cfg.TieWordEmbeddings {
		src = embedName
	}
	n := max(ld.HeadBlocks, 1)
	if n == 1 && cfg.TieWordEmbeddings && m.Embed != nil {
		// The head is the resident embedding table.
		u, err := ld.Load(placement.ID{Module: placement.LMHead}, "", []models.Spec{norm}, nil)
		if err != nil {
			return err
		}
		m.Units = append(m.Units, u)
		m.Head = []*HeadBlock{{Lo: 0, Rows: v, W: m.Embed, Unit: u}}
		return nil
	}
	for b, specs := range headSpecs(cfg, n, prefix, src) {
		blk := &HeadBlock{Lo: specs.lo, Rows: specs.rows}
		specs.bind(&m.Norm, &blk.W)
		u, err := ld.Load(placement.ID{Module: placement.LMHead, Index: b}, "", specs.specs, nil)
		if err != nil {
			return err
		}
		blk.Unit = u
		m.Units = append(m.Units, u)
		m.Head = append(m.Head, blk)
	}
	return nil
}

// headBlock is one block of the LM head's table: rows [lo, lo+rows) of
// the head matrix, with the final norm in the first block.
type headBlock struct {
	lo, rows int
	specs    []models.Spec
}

// bind points the block's specs at the norm's and the rows' fields.
func (b headBlock) bind(norm, w *backend.Tensor) {
	for i := range b.specs {
		if len(b.specs[i].Shape) == 1 {
			b.specs[i].Dst = norm
		} else {
			b.specs[i].Dst = w
		}
	}
}

// headSpecs is the one table of the final norm (under prefix) and the LM
// head (the tensor src) cut into n blocks of ⌈vocab/n⌉ rows, the norm in
// the first; the blocks after the first split by rows; the loader binds
// it and the planner sizes it.
func headSpecs(cfg *configs.Qwen3, n int, prefix, src string) []headBlock {
	h, v := cfg.HiddenSize, cfg.VocabSize
	n = max(n, 1)
	per := (v + n - 1) / n
	var out []headBlock
	for lo := 0; lo < v; lo += per {
		b := headBlock{lo: lo, rows: min(per, v-lo)}
		w := models.Spec{Name: src, Shape: []int{b.rows, h}, Rows: &[2]int{lo, lo + b.rows}}
		if n == 1 {
			w.Rows = nil
		}
		if lo > 0 {
			// A block without the norm can split its rows with the CPU
			// (Model.headSplit); the first computes the norm the others
			// read, on the GPU.
			w.Split = placement.SplitRows
		}
		if lo == 0 {
			b.specs = append(b.specs, models.Spec{Name: prefix + "norm.weight", Shape: []int{h}})
		}
		b.specs = append(b.specs, w)
		out = append(out, b)
	}
	return out
}

// Close releases the model's backend tensors.
func (m *Model) Close() {
	for _, l := range m.Layers {
		l.free(m.be)
	}
	for _, b := range m.Head {
		if b.W != nil && b.W != m.Embed {
			m.be.Free(b.W)
		}
	}
	for _, ex := range m.headEx {
		if ex != nil {
			_ = ex.Close()
		}
	}
	m.headEx = nil
	for _, t := range m.headCPU {
		m.headCPUBE.Free(t)
	}
	m.headCPU = nil
	for _, t := range []backend.Tensor{m.Embed, m.Norm, m.embedFeed} {
		if t != nil {
			m.be.Free(t)
		}
	}
	m.Head, m.Layers, m.Embed, m.Norm, m.embedFeed = nil, nil, nil, nil, nil
}

// gatherHost writes the embeddings of ids, read from the host table, into
// dst [len(ids), hidden], converting rows on every core (a prompt's rows
// lie all over a table of a gigabyte or more).
func (m *Model) gatherHost(dst backend.Tensor, ids []int32) error {
	h := m.Config.HiddenSize
	e, data, err := m.embedHost.Tensor("embed_tokens.weight")
	if err != nil {
		return err
	}
	row := h * e.DType.Size()
	if n := len(ids) * h; cap(m.gathered) < n {
		m.gathered = make([]float32, n)
	}
	out := m.gathered[:len(ids)*h]
	errs := make([]error, len(ids))
	models.ParallelFor(len(ids), 64, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			id := int(ids[i])
			errs[i] = tensor.ToF32(out[i*h:(i+1)*h], e.DType, data[id*row:(id+1)*row])
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return m.be.Upload(dst, out)
}

// HeadUnits are the LM head blocks' units, in order.
func HeadUnits(blocks []*HeadBlock) []*models.Unit {
	out := make([]*models.Unit, len(blocks))
	for i, b := range blocks {
		out[i] = b.Unit
	}
	return out
}
