package residency

import (
	"errors"
	"fmt"

	"vlanode/configs"
)

// Arch is what the planner needs of a model's architecture: the configs of
// its parts, as vlanode's loaders parse them. Vision, Expert and ActionIn
// are nil when the model lacks them (a Qwen3 text model has only Text).
type Arch struct {
	// Name identifies the model in reports, e.g. "alpamayo_r1".
	Name string
	// Vision is the Qwen3-VL vision tower (patch embedding, blocks,
	// DeepStack mergers, the patch merger).
	Vision *configs.Qwen3VLVision
	// Text is the language model: embedding, decoder layers, final norm and
	// LM head (the embedding matrix when tied).
	Text *configs.Qwen3
	// Expert is Alpamayo's action expert: a text stack without embeddings
	// that attends to the VLM's KV cache.
	Expert *configs.Qwen3
	// ActionIn is action_in_proj; set with Expert.
	ActionIn *configs.ActionInProjConfig
}

// Qwen3Arch is a Qwen3 text model.
func Qwen3Arch(c *configs.Qwen3) *Arch { return &Arch{Name: "qwen3", Text: c} }

// Qwen3VLArch is a Qwen3-VL model.
func Qwen3VLArch(c *configs.Qwen3VL) *Arch {
	v := c.Vision
	return &Arch{Name: "qwen3_vl", Vision: &v, Text: c.Text}
}

// AlpamayoR1Arch is an Alpamayo-R1 model: its config.json and the VLM
// config it names (configs.AlpamayoR1.LocateVLM). The VLM takes the
// checkpoint's vocabulary; the expert is the VLM's text config with
// expert_cfg applied, as the loaders build them.
func AlpamayoR1Arch(alp *configs.AlpamayoR1, vlm configs.VLMConfig) (*Arch, error) {
	vlmJSON, err := alp.VLMConfigJSON(vlm)
	if err != nil {
		return nil, fmt.Errorf("residency: %w", err)
	}
	vl, err := configs.ParseQwen3VL(vlmJSON)
	if err != nil {
		return nil, fmt.Errorf("residency: VLM config %s: %w", vlm.Path, err)
	}
	expJSON, err := alp.ExpertTextConfigJSON(vlm)
	if err != nil {
		return nil, fmt.Errorf("residency: %w", err)
	}
	exp, err := configs.ParseQwen3(expJSON)
	if err != nil {
		return nil, fmt.Errorf("residency: expert config: %w", err)
	}
	if alp.ActionInProjCfg == nil {
		return nil, errors.New("residency: alpamayo_r1 config has no action_in_proj_cfg")
	}
	a := Qwen3VLArch(vl)
	a.Name = alp.ModelType
	a.Expert, a.ActionIn = exp, alp.ActionInProjCfg
	return a, a.validate()
}

func (a *Arch) validate() error {
	if a.Text == nil {
		return errors.New("residency: the architecture has no text model")
	}
	if a.Expert != nil {
		if a.ActionIn == nil {
			return errors.New("residency: an expert needs action_in_proj")
		}
		if a.Expert.NumHiddenLayers != a.Text.NumHiddenLayers {
			return fmt.Errorf("residency: the expert has %d layers, the VLM %d: each expert layer reads its VLM layer's cache",
				a.Expert.NumHiddenLayers, a.Text.NumHiddenLayers)
		}
	}
	return nil
}

// Units returns the model's units in execution order, with their sizes
// and their work under w (ExeMs left at zero: see Profile.Cost). The LM
// head is cut into blocks of rows no larger than the largest layer, so
// that the DFB slots are sized by a layer rather than by the head.
func (a *Arch) Units(w Workload) ([]Unit, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	g := a.geometry(w)
	if g.vision && w.PatchesPerImage%a.Vision.MergeUnit() != 0 {
		return nil, fmt.Errorf("residency: %d patches per image do not merge in groups of %d", w.PatchesPerImage, a.Vision.MergeUnit())
	}
	var out []Unit
	add := func(m Module, idx int, t tensors, host bool, work ...Work) {
		out = append(out, Unit{Module: m, Index: idx, Bytes: t.bytes(), Host: host, Work: work})
	}
	if g.vision {
		a.visionUnits(g, add)
	}
	// The embedding's work is the host's share of a pass: gathering the
	// rows, uploads, reading the logits and sampling (a profile's
	// "embedding" entries measure it; no VRAM, no copies).
	emb := tensors{table("embed_tokens.weight", a.Text.VocabSize, a.Text.HiddenSize)}
	add(Embedding, 0, emb, true, g.work(StagePrefill, emb, g.prompt, 0), g.work(StageDecode, emb, 1, 0))
	layer := decoderLayer(a.Text)
	for i := range a.Text.NumHiddenLayers {
		add(VLM, i, layer, false,
			g.work(StagePrefill, layer, g.prompt, attnFLOPs(g.prompt, float64(g.prompt)/2, a.Text)),
			g.work(StageDecode, layer, 1, attnFLOPs(1, g.decodeCtx, a.Text)))
	}
	for i, head := range lmHeadBlocks(a.Text, a.largestLayer()) {
		add(LMHead, i, head, false, g.work(StagePrefill, head, 1, 0), g.work(StageDecode, head, 1, 0))
	}
	if g.diffusion {
		a.actionUnits(g, add)
	}
	return dropIdle(out), nil
}

