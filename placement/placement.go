// Package placement is the vocabulary that vlanode's planner (residency),
// executor (layering) and model families share, and nothing else: which
// unit a piece of a model is (ID: module, index, part), what it holds and
// does (Unit: tensors, bytes, work per stage), and where a plan puts it
// (Placement: where its weights live and which engine computes it, two
// independent axes). It imports no other vlanode package, so every one
// can import it; a unit is named once, in these types, and never parsed
// back from a string.
//
// A unit is one flat weight blob: a whole layer, or a sub-layer shard of
// one (its attention block or its MLP block). Families publish their units
// as data (models/qwen3, models/qwen3vl, diffusion, models/alpamayo); the
// planner places them per stage; the executor runs them where they are
// placed.
package placement

import (
	"fmt"
	"strconv"
)

// Module names a group of units that play one role in a model.
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

// Part is a sub-layer shard of a layer-like unit; Whole is the unit
// itself.
type Part string

// The parts.
const (
	Whole Part = ""     // the whole unit
	Attn  Part = "attn" // a decoder layer's or vision block's attention: input norm, q/k/v (qkv), o (proj)
	MLP   Part = "mlp"  // its MLP: the norm before it, gate/up/down (fc1/fc2)
)

// ID identifies a unit: the index-th unit of a module, or one part of it.
type ID struct {
	Module Module `json:"module"`
	Index  int    `json:"index"`
	Part   Part   `json:"part,omitempty"`
}

// String names the unit for people: "vlm.12", "vlm.12.mlp".
func (id ID) String() string {
	s := string(id.Module) + "." + strconv.Itoa(id.Index)
	if id.Part != Whole {
		s += "." + string(id.Part)
	}
	return s
}

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

// Weights is where a unit's weights live while a stage runs.
type Weights string

// The homes of weights (DESIGN.md's placement table).
const (
	Resident Weights = "resident" // in VRAM
	Streamed Weights = "streamed" // pinned host memory, copied into a DFB slot before each use
	Host     Weights = "host"     // host memory only: the GPU never holds them
)

// Engine is what computes a unit.
type Engine string

// The engines.
const (
	GPU Engine = "gpu"
	CPU Engine = "cpu"
)

// Placement is where one unit is in one stage: where its weights live and
// which engine computes it, and, for a unit split between the engines,
// how much of it the CPU takes.
//
// A split unit (CPUSplit > 0 with Engine GPU) divides along its split
// dimension (Unit.SplitDim): the first CPUSplit indices run on the CPU
// from the host copy of the weights, the rest on the GPU from where
// Weights says (for an MLP, rows [0, CPUSplit) of gate and up and the same
// columns of down on the CPU). The two engines' partial results are added
// on the GPU.
type Placement struct {
	Weights Weights `json:"weights"`
	Engine  Engine  `json:"engine"`
	// CPUSplit is the CPU's share of the split dimension; 0 for a unit the
	// GPU computes alone.
	CPUSplit int `json:"cpu_split,omitempty"`
}

// The placements that need no split.
var (
	OnGPU     = Placement{Weights: Resident, Engine: GPU} // resident, computed by the GPU
	StreamGPU = Placement{Weights: Streamed, Engine: GPU} // streamed through the DFB slots
	HostCPU   = Placement{Weights: Host, Engine: CPU}     // host weights read by the CPU (the embedding's rows, CPU shards)
)

// Split says whether the CPU computes part of the unit while the GPU
// computes the rest.
func (p Placement) Split() bool { return p.Engine == GPU && p.CPUSplit > 0 }

// OnDevice says whether the GPU reads the unit's weights (all or a share).
func (p Placement) OnDevice() bool { return p.Engine == GPU && p.Weights != Host }

// String is a short form for tables: "resident", "streamed",
// "host/cpu", "streamed+cpu[6144]".
func (p Placement) String() string {
	switch {
	case p.Split():
		return fmt.Sprintf("%s+cpu[%d]", p.Weights, p.CPUSplit)
	case p.Engine == CPU:
		return string(p.Weights) + "/cpu"
	}
	return string(p.Weights)
}

// Validate checks that the axes agree: the CPU computes from host
// weights, and a split is a GPU placement with a positive CPU share
// smaller than dim.
func (p Placement) Validate(dim int) error {
	switch {
	case p.Weights != Resident && p.Weights != Streamed && p.Weights != Host:
		return fmt.Errorf("placement: unknown weights %q", p.Weights)
	case p.Engine != GPU && p.Engine != CPU:
		return fmt.Errorf("placement: unknown engine %q", p.Engine)
	case p.Engine == CPU && p.Weights != Host:
		return fmt.Errorf("placement: the CPU computes from host weights, not %s ones", p.Weights)
	case p.CPUSplit < 0:
		return fmt.Errorf("placement: negative CPU split %d", p.CPUSplit)
	case p.CPUSplit > 0 && p.Engine != GPU:
		return fmt.Errorf("placement: a CPU split on a %s unit", p.Engine)
	case p.CPUSplit > 0 && p.Weights == Host:
		return fmt.Errorf("placement: a split whose GPU share has no device weights")
	case p.CPUSplit > 0 && p.CPUSplit >= dim:
		return fmt.Errorf("placement: CPU split %d leaves the GPU nothing of %d", p.CPUSplit, dim)
	}
	return nil
}
