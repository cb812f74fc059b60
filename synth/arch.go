package synth

import (
	"fmt"
	"strings"
)

// Arch names a synthetic checkpoint layout.
type Arch string

// The architectures synth writes.
const (
	// AlpamayoR1_10B is Alpamayo-R1-10B at its real shapes.
	AlpamayoR1_10B Arch = "alpamayo-r1-10b"
	// AlpamayoR1Tiny is Alpamayo-R1 with tiny dimensions: text hidden 128,
	// 4 layers, vision hidden 64, expert hidden 64; same tokenizer, same
	// head (48 history tokens, 64 waypoints) and 16 camera images of 64×96.
	AlpamayoR1Tiny Arch = "alpamayo-r1-tiny"
	// Alpamayo15_10B is Alpamayo 1.5 (nvidia/Alpamayo-1.5-10B) at its real
	// shapes: Alpamayo-R1-10B's tensors without the buffers 1.5 does not
	// save (the action-space statistics and the Fourier frequencies, which
	// it registers non-persistent and computes from the config), its
	// model_type and _target_ names, and its tokenizer's token names.
	Alpamayo15_10B Arch = "alpamayo-1.5-10b"
	// Alpamayo15Tiny is Alpamayo 1.5 at AlpamayoR1Tiny's dimensions.
	Alpamayo15Tiny Arch = "alpamayo-1.5-tiny"
	// Qwen3VL8B is Qwen3-VL-8B-Instruct.
	Qwen3VL8B Arch = "qwen3-vl-8b"
	// Qwen3_8B is Qwen/Qwen3-8B, a text model (Qwen3ForCausalLM): 36
	// layers, hidden 4096, MLP 12288, 32 query and 8 KV heads of 128, an
	// untied LM head over 151,936 ids.
	Qwen3_8B Arch = "qwen3-8b"
	// Qwen3Tiny is Qwen3-8B's layout with tiny dimensions (hidden 128, 4
	// layers of 4 query and 2 KV heads of 32, MLP 3072, the same vocabulary
	// and untied LM head): 88 MB, its MLPs larger than the device's 2 MiB
	// pages, so that a plan streams them and splits them with the CPU in
	// tests.
	Qwen3Tiny Arch = "qwen3-tiny"
)

// Archs lists the known architectures.
func Archs() []Arch {
	return []Arch{AlpamayoR1_10B, AlpamayoR1Tiny, Alpamayo15_10B, Alpamayo15Tiny, Qwen3VL8B, Qwen3_8B, Qwen3Tiny}
}

// ParseArch maps a name to an Arch.
func ParseArch(s string) (Arch, error) {
	for _, a := range Archs() {
		if string(a) == s {
			return a, nil
		}
	}
	names := make([]string, 0, len(Archs()))
	for _, a := range Archs() {
		names = append(names, string(a))
	}
	return "", fmt.Errorf("synth: unknown architecture %q (known: %s)", s, strings.Join(names, ", "))
}

// visionDims are the Qwen3-VL vision_config values that shape tensors.
type visionDims struct {
	depth, hidden, intermediate, heads int
	outHidden                          int // the text hidden size
	numPosEmbeddings                   int // a square grid
	patch, temporal, merge, inChannels int
	deepstack                          []int // blocks whose output feeds a DeepStack merger
}

// textDims are the Qwen3-VL text_config values.
type textDims struct {
	vocab                            int // rows of embed_tokens and lm_head
	configVocab                      int // vocab_size written in the VLM's own config.json
	hidden, intermediate, layers     int
	heads, kvHeads, headDim          int
	ropeTheta                        float64
	mropeSection                     [3]int
	maxPositions                     int
	bosTokenID, eosTokenID           int
	imageToken, videoToken           int
	visionStartToken, visionEndToken int
	rmsNormEps                       float64
	transformersVersion              string
}

// expertDims are Alpamayo's expert_cfg overrides of the text config.
type expertDims struct {
	hidden, intermediate, heads, headDim int
}

// head holds the Alpamayo settings outside the VLM.
type head struct {
	expert                   expertDims
	minPixels, maxPixels     int
	inProjHidden             int
	inProjLayers             int
	fourierFeats             int
	maxFreq                  float64
	historyTokens            int
	futureTokens             int
	trajBins, histBins       int
	numInferenceSteps        int
	vlmSubdir                string // the VLM folder, relative to the checkpoint
	transformersVersion      string
	accelMean, accelStd      float64
	curvMean, curvStd        float64
	curvBound, accelBound    float64
	nWaypoints               int
	dt                       float64
	trajDimsMin, trajDimsMax float64
	// v15 writes Alpamayo 1.5's layout (see Alpamayo15_10B).
	v15 bool
}

// spec is everything that determines a synthetic checkpoint.
type spec struct {
	arch     Arch
	vision   visionDims
	text     textDims
	alpamayo *head // nil: plain Qwen3-VL, or a text model
	// textOnly is a Qwen3 text model (Qwen3ForCausalLM): no vision, text
	// alone.
	textOnly bool
}