// geometry is the workload seen through the architecture: rows and passes
// of each stage.
type geometry struct {
	w                 Workload
	vision, diffusion bool
	patches, merged   int     // vision rows before and after the merger
	prompt            int     // prefill rows
	decodeCtx         float64 // mean keys a decode step attends to
	expertCtx         int     // keys an expert pass attends to
}

func (a *Arch) geometry(w Workload) geometry {
	g := geometry{
		w: w, prompt: w.PromptTokens,
		vision:    a.Vision != nil && w.Patches() > 0,
		diffusion: a.Expert != nil && w.EulerSteps > 0 && w.ActionTokens > 0,
		decodeCtx: float64(w.PromptTokens) + float64(w.ReasoningTokens)/2,
		expertCtx: w.PromptTokens + w.ReasoningTokens + w.ActionTokens,
	}
	if g.vision {
		g.patches = w.Patches()
		g.merged = g.patches / a.Vision.MergeUnit()
	}
	return g
}

// passes is R for each stage.
func (g geometry) passes(s Stage) int {
	switch s {
	case StageDecode:
		return g.w.ReasoningTokens
	case StageDiffusion:
		return g.w.EulerSteps
	}
	return 1
}

// work is a unit's work in stage s over rows rows, plus extra FLOPs
// (attention).
func (g geometry) work(s Stage, t tensors, rows int, extra float64) Work {
	return Work{Stage: s, Passes: g.passes(s), Rows: rows, FLOPs: t.matFLOPs(rows) + extra}
}

// visionUnits adds the vision tower: the stem, the blocks with each
// DeepStack merger after the block it reads, then the patch merger.
func (a *Arch) visionUnits(g geometry, add func(Module, int, tensors, bool, ...Work)) {
	v := a.Vision
	stem := patchEmbed(v)
	add(PatchEmbed, 0, stem, false, g.work(StageVision, stem, g.patches, 0))
	blocks, mergers := v.DeepstackOrder()
	block := visionBlock(v)
	segment := g.patches / g.w.Images // attention stays inside each image
	next := 0
	for i := range v.Depth {
		attn := 4 * float64(g.patches) * float64(segment) * float64(v.HiddenSize)
		add(Vision, i, block, false, g.work(StageVision, block, g.patches, attn))
		for next < len(blocks) && blocks[next] == i {
			ds := merger(v, true)
			add(Deepstack, mergers[next], ds, false, g.work(StageVision, ds, g.merged, 0))
			next++
		}
	}
	m := merger(v, false)
	add(Merger, 0, m, false, g.work(StageVision, m, g.merged, 0))
}

// actionUnits adds the diffusion side: action_in_proj, the expert layers,
// the final norm with action_out_proj.
func (a *Arch) actionUnits(g geometry, add func(Module, int, tensors, bool, ...Work)) {
	rows := g.w.ActionTokens
	in := actionIn(a.ActionIn, a.Expert.HiddenSize)
	add(ActionIn, 0, in, false, g.work(StageDiffusion, in, rows, 0))
	layer := decoderLayer(a.Expert)
	attn := attnFLOPs(rows, float64(g.expertCtx), a.Expert)
	for i := range a.Expert.NumHiddenLayers {
		add(Expert, i, layer, false, g.work(StageDiffusion, layer, rows, attn))
	}
	out := actionOut(a.Expert.HiddenSize)
	add(ActionOut, 0, out, false, g.work(StageDiffusion, out, rows, 0))
}

// largestLayer is the size of the largest layer-like unit: the LM head's
// blocks are cut to fit it.
func (a *Arch) largestLayer() int64 {
	n := decoderLayer(a.Text).bytes()
	if a.Vision != nil {
		n = max(n, visionBlock(a.Vision).bytes(), merger(a.Vision, true).bytes(), merger(a.Vision, false).bytes())
	}
	if a.Expert != nil {
		n = max(n, decoderLayer(a.Expert).bytes())
	}
	return n
}

// attnFLOPs is the attention arithmetic of rows queries over ctx keys
// (QKᵀ and PV).
func attnFLOPs(rows int, ctx float64, c *configs.Qwen3) float64 {
	return 4 * float64(rows) * ctx * float64(c.NumAttentionHeads*c.HeadDim)
}

// dropIdle removes GPU units that do no work under the workload (none
// today; kept so that a workload without decode steps plans cleanly).
func dropIdle(units []Unit) []Unit {
	out := units[:0]
	for _, u := range units {
		work := u.Work[:0]
		for _, w := range u.Work {
			if w.Passes > 0 {
				work = append(work, w)
			}
		}
		u.Work = work
		if u.Host || len(u.Work) > 0 {
			out = append(out, u)
		}
	}
	return out
}
