package diffusion

import (
	"encoding/json"
	"fmt"

	"vlanode/configs"
	"vlanode/diffusion/actionspace"
)

// Config is the action side of an Alpamayo-R1 model: the expert's text
// architecture and the action_* / diffusion_cfg / hist_traj_tokenizer_cfg
// sections of the release config.json (NVlabs/alpamayo config.py).
type Config struct {
	Expert ExpertConfig
	InProj InProjConfig
	// Space is action_space_cfg with its normalisation constants rounded to
	// bfloat16, as the model holds them when loaded in bf16; Load replaces
	// them with the checkpoint's action_space.* buffers when present.
	Space actionspace.Space
	// Steps is diffusion_cfg.num_inference_steps (Euler steps, 10).
	Steps int
	// History is hist_traj_tokenizer_cfg (the delta tokenizer).
	History actionspace.DeltaTokenizer
	// NonCausal is expert_non_causal_attention. The expert's additive mask
	// already makes the action tokens see each other, so the source (eager
	// or SDPA with a mask) attends bidirectionally either way; vlanode
	// always does.
	NonCausal bool
	// BuffersFromConfig computes the action space's statistics and the
	// Fourier frequencies from the config even where the checkpoint has
	// tensors of their names: Alpamayo 1.5 registers them non-persistent,
	// so NVIDIA's loader builds them from the config and never reads the
	// file's. (Alpamayo-R1 saves them; Load takes the checkpoint's.)
	BuffersFromConfig bool
}

// ExpertConfig is the expert's architecture: the VLM's text_config with the
// keys of expert_cfg set over it (the source deep-copies text_config and
// setattr()s each expert_cfg key). Every key it does not name is inherited:
// layers, KV heads, head_dim, rms_norm_eps, rope_theta.
type ExpertConfig struct {
	HiddenSize        int     `json:"hidden_size"`
	IntermediateSize  int     `json:"intermediate_size"`
	NumHiddenLayers   int     `json:"num_hidden_layers"`
	NumAttentionHeads int     `json:"num_attention_heads"`
	NumKeyValueHeads  int     `json:"num_key_value_heads"`
	HeadDim           int     `json:"head_dim"`
	RMSNormEps        float64 `json:"rms_norm_eps"`
	HiddenAct         string  `json:"hidden_act"`
	AttentionBias     bool    `json:"attention_bias"`
	RopeTheta         float64 `json:"rope_theta"`
	// RopeParameters (transformers 5) and RopeScaling (4.x) hold the rope
	// type, theta and the M-RoPE sections. The sections do not matter to
	// the expert: its three position rows are equal (see rope.go).
	RopeParameters *RopeConfig `json:"rope_parameters"`
	RopeScaling    *RopeConfig `json:"rope_scaling"`
}

// RopeConfig is a rope_parameters or rope_scaling section of a text config.
type RopeConfig struct {
	RopeType     string  `json:"rope_type"`
	Type         string  `json:"type"`
	RopeTheta    float64 `json:"rope_theta"`
	MropeSection []int   `json:"mrope_section"`
}

// InProjConfig is action_in_proj_cfg (PerWaypointActionInProjV2).
type InProjConfig struct {
	NumEncLayers    int     `json:"num_enc_layers"`    // 2 in the release (code default 4)
	HiddenSize      int     `json:"hidden_size"`       // 512 (code default 1024)
	NumFourierFeats int     `json:"num_fourier_feats"` // 20: 10 frequencies, sin and cos
	MaxFreq         float64 `json:"max_freq"`          // 100
}

// Release constants that the source fixes in code.
const (
	// Waypoints is the release's number of action tokens (n_waypoints).
	Waypoints = 64
	// ActionDims is the size of one action: acceleration and curvature.
	ActionDims = 2
	// inProjNormEps is the eps of the RMSNorms inside action_in_proj's MLP.
	inProjNormEps = 1e-5
	// inProjLayerNormEps is nn.LayerNorm's default eps, action_in_proj.norm.
	inProjLayerNormEps = 1e-5
)

