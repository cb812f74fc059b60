package residency

import (
	"vlanode/configs"
	"vlanode/placement"
)

// Purpose names a share of the budget.
type Purpose string

// The purposes a plan accounts for.
const (
	PurposeResident    Purpose = "weights-resident" // resident units' blobs
	PurposeSlots       Purpose = "dfb-slots"        // the two DFB slots
	PurposeKV          Purpose = "kv-cache"         // keys and values of every text layer
	PurposeActivations Purpose = "activations"      // the models' activation scratch
	PurposeWorkspaces  Purpose = "workspaces"       // cuBLAS workspace and the backend's scratch
	PurposeContext     Purpose = "context"          // CUDA context, cuBLAS handle, kernel module
	PurposeFree        Purpose = "free"             // what the budget leaves unused
)

// Purposes lists the purposes in report order.
func Purposes() []Purpose {
	return []Purpose{PurposeResident, PurposeSlots, PurposeStaging, PurposeKV, PurposeActivations, PurposeWorkspaces, PurposeContext, PurposeFree}
}

// Element sizes of what the backends allocate today.
const (
	f32Bytes  = 4 // activations are float32 (and KV caches a kernel cannot read in bf16)
	bf16Bytes = 2 // the backend's rounded copies of GEMM inputs and of K/V
	// flashHeadAlign: the flash-attention kernels pad head dims (72 → 80).
	flashHeadAlign = 16
)

// RowProductsBytes is the CUDA backend's scratch for its products of 2 to
// 64 rows (the action expert's, short prompts'): their partial sums, tile
// counters and SwiGLU output at their largest (cuda.RowsScratchBytes, in
// whole pages; cuda's tests check the two agree).
const RowProductsBytes = 20 << 20

// fixedCosts are the bytes a plan needs in stage s whatever its
// placement: KV cache, the stage's activations, workspaces and context.
// Only the activations differ between stages.
func (a *Arch) fixedCosts(w placement.Workload, p *Profile, s placement.Stage) map[Purpose]int64 {
	g := a.Geometry(w)
	return map[Purpose]int64{
		PurposeKV:          a.kvCacheBytes(g),
		PurposeActivations: a.stageActivationBytes(g, s),
		PurposeWorkspaces:  p.Fixed.WorkspaceBytes + a.backendScratchBytes(g),
		PurposeContext:     p.Fixed.ContextBytes + p.Fixed.CUBLASBytes + p.Fixed.KernelBytes,
	}
}

// stageActivationBytes is the activation memory live during stage s: the
// vision pass's scratch (with the features it hands over), the prefill's
// (with the visual features), or, from the decode on, a decode step's;
// plus the expert's scratch, which lives as long as the model. In a batch
// every sequence's pass is live at once over one shared scratch
// (alpamayo.Model.InferBatch): the shared part once, each sequence's own
// part (its hidden states, rotary tables, features) once a sequence.
func (a *Arch) stageActivationBytes(g placement.Geometry, s placement.Stage) int64 {
	switch s {
	case placement.StageVision, placement.StagePrefill:
		vision, prefill := a.passActivations(g)
		p := prefill
		if s == placement.StageVision {
			p = vision
		}
		n := p.shared + p.own*int64(g.Seqs)
		if g.Diffusion {
			n += a.expertScratch(g)
		}
		return n*f32Bytes + scratchPages*pageBytes
	}
	return a.decodeActivationBytes(g)
}

// kvCacheBytes is K and V (bf16 on the GPU, see kvElementBytes) for every
// text layer over each sequence's session: prompt, reasoning tokens and
// (with an expert) the action tokens of every trajectory sample, which
// the expert writes after them.
func (a *Arch) kvCacheBytes(g placement.Geometry) int64 {
	t := a.Text
	tokens := int64(g.Prompt + g.W.ReasoningTokens)
	if g.Diffusion {
		tokens += int64(g.W.ActionTokens * g.W.SamplesEach())
	}
	// Two blocks (every layer's keys, every layer's values) a session,
	// each rounded up to whole pages as the allocator counts them.
	return int64(g.Seqs) * 2 * pages(int64(t.NumHiddenLayers)*tokens*int64(t.NumKeyValueHeads*t.HeadDim)*kvElementBytes(t.HeadDim))
}

// kvElementBytes is the size of a KV-cache element on the CUDA backend
// (cuda.Backend.KVCacheDType): bf16 where its decode and flash kernels
// read it (head dims up to 128, a multiple of 8), else float32.
func kvElementBytes(headDim int) int64 {
	if headDim <= 128 && headDim%8 == 0 {
		return bf16Bytes
	}
	return f32Bytes
}

// pageBytes is the device allocator's page: it counts a block of 1 MiB or
// more as whole 2 MiB pages (cuda's accountedSize).
const pageBytes = 2 << 20

// accounted is what the device allocator counts for a block of n bytes:
// whole pages from 1 MiB, 256-byte granules below (cuda's accountedSize).
func accounted(n int64) int64 {
	if n >= 1<<20 {
		return pages(n)
	}
	return (n + 255) / 256 * 256
}

// pages rounds n up to whole pages.
func pages(n int64) int64 { return (n + pageBytes - 1) / pageBytes * pageBytes }

// scratchPages is what page rounding may add to the activation scratch:
// at most this many large tensors are live at once (the vision pass's or
// the prefill's scratch, the visual features), each up to a page.
const scratchPages = 24

// activationBytes is the peak of the models' activation scratch: the
// vision pass or the prefill, whichever is larger (each frees its scratch
// when done; the visual features live on through prefill), plus the
// expert's scratch, which lives as long as the model.
func (a *Arch) activationBytes(g placement.Geometry) int64 {
	vision, prefill := a.passActivations(g)
	total := max(vision.shared+vision.own*int64(g.Seqs), prefill.shared+prefill.own*int64(g.Seqs))
	if g.Diffusion {
		total += a.expertScratch(g)
	}
	return total*f32Bytes + scratchPages*pageBytes
}

