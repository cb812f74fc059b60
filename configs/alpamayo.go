package configs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// AlpamayoR1ModelType is the model_type of Alpamayo-R1 checkpoints
// (AlpamayoR1Config in NVlabs/alpamayo src/alpamayo_r1/config.py).
const AlpamayoR1ModelType = "alpamayo_r1"

// Alpamayo15ModelType is the model_type of Alpamayo 1.5 checkpoints
// (Alpamayo1_5Config in NVlabs/alpamayo1.5 src/alpamayo1_5/config.py).
const Alpamayo15ModelType = "alpamayo1_5"

// IsAlpamayo reports whether modelType is one of the Alpamayo model types
// (R1 or 1.5), whose config.json AlpamayoR1 reads.
func IsAlpamayo(modelType string) bool {
	return modelType == AlpamayoR1ModelType || modelType == Alpamayo15ModelType
}

// DefaultVLMNameOrPath is ReasoningVLAConfig's default vlm_name_or_path.
const DefaultVLMNameOrPath = "Qwen/Qwen3-VL-8B-Instruct"

// AlpamayoR1 is the config.json of an Alpamayo-R1 or Alpamayo 1.5
// checkpoint (ModelType says which; 1.5's config class adds two keys to
// R1's, IncludeCameraIDs and IncludeFrameNums). It does not
// hold the VLM's architecture: VLMNameOrPath names a Qwen3-VL config (see
// VLMLocator), whose vocabulary is replaced by VocabSize and whose
// text_config, with ExpertCfg applied, is the action expert's.
//
// Absent keys take the defaults of ReasoningVLAConfig and AlpamayoR1Config
// (src/alpamayo_r1/models/base_model.py, config.py); absent keys inside a
// sub-config take the defaults of the class its _target_ names.
type AlpamayoR1 struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures,omitempty"`
	DType         string   `json:"dtype,omitempty"`

	VLMNameOrPath      string `json:"vlm_name_or_path"`
	VLMBackend         string `json:"vlm_backend"`
	ModelDType         string `json:"model_dtype"`
	AttnImplementation string `json:"attn_implementation"`

	// VocabSize is the length of the extended tokenizer (Qwen's tokens, the
	// trajectory tokens <i0>… and Alpamayo's special tokens); it replaces the
	// VLM config's vocab_size.
	VocabSize            int  `json:"vocab_size"`
	TrajVocabSize        int  `json:"traj_vocab_size"`
	TokensPerHistoryTraj int  `json:"tokens_per_history_traj"`
	TokensPerFutureTraj  int  `json:"tokens_per_future_traj"`
	MinPixels            *int `json:"min_pixels"`
	MaxPixels            *int `json:"max_pixels"`
	AddSpecialTokens     bool `json:"add_special_tokens"`
	// TrajTokenStartIdx is the id of <i0>.
	TrajTokenStartIdx int          `json:"traj_token_start_idx"`
	TrajTokenIDs      TrajTokenIDs `json:"traj_token_ids"`

	TrajTokenizerCfg     *DiscreteTrajTokenizerConfig `json:"traj_tokenizer_cfg"`
	HistTrajTokenizerCfg *DeltaTrajTokenizerConfig    `json:"hist_traj_tokenizer_cfg"`

	// ExpertCfg overrides keys of the VLM's text_config for the expert
	// (head_dim, hidden_size, intermediate_size, num_attention_heads, ...).
	ExpertCfg        map[string]any       `json:"expert_cfg"`
	ActionSpaceCfg   *ActionSpaceConfig   `json:"action_space_cfg"`
	ActionInProjCfg  *ActionInProjConfig  `json:"action_in_proj_cfg"`
	ActionOutProjCfg *ActionOutProjConfig `json:"action_out_proj_cfg"`
	DiffusionCfg     *DiffusionConfig     `json:"diffusion_cfg"`

	KeepSameDType            bool `json:"keep_same_dtype"`
	ExpertNonCausalAttention bool `json:"expert_non_causal_attention"`

	// IncludeCameraIDs and IncludeFrameNums are Alpamayo 1.5's config
	// keys (default false). NVIDIA's inference code does not read them:
	// its prompt names the cameras and frames whenever the caller gives
	// camera indices (see models/alpamayo).
	IncludeCameraIDs bool `json:"include_camera_ids,omitempty"`
	IncludeFrameNums bool `json:"include_frame_nums,omitempty"`

	TransformersVersion string `json:"transformers_version,omitempty"`
}

