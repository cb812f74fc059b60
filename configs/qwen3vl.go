package configs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Qwen3VL is the architecture of a Qwen3-VL model (model_type "qwen3_vl",
// transformers' Qwen3VLConfig): a vision encoder, its patch merger and
// DeepStack mergers, and a Qwen3 text decoder with interleaved multimodal
// rotary embeddings.
type Qwen3VL struct {
	ModelType string
	// Text is text_config read as a Qwen3 decoder (its ModelType is
	// "qwen3_vl_text"); its TieWordEmbeddings is the model's.
	Text *Qwen3
	// MRopeSection is how many of the head_dim/2 rotary frequencies carry
	// the temporal, height and width positions; it sums to head_dim/2.
	MRopeSection [3]int
	// MRopeInterleaved is the config's flag. Qwen3-VL interleaves the
	// sections whatever it says (transformers' apply_interleaved_mrope).
	MRopeInterleaved bool
	Vision           Qwen3VLVision

	ImageTokenID       int
	VideoTokenID       int
	VisionStartTokenID int
	VisionEndTokenID   int
}

// Qwen3VLVision is vision_config (transformers' Qwen3VLVisionConfig).
type Qwen3VLVision struct {
	Depth                  int    `json:"depth"`
	HiddenSize             int    `json:"hidden_size"`
	HiddenAct              string `json:"hidden_act"`
	IntermediateSize       int    `json:"intermediate_size"`
	NumHeads               int    `json:"num_heads"`
	InChannels             int    `json:"in_channels"`
	PatchSize              int    `json:"patch_size"`
	SpatialMergeSize       int    `json:"spatial_merge_size"`
	TemporalPatchSize      int    `json:"temporal_patch_size"`
	OutHiddenSize          int    `json:"out_hidden_size"`
	NumPositionEmbeddings  int    `json:"num_position_embeddings"`
	DeepstackVisualIndexes []int  `json:"deepstack_visual_indexes"`
	// RopeParameters holds the 2D rotary base (transformers 5 writes
	// {"rope_type": "axial", "rope_theta": 10000}); absent means 10000.
	RopeParameters *VisionRope `json:"rope_parameters"`
}

// VisionRope is the rope section of a Qwen3-VL vision config.
type VisionRope struct {
	RopeType  string  `json:"rope_type"`
	RopeTheta float64 `json:"rope_theta"`
}

// RopeTheta is the base of the vision tower's 2D rotary embedding.
func (v *Qwen3VLVision) RopeTheta() float64 {
	if v.RopeParameters != nil && v.RopeParameters.RopeTheta != 0 {
		return v.RopeParameters.RopeTheta
	}
	return 10000
}

// HeadDim is the vision attention head size.
func (v *Qwen3VLVision) HeadDim() int { return v.HiddenSize / v.NumHeads }

// PatchDim is the length of one pixel_values row: in_channels ×
// temporal_patch_size × patch_size² (1536 for 3×2×16×16).
func (v *Qwen3VLVision) PatchDim() int {
	return v.InChannels * v.TemporalPatchSize * v.PatchSize * v.PatchSize
}

// GridSide is the side of the square learned position table
// (√num_position_embeddings).
func (v *Qwen3VLVision) GridSide() int { return int(math.Sqrt(float64(v.NumPositionEmbeddings))) }

// MergeUnit is the number of patches merged into one visual token
// (spatial_merge_size²).
func (v *Qwen3VLVision) MergeUnit() int { return v.SpatialMergeSize * v.SpatialMergeSize }

// TanhGELU reports whether the vision MLP uses the tanh approximation of
// GELU (gelu_pytorch_tanh) rather than the exact one (gelu).
func (v *Qwen3VLVision) TanhGELU() bool { return v.HiddenAct != "gelu" }

// Defaults of transformers' Qwen3VLConfig and its sub-configs, used for
// keys a config.json leaves out.
const (
	qwen3VLDefaultTheta = 500000.0 // Qwen3VLTextConfig.default_theta
)

func defaultQwen3VLVision() Qwen3VLVision {
	return Qwen3VLVision{
		Depth: 27, HiddenSize: 1152, HiddenAct: "gelu_pytorch_tanh", IntermediateSize: 4304, NumHeads: 16,
		InChannels: 3, PatchSize: 16, SpatialMergeSize: 2, TemporalPatchSize: 2, OutHiddenSize: 3584,
		NumPositionEmbeddings: 2304, DeepstackVisualIndexes: []int{8, 16, 24},
	}
}

func defaultQwen3VLText() *Qwen3 {
	return &Qwen3{
		VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 22016, NumHiddenLayers: 32,
		NumAttentionHeads: 32, NumKeyValueHeads: 32, HeadDim: 128, MaxPositionEmbeddings: 128000,
		RMSNormEps: 1e-6, HiddenAct: "silu",
	}
}

// mropeParameters is the rope section of a qwen3_vl_text config.
type mropeParameters struct {
	RopeType         string   `json:"rope_type"`
	Type             string   `json:"type"`
	RopeTheta        *float64 `json:"rope_theta"`
	MRopeSection     []int    `json:"mrope_section"`
	MRopeInterleaved *bool    `json:"mrope_interleaved"`
}

// ParseQwen3VL decodes and validates a Qwen3-VL config.json, filling the
// defaults transformers uses for absent keys.
func ParseQwen3VL(raw []byte) (*Qwen3VL, error) {
	var top struct {
		ModelType          string          `json:"model_type"`
		TextConfig         json.RawMessage `json:"text_config"`
		VisionConfig       json.RawMessage `json:"vision_config"`
		ImageTokenID       *int            `json:"image_token_id"`
		VideoTokenID       *int            `json:"video_token_id"`
		VisionStartTokenID *int            `json:"vision_start_token_id"`
		VisionEndTokenID   *int            `json:"vision_end_token_id"`
		TieWordEmbeddings  *bool           `json:"tie_word_embeddings"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("qwen3_vl config: %w", err)
	}
	c := &Qwen3VL{
		ModelType: top.ModelType, Vision: defaultQwen3VLVision(),
		ImageTokenID: intOr(top.ImageTokenID, 151655), VideoTokenID: intOr(top.VideoTokenID, 151656),
		VisionStartTokenID: intOr(top.VisionStartTokenID, 151652), VisionEndTokenID: intOr(top.VisionEndTokenID, 151653),
	}
	if len(top.VisionConfig) > 0 {
		if err := json.Unmarshal(top.VisionConfig, &c.Vision); err != nil {
			return nil, fmt.Errorf("qwen3_vl config: vision_config: %w", err)
		}
	}
	text, textTie, err := c.parseText(top.TextConfig)
	if err != nil {
		return nil, err
	}
	c.Text = text
	// The top-level flag is the one Qwen3VLForConditionalGeneration ties by;
	// older configs also (or only) spell it in text_config.
	switch {
	case top.TieWordEmbeddings != nil:
		c.Text.TieWordEmbeddings = *top.TieWordEmbeddings
	case textTie != nil:
		c.Text.TieWordEmbeddings = *textTie
	default:
		c.Text.TieWordEmbeddings = false
	}
	return c, c.Validate()
}

// parseText reads text_config into c.Text, c.MRopeSection and
// c.MRopeInterleaved; it returns text_config's own tie_word_embeddings.
func (c *Qwen3VL) parseText(raw json.RawMessage) (*Qwen3, *bool, error) {
	t := defaultQwen3VLText()
	var extra struct {
		NumKeyValueHeads  *int             `json:"num_key_value_heads"`
		RopeTheta         *float64         `json:"rope_theta"`
		RopeParameters    *mropeParameters `json:"rope_parameters"`
		RopeScaling       *mropeParameters `json:"rope_scaling"`
		TieWordEmbeddings *bool            `json:"tie_word_embeddings"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, t); err != nil {
			return nil, nil, fmt.Errorf("qwen3_vl config: text_config: %w", err)
		}
		if err := json.Unmarshal(raw, &extra); err != nil {
			return nil, nil, fmt.Errorf("qwen3_vl config: text_config: %w", err)
		}
	}
	if extra.NumKeyValueHeads == nil && hasKey(raw, "num_key_value_heads") {
		t.NumKeyValueHeads = t.NumAttentionHeads // null: as many as the query heads
	}
	// transformers 5 keeps the rope settings in rope_parameters, older
	// configs in rope_scaling with a top-level rope_theta.
	t.RopeParameters, t.RopeScaling = nil, nil
	rp := extra.RopeParameters
	if extra.RopeScaling != nil {
		rp = extra.RopeScaling
	}
	theta := qwen3VLDefaultTheta
	c.MRopeSection = [3]int{24, 20, 20}
	c.MRopeInterleaved = true
	if extra.RopeTheta != nil {
		theta = *extra.RopeTheta
	}
	if rp != nil {
		if ty := rp.RopeType + rp.Type; ty != "" && ty != "default" {
			return nil, nil, fmt.Errorf("qwen3_vl config: text rope type %q is not supported (only default rope)", ty)
		}
		if rp.RopeTheta != nil {
			if extra.RopeTheta != nil && *extra.RopeTheta != *rp.RopeTheta {
				return nil, nil, fmt.Errorf("qwen3_vl config: text_config rope_theta %g and rope parameters' %g disagree", *extra.RopeTheta, *rp.RopeTheta)
			}
			theta = *rp.RopeTheta
		}
		if rp.MRopeSection != nil {
			if len(rp.MRopeSection) != 3 {
				return nil, nil, fmt.Errorf("qwen3_vl config: mrope_section %v must have 3 entries (t, h, w)", rp.MRopeSection)
			}
			copy(c.MRopeSection[:], rp.MRopeSection)
		}
		if rp.MRopeInterleaved != nil {
			c.MRopeInterleaved = *rp.MRopeInterleaved
		}
	}
	t.RopeTheta = theta
	return t, extra.TieWordEmbeddings, nil
}