// qwen3_8BDims returns Qwen/Qwen3-8B's config.json values (its
// transformers 4.51.0 config: rope_theta 1,000,000, 40,960 positions,
// rms_norm_eps 1e-6, tie_word_embeddings false).
func qwen3_8BDims() textDims {
	return textDims{
		vocab: 151936, configVocab: 151936,
		hidden: 4096, intermediate: 12288, layers: 36, heads: 32, kvHeads: 8, headDim: 128,
		ropeTheta: 1e6, maxPositions: 40960, bosTokenID: 151643, eosTokenID: 151645,
		rmsNormEps: 1e-6, transformersVersion: "4.51.0",
	}
}

// qwen3VL8BDims returns Qwen/Qwen3-VL-8B-Instruct's config values.
func qwen3VL8BDims() (visionDims, textDims) {
	v := visionDims{
		depth: 27, hidden: 1152, intermediate: 4304, heads: 16, outHidden: 4096,
		numPosEmbeddings: 2304, patch: 16, temporal: 2, merge: 2, inChannels: 3,
		deepstack: []int{8, 16, 24},
	}
	t := textDims{
		vocab: 151936, configVocab: 151936,
		hidden: 4096, intermediate: 12288, layers: 36, heads: 32, kvHeads: 8, headDim: 128,
		ropeTheta: 5e6, mropeSection: [3]int{24, 20, 20}, maxPositions: 262144,
		bosTokenID: 151643, eosTokenID: 151645,
		imageToken: 151655, videoToken: 151656, visionStartToken: 151652, visionEndToken: 151653,
		rmsNormEps: 1e-6, transformersVersion: "4.57.0.dev0",
	}
	return v, t
}

// alpamayoHead returns the release's head settings (ALPAMAYO.md §1).
func alpamayoHead() head {
	return head{
		expert:    expertDims{hidden: 2048, intermediate: 8256, heads: 16, headDim: 128},
		minPixels: 163840, maxPixels: 196608,
		inProjHidden: 512, inProjLayers: 2, fourierFeats: 20, maxFreq: 100,
		historyTokens: 48, futureTokens: 128, trajBins: 3000, histBins: 1000,
		numInferenceSteps: 10, vlmSubdir: "vlm", transformersVersion: "4.57.1",
		accelMean: 0.02902694707164455, accelStd: 0.6810426736454882,
		curvMean: 0.0002692167976330542, curvStd: 0.026148280660833106,
		curvBound: 0.33, accelBound: 9.8, nWaypoints: 64, dt: 0.1,
		trajDimsMin: -10, trajDimsMax: 10,
	}
}

// specFor returns the spec of an architecture.
func specFor(a Arch) (*spec, error) {
	v, t := qwen3VL8BDims()
	switch a {
	case Qwen3VL8B:
		return &spec{arch: a, vision: v, text: t}, nil
	case Qwen3_8B:
		return &spec{arch: a, text: qwen3_8BDims(), textOnly: true}, nil
	case Qwen3Tiny:
		t := qwen3_8BDims()
		t.hidden, t.intermediate, t.layers, t.heads, t.kvHeads, t.headDim = 128, 3072, 4, 4, 2, 32
		return &spec{arch: a, text: t, textOnly: true}, nil
	case AlpamayoR1_10B, Alpamayo15_10B:
		t.vocab = alpamayoVocabSize()
		h := alpamayoHead()
		h.v15 = a == Alpamayo15_10B
		return &spec{arch: a, vision: v, text: t, alpamayo: &h}, nil
	case AlpamayoR1Tiny, Alpamayo15Tiny:
		v = visionDims{
			depth: 4, hidden: 64, intermediate: 128, heads: 4, outHidden: 128,
			numPosEmbeddings: 2304, patch: 16, temporal: 2, merge: 2, inChannels: 3,
			deepstack: []int{0, 1, 2},
		}
		t.vocab = alpamayoVocabSize()
		t.hidden, t.intermediate, t.layers = 128, 384, 4
		t.heads, t.kvHeads, t.headDim = 4, 2, 32
		t.mropeSection = [3]int{6, 5, 5} // sums to headDim/2, interleaved like [24, 20, 20]
		h := alpamayoHead()
		h.expert = expertDims{hidden: 64, intermediate: 192, heads: 4, headDim: 32}
		h.inProjHidden = 64
		// smart_resize(1080, 1920, factor 32) with at most 8192 pixels gives
		// 64×96: 4×6 patches, 6 visual tokens per image.
		h.minPixels, h.maxPixels = 4096, 8192
		h.v15 = a == Alpamayo15Tiny
		return &spec{arch: a, vision: v, text: t, alpamayo: &h}, nil
	}
	_, err := ParseArch(string(a))
	return nil, err
}