// TrajTokenIDs are the ids of the trajectory placeholder and delimiter
// tokens (TRAJ_TOKEN in base_model.py).
type TrajTokenIDs struct {
	History      int `json:"history"`
	Future       int `json:"future"`
	HistoryStart int `json:"history_start"`
	FutureStart  int `json:"future_start"`
	HistoryEnd   int `json:"history_end"`
	FutureEnd    int `json:"future_end"`
}

// ActionSpaceConfig is UnicycleAccelCurvatureActionSpace's arguments: the
// normalisation of the (acceleration, curvature) controls and the unicycle
// integration.
type ActionSpaceConfig struct {
	Target          string     `json:"_target_"`
	AccelMean       float64    `json:"accel_mean"`
	AccelStd        float64    `json:"accel_std"`
	CurvatureMean   float64    `json:"curvature_mean"`
	CurvatureStd    float64    `json:"curvature_std"`
	AccelBounds     [2]float64 `json:"accel_bounds"`
	CurvatureBounds [2]float64 `json:"curvature_bounds"`
	DT              float64    `json:"dt"`
	NWaypoints      int        `json:"n_waypoints"`
	ThetaLambda     float64    `json:"theta_lambda"`
	ThetaRidge      float64    `json:"theta_ridge"`
	VLambda         float64    `json:"v_lambda"`
	VRidge          float64    `json:"v_ridge"`
	ALambda         float64    `json:"a_lambda"`
	ARidge          float64    `json:"a_ridge"`
	KappaLambda     float64    `json:"kappa_lambda"`
	KappaRidge      float64    `json:"kappa_ridge"`
}

// ActionDims is the number of controls per waypoint (acceleration,
// curvature).
const ActionDims = 2