// LoadQwen3VL reads DIR/config.json as a Qwen3-VL config.
func LoadQwen3VL(dir string) (*Qwen3VL, error) {
	raw, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	var head struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(raw, &head); err == nil && head.ModelType != "qwen3_vl" {
		return nil, UnknownArchitecture(dir, head.ModelType)
	}
	c, err := ParseQwen3VL(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", configPath(dir), err)
	}
	return c, nil
}

// Validate checks that the sizes describe a model vlanode can run.
func (c *Qwen3VL) Validate() error {
	if err := c.Text.Validate(); err != nil {
		return fmt.Errorf("qwen3_vl text_config: %w", err)
	}
	if c.Text.AttentionBias {
		return errors.New("qwen3_vl config: text attention_bias is not supported")
	}
	half := c.Text.HeadDim / 2
	if s := c.MRopeSection; s[0] < 0 || s[1] < 0 || s[2] < 0 || s[0]+s[1]+s[2] != half {
		return fmt.Errorf("qwen3_vl config: mrope_section %v must add up to head_dim/2 = %d", s, half)
	}
	if err := c.Vision.validate(); err != nil {
		return err
	}
	if c.Vision.OutHiddenSize != c.Text.HiddenSize {
		return fmt.Errorf("qwen3_vl config: vision out_hidden_size %d differs from the text hidden_size %d", c.Vision.OutHiddenSize, c.Text.HiddenSize)
	}
	if n := len(c.Vision.DeepstackVisualIndexes); n > c.Text.NumHiddenLayers {
		return fmt.Errorf("qwen3_vl config: %d deepstack indexes for %d text layers", n, c.Text.NumHiddenLayers)
	}
	for _, id := range []struct {
		name string
		v    int
	}{
		{"image_token_id", c.ImageTokenID}, {"video_token_id", c.VideoTokenID},
		{"vision_start_token_id", c.VisionStartTokenID}, {"vision_end_token_id", c.VisionEndTokenID},
	} {
		if id.v < 0 || id.v >= c.Text.VocabSize {
			return fmt.Errorf("qwen3_vl config: %s %d is outside the vocabulary of %d", id.name, id.v, c.Text.VocabSize)
		}
	}
	return nil
}

