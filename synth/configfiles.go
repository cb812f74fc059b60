package synth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"strings"

	"vlanode/configs"
)

// File is a configuration file of a checkpoint.
type File struct {
	// Path is relative to the checkpoint folder, with forward slashes.
	Path string
	Data []byte
}

// ConfigFiles returns the configuration files of the layout:
//
//   - qwen3-vl-8b: config.json (Qwen3VLConfig) and tokenizer.json (Qwen's
//     151,669 tokens).
//   - qwen3-8b: config.json (Qwen3Config, as Qwen/Qwen3-8B's) and the same
//     tokenizer.json.
//   - alpamayo-r1-*: config.json (AlpamayoR1Config, vlm_name_or_path "vlm"),
//     tokenizer.json (the extended 155,697-token tokenizer), and
//     vlm/config.json and vlm/tokenizer.json: the Qwen3-VL folder the
//     config names, as the Hugging Face model folder would be.
func (l *Layout) ConfigFiles() ([]File, error) {
	s := l.spec
	if s.textOnly {
		cfg, err := marshal(s.qwen3Config())
		if err != nil {
			return nil, err
		}
		tok, err := TokenizerJSON(false)
		if err != nil {
			return nil, err
		}
		return []File{{"config.json", cfg}, {"tokenizer.json", tok}}, nil
	}
	vlmCfg, err := marshal(s.qwen3VLConfig())
	if err != nil {
		return nil, err
	}
	base, err := TokenizerJSON(false)
	if err != nil {
		return nil, err
	}
	if s.alpamayo == nil {
		return []File{{"config.json", vlmCfg}, {"tokenizer.json", base}}, nil
	}
	cfg := s.alpamayoConfig()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("synth: %s: %w", l.Arch, err)
	}
	top, err := marshal(cfg)
	if err != nil {
		return nil, err
	}
	vocab := VocabAlpamayoR1
	if s.alpamayo.v15 {
		vocab = VocabAlpamayo15
	}
	ext, err := TokenizerJSONOf(vocab)
	if err != nil {
		return nil, err
	}
	sub := s.alpamayo.vlmSubdir
	return []File{
		{"config.json", top},
		{"tokenizer.json", ext},
		{path.Join(sub, "config.json"), vlmCfg},
		{path.Join(sub, "tokenizer.json"), base},
	}, nil
}

// marshal writes v as indented JSON, without HTML escapes, as
// save_pretrained writes configs.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("synth: encoding config: %w", err)
	}
	return buf.Bytes(), nil
}

// alpamayoConfig builds the Alpamayo config.json of s.
func (s *spec) alpamayoConfig() *configs.AlpamayoR1 {
	h := s.alpamayo
	ids := alpamayoTokenIDs()
	minPx, maxPx := h.minPixels, h.maxPixels
	notRecursive := false
	actionSpace := func(full bool) *configs.ActionSpaceConfig {
		c := &configs.ActionSpaceConfig{
			Target: configs.TargetUnicycleActionSpace, AccelStd: 1, CurvatureStd: 1,
			AccelBounds: [2]float64{-h.accelBound, h.accelBound}, CurvatureBounds: [2]float64{-0.2, 0.2},
			DT: h.dt, NWaypoints: h.nWaypoints,
			ThetaLambda: 1e-6, ThetaRidge: 1e-8, VLambda: 1e-6, VRidge: 1e-4,
			ALambda: 1e-4, ARidge: 1e-4, KappaLambda: 1e-4, KappaRidge: 1e-4,
		}
		if full {
			c.AccelMean, c.AccelStd = h.accelMean, h.accelStd
			c.CurvatureMean, c.CurvatureStd = h.curvMean, h.curvStd
			c.CurvatureBounds = [2]float64{-h.curvBound, h.curvBound}
		}
		return c
	}
	modelType, arch := configs.AlpamayoR1ModelType, "AlpamayoR1"
	target := func(t string) string { return t }
	if h.v15 {
		// Alpamayo 1.5's names: the R1 release's paths in package
		// alpamayo1_5 (the inverse of NVlabs/alpamayo's TARGET_REMAP)
		modelType, arch = configs.Alpamayo15ModelType, "Alpamayo1_5"
		target = func(t string) string {
			if rest, ok := strings.CutPrefix(t, "alpamayo_r1."); ok {
				return "alpamayo1_5." + rest
			}
			return t
		}
	}
	c := &configs.AlpamayoR1{
		ModelType:            modelType,
		Architectures:        []string{arch},
		DType:                "bfloat16",
		VLMNameOrPath:        h.vlmSubdir,
		VLMBackend:           "qwenvl3",
		ModelDType:           "bfloat16",
		AttnImplementation:   "flash_attention_2",
		VocabSize:            s.text.vocab,
		TrajVocabSize:        trajVocabSize,
		TokensPerHistoryTraj: h.historyTokens,
		TokensPerFutureTraj:  h.futureTokens,
		MinPixels:            &minPx,
		MaxPixels:            &maxPx,
		AddSpecialTokens:     true,
		TrajTokenStartIdx:    ids.start,
		TrajTokenIDs:         ids.traj,
		TrajTokenizerCfg: &configs.DiscreteTrajTokenizerConfig{
			Target: configs.TargetDiscreteTokenizer, Recursive: &notRecursive,
			ActionSpaceCfg: actionSpace(false),
			DimsMin:        []float64{h.trajDimsMin, h.trajDimsMin},
			DimsMax:        []float64{h.trajDimsMax, h.trajDimsMax},
			NumBins:        h.trajBins,
		},
		HistTrajTokenizerCfg: &configs.DeltaTrajTokenizerConfig{
			Target: configs.TargetDeltaTokenizer, EgoXYZMin: [3]float64{-4, -4, -10}, EgoXYZMax: [3]float64{4, 4, 10},
			EgoYawMin: -math.Pi, EgoYawMax: math.Pi, NumBins: h.histBins,
		},
		ExpertCfg: map[string]any{
			"head_dim": h.expert.headDim, "hidden_size": h.expert.hidden,
			"intermediate_size": h.expert.intermediate, "num_attention_heads": h.expert.heads,
		},
		ActionSpaceCfg: actionSpace(true),
		ActionInProjCfg: &configs.ActionInProjConfig{
			Target: configs.TargetActionInProjV2, NumEncLayers: h.inProjLayers,
			HiddenSize: h.inProjHidden, MaxFreq: h.maxFreq, NumFourierFeats: h.fourierFeats,
		},
		ActionOutProjCfg: &configs.ActionOutProjConfig{Target: configs.TargetLinear},
		DiffusionCfg: &configs.DiffusionConfig{
			Target: configs.TargetFlowMatching, IntMethod: "euler", TrainTimestepSampler: "beta",
			NumInferenceSteps: h.numInferenceSteps, TrainIgnoreGuidanceRate: 0.1, InferenceGuidanceWeight: 1,
		},
		KeepSameDType:            true,
		ExpertNonCausalAttention: true,
		TransformersVersion:      h.transformersVersion,
	}
	for _, t := range []*string{&c.TrajTokenizerCfg.Target, &c.TrajTokenizerCfg.ActionSpaceCfg.Target,
		&c.HistTrajTokenizerCfg.Target, &c.ActionSpaceCfg.Target, &c.ActionInProjCfg.Target,
		&c.ActionOutProjCfg.Target, &c.DiffusionCfg.Target} {
		*t = target(*t)
	}
	return c
}
