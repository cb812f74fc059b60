// Package qwen3vl implements Qwen3-VL (transformers'
// Qwen3VLForConditionalGeneration): the vision tower with its patch and
// DeepStack mergers, and the Qwen3 text decoder (models/qwen3) with
// interleaved multimodal rotary positions and DeepStack features added
// after its first layers.
//
// A Session prefills a prompt with images (Prefill), then decodes text
// tokens (Decode); its per-layer KV cache is readable (Cache) for models
// built on top (Alpamayo's action expert). The vision tower runs on its own
// too (Vision.Encode, or block by block with Vision.Begin).
package qwen3vl

import (
	"vlanode/backend"
	"vlanode/configs"
	"vlanode/models"
	"vlanode/models/qwen3"
	"vlanode/safetensors"
)

// Names says where a checkpoint keeps the model's tensors.
type Names struct {
	Vision string // prefix of the vision tower, e.g. "model.visual."
	Text   string // prefix of the text decoder, e.g. "model.language_model."
	LMHead string // the LM head's tensor, e.g. "lm_head.weight"
}

// HFNames are the tensor names of a Hugging Face Qwen3-VL checkpoint.
// (Alpamayo-R1 nests the same under "vlm.".)
func HFNames() Names {
	return Names{Vision: "model.visual.", Text: "model.language_model.", LMHead: "lm_head.weight"}
}

// Model is a loaded Qwen3-VL model.
type Model struct {
	Config *configs.Qwen3VL
	Vision *Vision
	// Text is the decoder: embedding, layers, final norm and LM head.
	Text *qwen3.Model

	be      backend.Backend
	invFreq []float32 // text rotary frequencies, head_dim/2
}

// Load reads a Qwen3-VL checkpoint directory (config.json and safetensors).
// The checkpoint must stay open while the model is used.
func Load(be backend.Backend, dir string, ck *safetensors.Checkpoint) (*Model, error) {
	cfg, err := configs.LoadQwen3VL(dir)
	if err != nil {
		return nil, err
	}
	return New(models.NewLoader(be, ck), cfg, HFNames())
}

// New binds a checkpoint's tensors to a model of configuration cfg, placed
// as ld says.
func New(ld *models.Loader, cfg *configs.Qwen3VL, names Names) (*Model, error) {
	be := ld.Backend
	v, err := newVision(ld, &cfg.Vision, names.Vision)
	if err != nil {
		return nil, err
	}
	text, err := qwen3.New(ld, cfg.Text, names.Text, names.LMHead)
	if err != nil {
		v.Close()
		return nil, err
	}
	return &Model{
		Config: cfg, Vision: v, Text: text, be: be,
		invFreq: models.RopeInvFreq(cfg.Text.HeadDim, cfg.Text.RopeTheta),
	}, nil
}

// Units are the flat weight blobs in execution order: the vision tower's,
// then the text decoder's.
func (m *Model) Units() []*models.Unit {
	return append(append([]*models.Unit(nil), m.Vision.Units...), m.Text.Units...)
}

// Close releases the model's backend tensors.
func (m *Model) Close() {
	m.Vision.Close()
	m.Text.Close()
}