// passFloats are a pass's activations at its peak, in floats: the scratch
// a batch's sequences share, and what each sequence holds of its own.
type passFloats struct{ shared, own int64 }

// passActivations are the floats the vision pass and the prefill hold at
// their peaks.
func (a *Arch) passActivations(g placement.Geometry) (vision, prefill passFloats) {
	var features int64
	if g.Vision {
		v := a.Vision
		P := int64(g.Patches)
		// Shared: scratch h, q, k, v, attn [P, hidden], the folded copy
		// [P/unit, unit·hidden], ff [P, intermediate]. Each pass's own: x
		// [P, hidden], cos, sin [P, headDim/2], and the pixel rows while
		// embedding or the features it makes.
		features = int64(len(v.DeepstackVisualIndexes)+1) * int64(g.Merged) * int64(v.OutHiddenSize)
		patches := P * int64(v.PatchDim())
		vision = passFloats{shared: P * int64(6*v.HiddenSize+v.IntermediateSize), own: P*int64(v.HiddenSize+v.HeadDim()) + max(patches, features)}
	}
	t := a.Text
	// Shared: scratch h [T, hidden]; q, attn [T, heads·headDim]; k, v
	// [T, kvHeads·headDim]; gate, up [T, intermediate], T the rows of one
	// prefill pass (a chunk). Each prefill's own: x [T, hidden], cos,
	// sin, the visual features, the last row's norm and logits.
	T := int64(g.Chunk)
	shared := T * int64(t.HiddenSize+2*t.NumAttentionHeads*t.HeadDim+2*t.NumKeyValueHeads*t.HeadDim+2*t.IntermediateSize)
	logits := int64(t.HiddenSize + t.VocabSize)
	prefill = passFloats{shared: shared, own: T*int64(t.HiddenSize+t.HeadDim) + features + logits}
	return vision, prefill
}

// decodeActivationBytes is what the activations hold after the prefill:
// the expert's scratch, a decode step's (one token's layer scratch, its
// logits) and the page rounding; the rest of the activation memory can
// hold promoted units (Placement.Promoted).
func (a *Arch) decodeActivationBytes(g placement.Geometry) int64 {
	t := a.Text
	perToken := 2*t.HiddenSize + 2*t.NumAttentionHeads*t.HeadDim + 2*t.NumKeyValueHeads*t.HeadDim + 2*t.IntermediateSize + t.HeadDim
	floats := int64(perToken+t.HiddenSize+t.VocabSize) * int64(g.Seqs)
	if g.Diffusion {
		floats += a.expertScratch(g) + a.wideExpertScratch(g)
	}
	return floats*f32Bytes + scratchPages*pageBytes
}

// expertScratch is diffusion's scratch in floats: the action tokens'
// Fourier features, action_in_proj's MLP, the expert layer's activations
// and the output, for one sample's rows (kept as long as the model).
func (a *Arch) expertScratch(g placement.Geometry) int64 {
	return int64(g.W.ActionTokens) * a.expertCols()
}

// wideExpertScratch is the scratch of a pass over several samples' rows
// (every sequence's g.ExpertRows), which diffusion.Expert.SampleBatch
// allocates beside the one-sample scratch for the diffusion stage; 0 for
// one sample.
func (a *Arch) wideExpertScratch(g placement.Geometry) int64 {
	rows := int64(g.ExpertRows) * int64(g.Seqs)
	if rows <= int64(g.W.ActionTokens) {
		return 0
	}
	return rows * a.expertCols()
}

// expertCols are the floats of diffusion's scratch per action token.
func (a *Arch) expertCols() int64 {
	e, in := a.Expert, a.ActionIn
	return int64(in.InputFeatures() + 2*in.HiddenSize + 2*e.HiddenSize + 2*e.NumAttentionHeads*e.HeadDim +
		2*e.NumKeyValueHeads*e.HeadDim + 2*e.IntermediateSize + e.HeadDim + configs.ActionDims)
}

// backendScratchBytes is the CUDA backend's own scratch at its peak: the
// bf16 copy of the largest GEMM input (a matrix product rounds x to the
// weight's type first) and the bf16 copies of K and V for the largest
// flash-attention call.
func (a *Arch) backendScratchBytes(g placement.Geometry) int64 {
	t := a.Text
	x := int64(g.Chunk) * int64(max(t.HiddenSize, t.NumAttentionHeads*t.HeadDim, t.IntermediateSize))
	kv := 2 * int64(g.Prompt) * int64(t.NumKeyValueHeads*alignUp(t.HeadDim, flashHeadAlign))
	if g.Vision {
		v := a.Vision
		x = max(x, int64(g.Patches)*int64(max(v.IntermediateSize, v.PatchDim())), int64(g.Merged)*int64(v.MergeUnit()*v.HiddenSize))
		kv = max(kv, 2*int64(g.Patches)*int64(v.NumHeads*alignUp(v.HeadDim(), flashHeadAlign)))
	}
	if g.Diffusion {
		e := a.Expert
		x = max(x, int64(g.ExpertRows)*int64(e.IntermediateSize))
		kv = max(kv, 2*int64(g.ExpertCtx)*int64(e.NumKeyValueHeads*alignUp(e.HeadDim, flashHeadAlign)))
	}
	// The bf16 GEMM input and K/V copies, and decode attention's partial
	// results, each grown to whole pages; the row products' scratch.
	return pages(x*bf16Bytes) + pages(kv*bf16Bytes) + 2*pageBytes + RowProductsBytes
}

func alignUp(n, m int) int { return (n + m - 1) / m * m }