func (v *Qwen3VLVision) validate() error {
	for _, p := range []struct {
		name string
		v    int
	}{
		{"depth", v.Depth}, {"hidden_size", v.HiddenSize}, {"intermediate_size", v.IntermediateSize},
		{"num_heads", v.NumHeads}, {"in_channels", v.InChannels}, {"patch_size", v.PatchSize},
		{"spatial_merge_size", v.SpatialMergeSize}, {"temporal_patch_size", v.TemporalPatchSize},
		{"out_hidden_size", v.OutHiddenSize}, {"num_position_embeddings", v.NumPositionEmbeddings},
	} {
		if p.v <= 0 {
			return fmt.Errorf("qwen3_vl vision_config: %s must be positive, got %d", p.name, p.v)
		}
	}
	if v.HiddenSize%v.NumHeads != 0 || v.HeadDim()%4 != 0 {
		return fmt.Errorf("qwen3_vl vision_config: hidden_size %d over %d heads must give a head size divisible by 4 (2D rotary)", v.HiddenSize, v.NumHeads)
	}
	if s := v.GridSide(); s*s != v.NumPositionEmbeddings {
		return fmt.Errorf("qwen3_vl vision_config: num_position_embeddings %d is not a square", v.NumPositionEmbeddings)
	}
	if rp := v.RopeParameters; rp != nil && (rp.RopeTheta < 0 || rp.RopeType != "" && rp.RopeType != "axial" && rp.RopeType != "default") {
		return fmt.Errorf("qwen3_vl vision_config: rope_parameters %+v are not supported (axial rope)", *rp)
	}
	switch v.HiddenAct {
	case "gelu_pytorch_tanh", "gelu":
	default:
		return fmt.Errorf("qwen3_vl vision_config: hidden_act %q is not supported (gelu_pytorch_tanh or gelu)", v.HiddenAct)
	}
	seen := map[int]bool{}
	for _, d := range v.DeepstackVisualIndexes {
		if d < 0 || d >= v.Depth || seen[d] {
			return fmt.Errorf("qwen3_vl vision_config: deepstack_visual_indexes %v must be distinct blocks below depth %d", v.DeepstackVisualIndexes, v.Depth)
		}
		seen[d] = true
	}
	return nil
}

// DeepstackOrder returns, for each DeepStack feature in the order it is
// produced (by increasing vision block) and added to text layers 0, 1, ...,
// the vision block it is taken after and the index of its merger in
// deepstack_merger_list.
func (v *Qwen3VLVision) DeepstackOrder() (blocks, mergers []int) {
	blocks = slices.Clone(v.DeepstackVisualIndexes)
	slices.Sort(blocks)
	for _, b := range blocks {
		mergers = append(mergers, slices.Index(v.DeepstackVisualIndexes, b))
	}
	return blocks, mergers
}

func intOr(p *int, def int) int {
	if p != nil {
		return *p
	}
	return def
}

func hasKey(raw json.RawMessage, key string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	_, ok := m[key]
	return ok
}
