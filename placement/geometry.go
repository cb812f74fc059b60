package placement

// Geometry is a workload seen through a model: the rows and passes of
// each stage, from which the families compute their units' work.
type Geometry struct {
	W Workload
	// Vision and Diffusion say whether those stages run (the model has a
	// vision tower and images come; it has an expert and Euler steps).
	Vision, Diffusion bool
	// Patches and Merged are the vision rows before and after the patch
	// merger.
	Patches, Merged int
	// Prompt is the prompt's length (the KV cache's rows before the
	// decode); Chunk is the rows one prefill pass multiplies and Chunks
	// the prefill's passes (a prompt prefilled in chunks, Workload.PrefillChunk;
	// 1 pass of the whole prompt otherwise).
	Prompt, Chunk, Chunks int
	// DecodeCtx is the mean number of keys a decode step attends to.
	DecodeCtx float64
	// ExpertCtx is the keys an expert pass attends to.
	ExpertCtx int
}

// NewGeometry is w's geometry for a model whose vision tower merges
// mergeUnit patches into a token (0: no vision tower) and which has an
// action expert or not.
func NewGeometry(w Workload, mergeUnit int, expert bool) Geometry {
	g := Geometry{
		W: w, Prompt: w.PromptTokens, Chunk: w.PromptTokens, Chunks: 1,
		Vision:    mergeUnit > 0 && w.Patches() > 0,
		Diffusion: expert && w.EulerSteps > 0 && w.ActionTokens > 0,
		DecodeCtx: float64(w.PromptTokens) + float64(w.ReasoningTokens)/2,
		ExpertCtx: w.PromptTokens + w.ReasoningTokens + w.ActionTokens,
	}
	if c := w.PrefillChunk; c > 0 && c < w.PromptTokens {
		g.Chunk, g.Chunks = c, (w.PromptTokens+c-1)/c
	}
	if g.Vision {
		g.Patches = w.Patches()
		g.Merged = g.Patches / mergeUnit
	}
	return g
}

// Passes is R for stage s.
func (g Geometry) Passes(s Stage) int {
	switch s {
	case StagePrefill:
		return max(g.Chunks, 1)
	case StageDecode:
		return g.W.ReasoningTokens
	case StageDiffusion:
		return g.W.EulerSteps
	}
	return 1
}

// Work is a unit's work in stage s over rows rows with tensors ts, plus
// extra FLOPs (attention).
func (g Geometry) Work(s Stage, ts []Tensor, rows int, extra float64) Work {
	return Work{Stage: s, Passes: g.Passes(s), Rows: rows, FLOPs: MatrixFLOPs(ts, rows) + extra}
}

// AttnFLOPs is the attention arithmetic of rows queries over ctx keys
// (QKᵀ and PV) with heads·headDim query width.
func AttnFLOPs(rows int, ctx float64, width int) float64 {
	return 4 * float64(rows) * ctx * float64(width)
}

// DropIdle removes device units that do no work under the workload (a
// workload without decode steps plans cleanly) and the works of no pass.
func DropIdle(units []Unit) []Unit {
	out := units[:0]
	for _, u := range units {
		work := u.Work[:0]
		for _, w := range u.Work {
			if w.Passes > 0 {
				work = append(work, w)
			}
		}
		u.Work = work
		if u.HostOnly || len(u.Work) > 0 {
			out = append(out, u)
		}
	}
	return out
}