// UnmarshalJSON fills the class defaults, then the keys present.
func (c *ActionSpaceConfig) UnmarshalJSON(b []byte) error {
	type plain ActionSpaceConfig
	p := plain{
		AccelStd: 1, CurvatureStd: 1,
		AccelBounds: [2]float64{-9.8, 9.8}, CurvatureBounds: [2]float64{-0.2, 0.2},
		DT: 0.1, NWaypoints: 64,
		ThetaLambda: 1e-6, ThetaRidge: 1e-8, VLambda: 1e-6, VRidge: 1e-4,
		ALambda: 1e-4, ARidge: 1e-4, KappaLambda: 1e-4, KappaRidge: 1e-4,
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = ActionSpaceConfig(p)
	return nil
}

// ActionInProjConfig is PerWaypointActionInProjV2's arguments: Fourier
// features of each control and of the flow time, then an MLP to the
// expert's hidden size.
type ActionInProjConfig struct {
	Target          string  `json:"_target_"`
	NumEncLayers    int     `json:"num_enc_layers"`
	HiddenSize      int     `json:"hidden_size"`
	MaxFreq         float64 `json:"max_freq"`
	NumFourierFeats int     `json:"num_fourier_feats"`
}

// UnmarshalJSON fills the class defaults, then the keys present.
func (c *ActionInProjConfig) UnmarshalJSON(b []byte) error {
	type plain ActionInProjConfig
	p := plain{NumEncLayers: 4, HiddenSize: 1024, MaxFreq: 100, NumFourierFeats: 20}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = ActionInProjConfig(p)
	return nil
}

// Freqs returns the frequencies of one Fourier encoder (its "freqs" buffer,
// shape [1, NumFourierFeats/2]): torch.logspace(0, log10(MaxFreq),
// NumFourierFeats/2), rounded to float32 as torch computes it.
func (c *ActionInProjConfig) Freqs() []float32 {
	n := c.NumFourierFeats / 2
	out := make([]float32, n)
	top := math.Log10(c.MaxFreq)
	for i := range out {
		e := 0.0
		if n > 1 {
			e = top * float64(i) / float64(n-1)
		}
		out[i] = float32(math.Pow(10, e))
	}
	return out
}

// InputFeatures is the width of the MLP's input: NumFourierFeats for each
// control and for the flow time.
func (c *ActionInProjConfig) InputFeatures() int { return (ActionDims + 1) * c.NumFourierFeats }

// ActionOutProjConfig is the output projection (an nn.Linear from the
// expert's hidden size to the controls).
type ActionOutProjConfig struct {
	Target string `json:"_target_"`
}

// DiffusionConfig is FlowMatching's arguments.
type DiffusionConfig struct {
	Target                  string  `json:"_target_"`
	IntMethod               string  `json:"int_method"`
	TrainTimestepSampler    string  `json:"train_timestep_sampler"`
	NumInferenceSteps       int     `json:"num_inference_steps"`
	TrainIgnoreGuidanceRate float64 `json:"train_ignore_guidance_rate"`
	InferenceGuidanceWeight float64 `json:"inference_guidance_weight"`
	// UseClassifierFreeGuidance is BaseDiffusion's default for sample()
	// (false): Alpamayo 1.5's navigation rollout then mixes the velocity
	// with and without the navigation text by InferenceGuidanceWeight.
	UseClassifierFreeGuidance bool `json:"use_classifier_free_guidance,omitempty"`
}

// UnmarshalJSON fills the class defaults, then the keys present.
func (c *DiffusionConfig) UnmarshalJSON(b []byte) error {
	type plain DiffusionConfig
	p := plain{IntMethod: "euler", TrainTimestepSampler: "beta", NumInferenceSteps: 10,
		TrainIgnoreGuidanceRate: 0.1, InferenceGuidanceWeight: 1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = DiffusionConfig(p)
	return nil
}

// DiscreteTrajTokenizerConfig is DiscreteTrajectoryTokenizer's arguments:
// future trajectories as quantized controls (it has no defaults).
type DiscreteTrajTokenizerConfig struct {
	Target         string             `json:"_target_"`
	Recursive      *bool              `json:"_recursive_,omitempty"`
	ActionSpaceCfg *ActionSpaceConfig `json:"action_space_cfg"`
	DimsMin        []float64          `json:"dims_min"`
	DimsMax        []float64          `json:"dims_max"`
	NumBins        int                `json:"num_bins"`
}

// DeltaTrajTokenizerConfig is DeltaTrajectoryTokenizer's arguments: the
// ego history as quantized xyz steps.
type DeltaTrajTokenizerConfig struct {
	Target     string     `json:"_target_"`
	EgoXYZMin  [3]float64 `json:"ego_xyz_min"`
	EgoXYZMax  [3]float64 `json:"ego_xyz_max"`
	EgoYawMin  float64    `json:"ego_yaw_min"`
	EgoYawMax  float64    `json:"ego_yaw_max"`
	NumBins    int        `json:"num_bins"`
	PredictYaw bool       `json:"predict_yaw"`
}

// UnmarshalJSON fills the class defaults, then the keys present.
func (c *DeltaTrajTokenizerConfig) UnmarshalJSON(b []byte) error {
	type plain DeltaTrajTokenizerConfig
	p := plain{EgoXYZMin: [3]float64{-4, -4, -10}, EgoXYZMax: [3]float64{4, 4, 10},
		EgoYawMin: -math.Pi, EgoYawMax: math.Pi, NumBins: 1000}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = DeltaTrajTokenizerConfig(p)
	return nil
}

// ParseAlpamayoR1 decodes and validates an Alpamayo-R1 config.json, filling
// the source's defaults for absent keys.
func ParseAlpamayoR1(raw []byte) (*AlpamayoR1, error) {
	c, err := decodeAlpamayo(raw)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// DecodeAlpamayoR1 decodes an Alpamayo config.json, filling the source's
// defaults, and validates only the sub-configs of the modules: what the
// action side needs (ValidateModules). A checkpoint of the action side
// alone (the expert references) has no vocabulary to check.
func DecodeAlpamayoR1(raw []byte) (*AlpamayoR1, error) {
	c, err := decodeAlpamayo(raw)
	if err != nil {
		return nil, err
	}
	if err := c.ValidateModules(); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeAlpamayo decodes raw over the defaults of ReasoningVLAConfig and
// AlpamayoR1Config.
func decodeAlpamayo(raw []byte) (*AlpamayoR1, error) {
	c := &AlpamayoR1{
		VLMNameOrPath:            DefaultVLMNameOrPath,
		VLMBackend:               "qwenvl3",
		ModelDType:               "bfloat16",
		AttnImplementation:       "flash_attention_2",
		TrajVocabSize:            768,
		TokensPerHistoryTraj:     16,
		TokensPerFutureTraj:      64,
		KeepSameDType:            true,
		ExpertNonCausalAttention: true,
	}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("alpamayo_r1 config: %w", err)
	}
	return c, nil
}

// LoadAlpamayoR1 reads DIR/config.json as an Alpamayo-R1 config.
func LoadAlpamayoR1(dir string) (*AlpamayoR1, error) {
	mt, err := ReadModelType(dir)
	if err != nil {
		return nil, err
	}
	if !IsAlpamayo(mt) {
		return nil, fmt.Errorf("%w; this command needs %s or %s", UnknownArchitecture(dir, mt), AlpamayoR1ModelType, Alpamayo15ModelType)
	}
	raw, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	c, err := ParseAlpamayoR1(raw)
	if err != nil {
		return nil, fmt.Errorf("configs: %s: %w", configPath(dir), err)
	}
	return c, nil
}

// Is15 reports whether the config is Alpamayo 1.5's.
func (c *AlpamayoR1) Is15() bool { return c.ModelType == Alpamayo15ModelType }

// HistTokenStartIdx is the id of history bin 0: the trajectory tokens
// start with the future tokenizer's bins, then the history tokenizer's when
// it is a separate one (ReasoningVLA._initialize_trajectory_tokenizers).
func (c *AlpamayoR1) HistTokenStartIdx() int {
	if c.HistTrajTokenizerCfg != nil && c.TrajTokenizerCfg != nil {
		return c.TrajTokenStartIdx + c.TrajTokenizerCfg.NumBins
	}
	return c.TrajTokenStartIdx
}

// Validate checks that the config describes a model vlanode can run.
func (c *AlpamayoR1) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if c.VLMNameOrPath == "" {
		bad("vlm_name_or_path is empty")
	}
	if c.VLMBackend != "qwenvl3" {
		bad("vlm_backend %q is not supported (only qwenvl3)", c.VLMBackend)
	}
	for _, p := range []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize}, {"traj_vocab_size", c.TrajVocabSize},
		{"tokens_per_history_traj", c.TokensPerHistoryTraj},
		{"tokens_per_future_traj", c.TokensPerFutureTraj},
	} {
		if p.v <= 0 {
			bad("%s must be positive, got %d", p.name, p.v)
		}
	}
	if c.TrajTokenStartIdx <= 0 || c.TrajTokenStartIdx+c.TrajVocabSize > c.VocabSize {
		bad("trajectory tokens [%d, %d) do not fit in vocab_size %d",
			c.TrajTokenStartIdx, c.TrajTokenStartIdx+c.TrajVocabSize, c.VocabSize)
	}
	ids := c.TrajTokenIDs
	for _, p := range []struct {
		name string
		v    int
	}{
		{"history", ids.History}, {"future", ids.Future}, {"history_start", ids.HistoryStart},
		{"future_start", ids.FutureStart}, {"history_end", ids.HistoryEnd}, {"future_end", ids.FutureEnd},
	} {
		if p.v <= 0 || p.v >= c.VocabSize {
			bad("traj_token_ids.%s = %d is outside the vocabulary [1, %d)", p.name, p.v, c.VocabSize)
		}
	}
	if c.MinPixels != nil && c.MaxPixels != nil && (*c.MinPixels <= 0 || *c.MinPixels > *c.MaxPixels) {
		bad("min_pixels %d and max_pixels %d must satisfy 0 < min <= max", *c.MinPixels, *c.MaxPixels)
	}
	if bins := c.trajBins(); bins > c.TrajVocabSize {
		bad("the trajectory tokenizers use %d bins, more than traj_vocab_size %d", bins, c.TrajVocabSize)
	}
	errs = append(errs, c.moduleErrors()...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("alpamayo_r1 config: %w", err)
	}
	return nil
}

