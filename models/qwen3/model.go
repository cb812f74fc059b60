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
)

// Model is a loaded Qwen3 causal LM.
type Model struct {
	Config *configs.Qwen3
	be     backend.Backend

	Embed  backend.Tensor // [vocab, hidden]
	Layers []*Layer
	Norm   backend.Tensor // [hidden]
	LMHead backend.Tensor // [vocab, hidden]; the embedding when tied

	// Units are the flat weight blobs, in execution order.
	Units   []*models.Unit
	invFreq []float32
}

// Load reads a Qwen3 checkpoint directory (config.json and safetensors).
// The checkpoint must stay open while the model is used.
func Load(be backend.Backend, dir string, ck *safetensors.Checkpoint) (*Model, error) {
	cfg, err := configs.LoadQwen3(dir)
	if err != nil {
		return nil, err
	}
	return New(be, cfg, ck, "model.", "lm_head.weight")
}

// New binds a checkpoint's tensors to a model of configuration cfg. prefix
// is the text model's tensor prefix ("model." for Qwen3ForCausalLM) and
// lmHead the LM head's tensor name.
func New(be backend.Backend, cfg *configs.Qwen3, ck *safetensors.Checkpoint, prefix, lmHead string) (*Model, error) {
	m := &Model{Config: cfg, be: be, invFreq: models.RopeInvFreq(cfg.HeadDim, cfg.RopeTheta)}
	h, v := cfg.HiddenSize, cfg.VocabSize
	emb, err := models.LoadUnit(be, ck, "embedding", prefix, []models.Spec{
		{Name: "embed_tokens.weight", Shape: []int{v, h}, Dst: &m.Embed},
	})
	if err != nil {
		return nil, err
	}
	m.Units = append(m.Units, emb)
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		l := NewLayer(cfg)
		u, err := models.LoadUnit(be, ck, fmt.Sprintf("layer.%d", i), fmt.Sprintf("%slayers.%d.", prefix, i), l.Specs())
		if err != nil {
			return nil, err
		}
		m.Layers = append(m.Layers, l)
		m.Units = append(m.Units, u)
	}
	headSpecs := []models.Spec{{Name: prefix + "norm.weight", Shape: []int{h}, Dst: &m.Norm}}
	if !cfg.TieWordEmbeddings {
		headSpecs = append(headSpecs, models.Spec{Name: lmHead, Shape: []int{v, h}, Dst: &m.LMHead})
	}
	head, err := models.LoadUnit(be, ck, "head", "", headSpecs)
	if err != nil {
		return nil, err
	}
	m.Units = append(m.Units, head)
	if cfg.TieWordEmbeddings {
		m.LMHead = m.Embed
	}
	return m, nil
}

// Close releases the model's backend tensors.
func (m *Model) Close() {
	for _, l := range m.Layers {
		l.free(m.be)
	}
	for _, t := range []backend.Tensor{m.Embed, m.Norm} {
		if t != nil {
			m.be.Free(t)
		}
	}
	if m.LMHead != nil && !m.Config.TieWordEmbeddings {
		m.be.Free(m.LMHead)
	}
}
