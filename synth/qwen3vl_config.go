package synth

// qwen3VLConfigJSON is the config.json of Qwen3VLForConditionalGeneration,
// keys as Qwen/Qwen3-VL-8B-Instruct writes them.
type qwen3VLConfigJSON struct {
	Architectures       []string          `json:"architectures"`
	ImageTokenID        int               `json:"image_token_id"`
	ModelType           string            `json:"model_type"`
	TextConfig          qwen3VLTextJSON   `json:"text_config"`
	TieWordEmbeddings   bool              `json:"tie_word_embeddings"`
	TransformersVersion string            `json:"transformers_version"`
	VideoTokenID        int               `json:"video_token_id"`
	VisionConfig        qwen3VLVisionJSON `json:"vision_config"`
	VisionEndTokenID    int               `json:"vision_end_token_id"`
	VisionStartTokenID  int               `json:"vision_start_token_id"`
}

type qwen3VLTextJSON struct {
	AttentionBias         bool            `json:"attention_bias"`
	AttentionDropout      float64         `json:"attention_dropout"`
	BOSTokenID            int             `json:"bos_token_id"`
	DType                 string          `json:"dtype"`
	EOSTokenID            int             `json:"eos_token_id"`
	HeadDim               int             `json:"head_dim"`
	HiddenAct             string          `json:"hidden_act"`
	HiddenSize            int             `json:"hidden_size"`
	InitializerRange      float64         `json:"initializer_range"`
	IntermediateSize      int             `json:"intermediate_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	ModelType             string          `json:"model_type"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumKeyValueHeads      int             `json:"num_key_value_heads"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeScaling           ropeScalingJSON `json:"rope_scaling"`
	RopeTheta             float64         `json:"rope_theta"`
	UseCache              bool            `json:"use_cache"`
	VocabSize             int             `json:"vocab_size"`
}

type ropeScalingJSON struct {
	MropeInterleaved bool   `json:"mrope_interleaved"`
	MropeSection     [3]int `json:"mrope_section"`
	RopeType         string `json:"rope_type"`
}

type qwen3VLVisionJSON struct {
	DeepstackVisualIndexes []int   `json:"deepstack_visual_indexes"`
	Depth                  int     `json:"depth"`
	HiddenAct              string  `json:"hidden_act"`
	HiddenSize             int     `json:"hidden_size"`
	InChannels             int     `json:"in_channels"`
	InitializerRange       float64 `json:"initializer_range"`
	IntermediateSize       int     `json:"intermediate_size"`
	ModelType              string  `json:"model_type"`
	NumHeads               int     `json:"num_heads"`
	NumPositionEmbeddings  int     `json:"num_position_embeddings"`
	OutHiddenSize          int     `json:"out_hidden_size"`
	PatchSize              int     `json:"patch_size"`
	SpatialMergeSize       int     `json:"spatial_merge_size"`
	TemporalPatchSize      int     `json:"temporal_patch_size"`
}

// qwen3VLConfig is the Qwen3-VL config of s. For Alpamayo it is the VLM
// folder's config, whose vocab_size stays Qwen's: the Alpamayo config's
// vocab_size replaces it.
func (s *spec) qwen3VLConfig() qwen3VLConfigJSON {
	t, v := s.text, s.vision
	return qwen3VLConfigJSON{
		Architectures: []string{"Qwen3VLForConditionalGeneration"},
		ImageTokenID:  t.imageToken,
		ModelType:     "qwen3_vl",
		TextConfig: qwen3VLTextJSON{
			BOSTokenID: t.bosTokenID, DType: "bfloat16", EOSTokenID: t.eosTokenID,
			HeadDim: t.headDim, HiddenAct: "silu", HiddenSize: t.hidden, InitializerRange: 0.02,
			IntermediateSize: t.intermediate, MaxPositionEmbeddings: t.maxPositions,
			ModelType: "qwen3_vl_text", NumAttentionHeads: t.heads, NumHiddenLayers: t.layers,
			NumKeyValueHeads: t.kvHeads, RMSNormEps: t.rmsNormEps,
			RopeScaling: ropeScalingJSON{MropeInterleaved: true, MropeSection: t.mropeSection, RopeType: "default"},
			RopeTheta:   t.ropeTheta, UseCache: true, VocabSize: t.configVocab,
		},
		TransformersVersion: t.transformersVersion,
		VideoTokenID:        t.videoToken,
		VisionConfig: qwen3VLVisionJSON{
			DeepstackVisualIndexes: v.deepstack, Depth: v.depth, HiddenAct: "gelu_pytorch_tanh",
			HiddenSize: v.hidden, InChannels: v.inChannels, InitializerRange: 0.02,
			IntermediateSize: v.intermediate, ModelType: "qwen3_vl", NumHeads: v.heads,
			NumPositionEmbeddings: v.numPosEmbeddings, OutHiddenSize: v.outHidden,
			PatchSize: v.patch, SpatialMergeSize: v.merge, TemporalPatchSize: v.temporal,
		},
		VisionEndTokenID:   t.visionEndToken,
		VisionStartTokenID: t.visionStartToken,
	}
}

// qwen3ConfigJSON is the config.json of Qwen3ForCausalLM, keys as
// Qwen/Qwen3-8B writes them.
type qwen3ConfigJSON struct {
	Architectures         []string `json:"architectures"`
	AttentionBias         bool     `json:"attention_bias"`
	AttentionDropout      float64  `json:"attention_dropout"`
	BOSTokenID            int      `json:"bos_token_id"`
	EOSTokenID            int      `json:"eos_token_id"`
	HeadDim               int      `json:"head_dim"`
	HiddenAct             string   `json:"hidden_act"`
	HiddenSize            int      `json:"hidden_size"`
	InitializerRange      float64  `json:"initializer_range"`
	IntermediateSize      int      `json:"intermediate_size"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	MaxWindowLayers       int      `json:"max_window_layers"`
	ModelType             string   `json:"model_type"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	RopeScaling           *string  `json:"rope_scaling"`
	RopeTheta             float64  `json:"rope_theta"`
	SlidingWindow         *int     `json:"sliding_window"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	TorchDType            string   `json:"torch_dtype"`
	TransformersVersion   string   `json:"transformers_version"`
	UseCache              bool     `json:"use_cache"`
	UseSlidingWindow      bool     `json:"use_sliding_window"`
	VocabSize             int      `json:"vocab_size"`
}

// qwen3Config is the Qwen3 text model config of s.
func (s *spec) qwen3Config() qwen3ConfigJSON {
	t := s.text
	return qwen3ConfigJSON{
		Architectures: []string{"Qwen3ForCausalLM"}, BOSTokenID: t.bosTokenID, EOSTokenID: t.eosTokenID,
		HeadDim: t.headDim, HiddenAct: "silu", HiddenSize: t.hidden, InitializerRange: 0.02,
		IntermediateSize: t.intermediate, MaxPositionEmbeddings: t.maxPositions, MaxWindowLayers: t.layers,
		ModelType: "qwen3", NumAttentionHeads: t.heads, NumHiddenLayers: t.layers, NumKeyValueHeads: t.kvHeads,
		RMSNormEps: t.rmsNormEps, RopeTheta: t.ropeTheta, TorchDType: "bfloat16",
		TransformersVersion: t.transformersVersion, UseCache: true, VocabSize: t.configVocab,
	}
}