// ValidateModules checks the sub-configs of the modules with weights or
// inference-time behaviour: each _target_ names the class vlanode runs (in
// any spelling NVIDIA's code resolves, see Class) and the values are ones
// it can run.
func (c *AlpamayoR1) ValidateModules() error {
	if err := errors.Join(c.moduleErrors()...); err != nil {
		return fmt.Errorf("alpamayo_r1 config: %w", err)
	}
	return nil
}

// moduleErrors lists what ValidateModules finds.
func (c *AlpamayoR1) moduleErrors() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	target := func(key, got string, want Class) {
		if err := want.Check(key, got); err != nil {
			errs = append(errs, err)
		}
	}
	if as := c.ActionSpaceCfg; as == nil {
		bad("action_space_cfg is missing")
	} else {
		target("action_space_cfg", as.Target, ClassUnicycleActionSpace)
		if as.NWaypoints <= 0 || as.DT <= 0 || as.AccelStd <= 0 || as.CurvatureStd <= 0 {
			bad("action_space_cfg: n_waypoints %d, dt %g, accel_std %g and curvature_std %g must be positive",
				as.NWaypoints, as.DT, as.AccelStd, as.CurvatureStd)
		}
	}
	if ip := c.ActionInProjCfg; ip == nil {
		bad("action_in_proj_cfg is missing")
	} else {
		target("action_in_proj_cfg", ip.Target, ClassActionInProjV2)
		if ip.NumEncLayers < 1 || ip.HiddenSize <= 0 || ip.NumFourierFeats <= 0 || ip.NumFourierFeats%2 != 0 || ip.MaxFreq <= 0 {
			bad("action_in_proj_cfg: num_enc_layers %d >= 1, hidden_size %d > 0, even num_fourier_feats %d > 0 and max_freq %g > 0 are required",
				ip.NumEncLayers, ip.HiddenSize, ip.NumFourierFeats, ip.MaxFreq)
		}
	}
	if op := c.ActionOutProjCfg; op == nil {
		bad("action_out_proj_cfg is missing")
	} else {
		target("action_out_proj_cfg", op.Target, ClassLinear)
	}
	if d := c.DiffusionCfg; d == nil {
		bad("diffusion_cfg is missing")
	} else {
		target("diffusion_cfg", d.Target, ClassFlowMatching)
		if d.IntMethod != "euler" {
			bad("diffusion_cfg: int_method %q is not supported (only euler)", d.IntMethod)
		}
		if d.NumInferenceSteps <= 0 {
			bad("diffusion_cfg: num_inference_steps must be positive, got %d", d.NumInferenceSteps)
		}
	}
	if t := c.TrajTokenizerCfg; t != nil {
		target("traj_tokenizer_cfg", t.Target, ClassDiscreteTokenizer)
		if as := t.ActionSpaceCfg; as != nil {
			target("traj_tokenizer_cfg.action_space_cfg", as.Target, ClassUnicycleActionSpace)
		}
		if t.NumBins <= 0 || len(t.DimsMin) != ActionDims || len(t.DimsMax) != ActionDims {
			bad("traj_tokenizer_cfg: num_bins %d must be positive and dims_min/dims_max have %d values", t.NumBins, ActionDims)
		}
	}
	if h := c.HistTrajTokenizerCfg; h != nil {
		target("hist_traj_tokenizer_cfg", h.Target, ClassDeltaTokenizer)
		if h.NumBins <= 0 {
			bad("hist_traj_tokenizer_cfg: num_bins must be positive, got %d", h.NumBins)
		}
		if h.PredictYaw {
			bad("hist_traj_tokenizer_cfg: predict_yaw is not supported (the history tokens are xyz steps)")
		}
	}
	return errs
}

// trajBins is the number of trajectory tokens the tokenizers use: the
// future tokenizer's bins, then the history tokenizer's when it is a
// separate one.
func (c *AlpamayoR1) trajBins() int {
	bins := 0
	if t := c.TrajTokenizerCfg; t != nil {
		bins = t.NumBins
	}
	if h := c.HistTrajTokenizerCfg; h != nil {
		if c.TrajTokenizerCfg != nil {
			bins += h.NumBins
		} else {
			bins = h.NumBins
		}
	}
	return bins
}
