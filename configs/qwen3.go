package configs

import (
	"encoding/json"
	"fmt"
)

// Qwen3 is the architecture of a Qwen3 text decoder (model_type "qwen3"),
// with the config.json keys of transformers' Qwen3Config.
type Qwen3 struct {
	ModelType             string  `json:"model_type"`
	VocabSize             int     `json:"vocab_size"`
	HiddenSize            int     `json:"hidden_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	NumKeyValueHeads      int     `json:"num_key_value_heads"`
	HeadDim               int     `json:"head_dim"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	RopeTheta             float64 `json:"rope_theta"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	HiddenAct             string  `json:"hidden_act"`
	AttentionBias         bool    `json:"attention_bias"`
	UseSlidingWindow      bool    `json:"use_sliding_window"`
	EOSTokenID            any     `json:"eos_token_id"`

	// RopeParameters is where transformers 5 keeps rope_theta and the rope
	// type; RopeScaling is the older spelling.
	RopeParameters *RopeParameters `json:"rope_parameters"`
	RopeScaling    *RopeParameters `json:"rope_scaling"`
}

// RopeParameters is the rope section of a config.
type RopeParameters struct {
	RopeType  string  `json:"rope_type"`
	Type      string  `json:"type"`
	RopeTheta float64 `json:"rope_theta"`
}

// ParseQwen3 decodes and validates a Qwen3 config.json, filling the
// defaults transformers uses for absent keys.
func ParseQwen3(raw []byte) (*Qwen3, error) {
	c := &Qwen3{
		NumKeyValueHeads:      -1,
		RMSNormEps:            1e-6,
		MaxPositionEmbeddings: 32768,
		HiddenAct:             "silu",
	}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("qwen3 config: %w", err)
	}
	if c.NumKeyValueHeads == -1 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	for _, rp := range []*RopeParameters{c.RopeParameters, c.RopeScaling} {
		if rp == nil {
			continue
		}
		if t := rp.RopeType + rp.Type; t != "" && t != "default" {
			return nil, fmt.Errorf("qwen3 config: rope type %q is not supported (only default rope)", t)
		}
		if c.RopeTheta == 0 {
			c.RopeTheta = rp.RopeTheta
		}
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	return c, c.Validate()
}

// LoadQwen3 reads DIR/config.json as a Qwen3 config.
func LoadQwen3(dir string) (*Qwen3, error) {
	raw, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	c, err := ParseQwen3(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", configPath(dir), err)
	}
	if c.ModelType != "qwen3" {
		return nil, UnknownArchitecture(dir, c.ModelType)
	}
	return c, nil
}

// Validate checks that the sizes describe a model vlanode can run.
func (c *Qwen3) Validate() error {
	pos := []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.HiddenSize},
		{"intermediate_size", c.IntermediateSize}, {"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads}, {"num_key_value_heads", c.NumKeyValueHeads},
		{"head_dim", c.HeadDim}, {"max_position_embeddings", c.MaxPositionEmbeddings},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("qwen3 config: %s must be positive, got %d", p.name, p.v)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("qwen3 config: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("qwen3 config: head_dim %d must be even for rotary embeddings", c.HeadDim)
	}
	if c.HiddenAct != "silu" {
		return fmt.Errorf("qwen3 config: hidden_act %q is not supported (only silu)", c.HiddenAct)
	}
	if c.UseSlidingWindow {
		return fmt.Errorf("qwen3 config: use_sliding_window is not supported")
	}
	if c.RMSNormEps <= 0 {
		return fmt.Errorf("qwen3 config: rms_norm_eps must be positive, got %g", c.RMSNormEps)
	}
	return nil
}
