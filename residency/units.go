package residency

import "fmt"

// Module names a group of units that play one role in the model.
type Module string

// The modules, in the order a VLA runs them.
const (
	PatchEmbed Module = "patch_embed" // vision stem: Conv3d patch embedding and the position table
	Vision     Module = "vision"      // ViT blocks
	Deepstack  Module = "deepstack"   // DeepStack mergers (indexed by deepstack_merger_list)
	Merger     Module = "merger"      // the final patch merger
	Embedding  Module = "embedding"   // embed_tokens: rows gathered on the host, never in VRAM
	VLM        Module = "vlm"         // text decoder layers
	LMHead     Module = "lm_head"     // final norm and LM head, in blocks of rows
	ActionIn   Module = "action_in"   // action_in_proj
	Expert     Module = "expert"      // action expert layers
	ActionOut  Module = "action_out"  // the expert's final norm and action_out_proj
)

// Stage is one step of an inference; units run in passes within it.
type Stage string

// The stages, in order.
const (
	StageVision    Stage = "vision"    // one pass over all images
	StagePrefill   Stage = "prefill"   // one pass over the prompt
	StageDecode    Stage = "decode"    // one pass per reasoning token
	StageDiffusion Stage = "diffusion" // one pass per Euler step
)

// Stages lists the stages in execution order.
func Stages() []Stage { return []Stage{StageVision, StagePrefill, StageDecode, StageDiffusion} }

// Work is what a unit does in one stage.
type Work struct {
	Stage Stage
	// Passes is the repetition count R: how often the stage runs the unit.
	Passes int
	// Rows is the number of rows (tokens, patches) each pass multiplies
	// through the unit's matrices.
	Rows int
	// FLOPs is the arithmetic of one pass (matrix products and attention),
	// for the roofline.
	FLOPs float64
	// ExeMs is the compute time of one pass, C_EXE; Profile.Cost fills it.
	ExeMs float64
	// Timing says where ExeMs came from: "profile", "scaled" or "roofline".
	Timing string
}

// Unit is one flat weight blob and the work it does.
type Unit struct {
	Module Module
	// Index is the unit's position in its module (block, layer, merger or
	// row-block number).
	Index int
	// Bytes is the blob's size: every tensor at a 256-byte aligned offset
	// (weights.Layout), padding included.
	Bytes int64
	// Host units never take VRAM (the embedding table: its rows are
	// gathered on the host).
	Host bool
	// Work is one entry per stage the unit runs in, in stage order.
	Work []Work
}

// String names the unit, e.g. "vlm.12".
func (u Unit) String() string { return fmt.Sprintf("%s.%d", u.Module, u.Index) }

// WorkIn returns the unit's work in stage s.
func (u Unit) WorkIn(s Stage) (Work, bool) {
	for _, w := range u.Work {
		if w.Stage == s {
			return w, true
		}
	}
	return Work{}, false
}

// Place is where a unit's weights live while a plan runs.
type Place string

// The placements (DESIGN.md's executor table).
const (
	Resident Place = "resident" // in VRAM for the life of the plan
	Streamed Place = "streamed" // pinned host memory, copied into a DFB slot before each use
	Host     Place = "host"     // pinned host memory, used by the CPU
)