// ParseConfig reads the action side of an Alpamayo config.json (alpamayo)
// on top of the VLM's config (vlm: a Qwen3-VL config.json with a
// text_config, or a text config itself). The config is read by
// configs.DecodeAlpamayoR1, the one reader of Alpamayo configs: absent
// keys take the source's constructor defaults, and each sub-config's
// _target_ must name the class vlanode runs.
func ParseConfig(alpamayo, vlm []byte) (*Config, error) {
	alp, err := configs.DecodeAlpamayoR1(alpamayo)
	if err != nil {
		return nil, fmt.Errorf("diffusion config: %w", err)
	}
	return NewConfig(alp, vlm)
}

// NewConfig is the action side of the Alpamayo config alp (read and
// checked by configs) on top of the VLM's config, as ParseConfig says.
func NewConfig(alp *configs.AlpamayoR1, vlm []byte) (*Config, error) {
	if err := alp.ValidateModules(); err != nil {
		return nil, fmt.Errorf("diffusion config: %w", err)
	}
	var expertCfg json.RawMessage
	if alp.ExpertCfg != nil {
		b, err := json.Marshal(alp.ExpertCfg)
		if err != nil {
			return nil, fmt.Errorf("diffusion config: expert_cfg: %w", err)
		}
		expertCfg = b
	}
	expert, err := parseExpert(vlm, expertCfg)
	if err != nil {
		return nil, err
	}
	ip, d := alp.ActionInProjCfg, alp.DiffusionCfg
	c := &Config{
		Expert: *expert,
		InProj: InProjConfig{NumEncLayers: ip.NumEncLayers, HiddenSize: ip.HiddenSize,
			NumFourierFeats: ip.NumFourierFeats, MaxFreq: ip.MaxFreq},
		Space:     spaceOf(alp.ActionSpaceCfg),
		Steps:     d.NumInferenceSteps,
		History:   actionspace.DefaultDeltaTokenizer(),
		NonCausal: alp.ExpertNonCausalAttention,

		BuffersFromConfig: alp.Is15(),
	}
	if h := alp.HistTrajTokenizerCfg; h != nil {
		c.History = actionspace.DeltaTokenizer{
			Min:  [3]float32{float32(h.EgoXYZMin[0]), float32(h.EgoXYZMin[1]), float32(h.EgoXYZMin[2])},
			Max:  [3]float32{float32(h.EgoXYZMax[0]), float32(h.EgoXYZMax[1]), float32(h.EgoXYZMax[2])},
			Bins: h.NumBins,
		}
	}
	return c, c.Validate()
}

// parseExpert applies expert_cfg over the VLM's text config.
func parseExpert(vlm, expertCfg json.RawMessage) (*ExpertConfig, error) {
	var wrapper struct {
		TextConfig json.RawMessage `json:"text_config"`
	}
	if err := json.Unmarshal(vlm, &wrapper); err != nil {
		return nil, fmt.Errorf("diffusion config: VLM config: %w", err)
	}
	text := vlm
	if len(wrapper.TextConfig) > 0 {
		text = wrapper.TextConfig
	}
	// Qwen3VLTextConfig's constructor defaults
	e := &ExpertConfig{
		HiddenSize: 4096, IntermediateSize: 22016, NumHiddenLayers: 32, NumAttentionHeads: 32,
		NumKeyValueHeads: 32, HeadDim: 128, RMSNormEps: 1e-6, HiddenAct: "silu",
	}
	if err := json.Unmarshal(text, e); err != nil {
		return nil, fmt.Errorf("diffusion config: VLM text config: %w", err)
	}
	if len(expertCfg) > 0 && string(expertCfg) != "null" {
		if err := json.Unmarshal(expertCfg, e); err != nil {
			return nil, fmt.Errorf("diffusion config: expert_cfg: %w", err)
		}
	}
	for _, rp := range []*RopeConfig{e.RopeParameters, e.RopeScaling} {
		if rp == nil {
			continue
		}
		if t := rp.RopeType + rp.Type; t != "" && t != "default" && t != "mrope" {
			return nil, fmt.Errorf("diffusion config: rope type %q is not supported", t)
		}
		if e.RopeTheta == 0 {
			e.RopeTheta = rp.RopeTheta
		}
	}
	if e.RopeTheta == 0 {
		e.RopeTheta = 5e6 // Qwen3VLTextConfig's default in transformers 4.57
	}
	return e, nil
}

