// Package qwen3 implements the Qwen3 text decoder (transformers'
// Qwen3ForCausalLM): RMSNorm, grouped-query attention with per-head q/k
// RMSNorm, rotary embeddings, SwiGLU, tied or untied LM head.
package qwen3

import (
	"fmt"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/models"
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

	// Units are the flat weight blobs, in execution order: "embedding",
	// "layer.i", then "head" or "head.0" ... (Loader.HeadBlocks).
	Units []*models.Unit
	// LayerUnits and the blocks' units are what Exec runs.
	LayerUnits []*models.Unit
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

	embedHost *weights.Blob  // the table's blob when it stays on the host
	embedFeed backend.Tensor // its copy that device-fed greedy steps read (feedTable)
	gathered  []float32      // gatherHost's rows, reused
	invFreq   []float32
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
	emb, err := ld.Load("embedding", prefix, []models.Spec{
		{Name: "embed_tokens.weight", Shape: []int{v, h}, Dst: &m.Embed},
	}, nil)
	if err != nil {
		return nil, err
	}
	switch emb.Place {
	case models.Host:
		if m.Embed != nil {
			be.Free(m.Embed)
			m.Embed = nil
		}
		m.embedHost = emb.Blob
	case models.Streamed:
		return nil, fmt.Errorf("qwen3: the embedding table cannot be streamed: place it resident or on the host")
	}
	m.Units = append(m.Units, emb)
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		l := NewLayer(cfg)
		u, err := ld.Load(fmt.Sprintf("layer.%d", i), fmt.Sprintf("%slayers.%d.", prefix, i), l.Specs(), nil)
		if err != nil {
			return nil, err
		}
		m.Layers = append(m.Layers, l)
		m.Units = append(m.Units, u)
		m.LayerUnits = append(m.LayerUnits, u)
	}
	if err := m.loadHead(ld, prefix, lmHead, embedName); err != nil {
		return nil, err
	}
	return m, nil
}

// loadHead loads the final norm and the LM head: one "head" unit, or
// ld.HeadBlocks blocks of ⌈vocab/n⌉ rows ("head.0" holds the norm too).
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
		u, err := ld.Load("head", "", []models.Spec{norm}, nil)
		if err != nil {
			return err
		}
		m.Units = append(m.Units, u)
		m.Head = []*HeadBlock{{Lo: 0, Rows: v, W: m.Embed, Unit: u}}
		return nil
	}
	per := (v + n - 1) / n
	for b, lo := 0, 0; lo < v; b, lo = b+1, lo+per {
		blk := &HeadBlock{Lo: lo, Rows: min(per, v-lo)}
		specs := []models.Spec{{Name: src, Shape: []int{blk.Rows, h}, Dst: &blk.W, Rows: &[2]int{lo, lo + blk.Rows}}}
		name := fmt.Sprintf("head.%d", b)
		if n == 1 {
			name, specs[0].Rows = "head", nil
		}
		if lo == 0 {
			specs = append([]models.Spec{norm}, specs...)
		}
		u, err := ld.Load(name, "", specs, nil)
		if err != nil {
			return err
		}
		blk.Unit = u
		m.Units = append(m.Units, u)
		m.Head = append(m.Head, blk)
	}
	return nil
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