// spaceOf is action_space_cfg with its normalisation rounded to bf16.
func spaceOf(as *configs.ActionSpaceConfig) actionspace.Space {
	bf := func(v float64) float32 { return actionspace.RoundBF16(float32(v)) }
	return actionspace.Space{
		AccelMean: bf(as.AccelMean), AccelStd: bf(as.AccelStd),
		CurvatureMean: bf(as.CurvatureMean), CurvatureStd: bf(as.CurvatureStd),
		DT: as.DT, Waypoints: as.NWaypoints, VLambda: as.VLambda, VRidge: as.VRidge,
	}
}

// Validate checks that the sizes describe a model vlanode can run.
func (c *Config) Validate() error {
	e := c.Expert
	for _, p := range []struct {
		name string
		v    int
	}{
		{"hidden_size", e.HiddenSize}, {"intermediate_size", e.IntermediateSize},
		{"num_hidden_layers", e.NumHiddenLayers}, {"num_attention_heads", e.NumAttentionHeads},
		{"num_key_value_heads", e.NumKeyValueHeads}, {"head_dim", e.HeadDim},
		{"action_in_proj_cfg.num_enc_layers", c.InProj.NumEncLayers},
		{"action_in_proj_cfg.hidden_size", c.InProj.HiddenSize},
		{"action_in_proj_cfg.num_fourier_feats", c.InProj.NumFourierFeats},
		{"diffusion_cfg.num_inference_steps", c.Steps},
	} {
		if p.v <= 0 {
			return fmt.Errorf("diffusion config: %s must be positive, got %d", p.name, p.v)
		}
	}
	switch {
	case e.NumAttentionHeads%e.NumKeyValueHeads != 0:
		return fmt.Errorf("diffusion config: num_attention_heads %d is not a multiple of num_key_value_heads %d", e.NumAttentionHeads, e.NumKeyValueHeads)
	case e.HeadDim%2 != 0:
		return fmt.Errorf("diffusion config: head_dim %d must be even", e.HeadDim)
	case e.HiddenAct != "silu":
		return fmt.Errorf("diffusion config: hidden_act %q is not supported (only silu)", e.HiddenAct)
	case e.AttentionBias:
		return fmt.Errorf("diffusion config: attention_bias is not supported (the expert has no biases)")
	case !(e.RMSNormEps > 0):
		return fmt.Errorf("diffusion config: rms_norm_eps must be positive, got %g", e.RMSNormEps)
	case c.InProj.NumFourierFeats%2 != 0:
		return fmt.Errorf("diffusion config: num_fourier_feats %d must be even", c.InProj.NumFourierFeats)
	}
	if err := c.Space.Validate(); err != nil {
		return fmt.Errorf("diffusion config: %w", err)
	}
	if err := c.History.Validate(); err != nil {
		return fmt.Errorf("diffusion config: %w", err)
	}
	return nil
}

// Qwen3 is the expert's architecture as a Qwen3 decoder config: its layers
// are Qwen3 decoder layers (models/qwen3), with the expert's own sizes.
func (c *ExpertConfig) Qwen3() *configs.Qwen3 {
	return &configs.Qwen3{
		ModelType: "qwen3", HiddenSize: c.HiddenSize, IntermediateSize: c.IntermediateSize,
		NumHiddenLayers: c.NumHiddenLayers, NumAttentionHeads: c.NumAttentionHeads,
		NumKeyValueHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim, RMSNormEps: c.RMSNormEps,
		RopeTheta: c.RopeTheta, HiddenAct: c.HiddenAct, AttentionBias: c.AttentionBias,
	}
}
