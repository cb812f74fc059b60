package qwen3vl

import (
	"fmt"
	"slices"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/models"
	"vlanode/placement"
)

// visionEps is the epsilon of every LayerNorm of the vision tower (fixed at
// 1e-6 in transformers, not configurable).
const visionEps = 1e-6

// Vision is the Qwen3-VL vision tower (transformers' Qwen3VLVisionModel):
// a Conv3d patch embedding, a learned position table interpolated to each
// image's grid, transformer blocks with 2D rotary attention restricted to
// each frame, the patch merger and the DeepStack mergers.
type Vision struct {
	Config *configs.Qwen3VLVision
	be     backend.Backend

	PatchW   backend.Tensor // [hidden, in, temporalPatch, patch, patch] (Conv3d, stride = kernel)
	PatchB   backend.Tensor // [hidden]
	PosEmbed backend.Tensor // [numPositionEmbeddings, hidden]
	Blocks   []*VisionBlock
	Merger   *Merger
	// Deepstack are deepstack_merger_list, in config order.
	Deepstack []*Merger

	// Units are the flat weight blobs in execution order: the patch
	// embedding, then each block's attention and MLP parts followed by the
	// DeepStack merger that reads its output, then the patch merger.
	Units []*models.Unit
	// Exec runs each unit's compute where its weights are; nil runs them
	// in place (every unit resident).
	Exec models.Runner

	embedUnit, mergerUnit *models.Unit
	blockUnits            [][]*models.Unit // by block: its parts, in order
	deepstackUnits        []*models.Unit   // by merger index

	patchMat backend.Tensor // PatchW viewed as [hidden, PatchDim]
	pos      posTable       // PosEmbed's bytes, read on the host
	invFreq  []float32      // rotary frequencies of dimension headDim/2
	dsBlocks []int          // vision block of each DeepStack feature, increasing
	dsMerger []int          // its merger in Deepstack
	posCache gridCache      // interpolated position embeddings by grid
	rope     ropeCache      // rotary tables of the last grids
	// shared, when set (ShareScratch), lends its activations to every
	// pass, by patches.
	shared map[int]*visionScratch
}

// ShareScratch makes every vision pass use the same activations (a batch
// whose passes run each unit in turn, never two at once, needs one pass's,
// not one per image set), each pass keeping its own hidden states and
// rotary tables; off frees them. The tower serves one goroutine at a time.
func (v *Vision) ShareScratch(on bool) {
	for _, s := range v.shared {
		s.free(v.be)
	}
	v.shared = nil
	if on {
		v.shared = map[int]*visionScratch{}
	}
}

// newVision binds the vision tower's tensors under prefix ("model.visual."
// in a Hugging Face checkpoint).
func newVision(ld *models.Loader, cfg *configs.Qwen3VLVision, prefix string) (*Vision, error) {
	be := ld.Backend
	v := &Vision{Config: cfg, be: be, invFreq: models.RopeInvFreq(cfg.HeadDim()/2, cfg.RopeTheta())}
	v.dsBlocks, v.dsMerger = cfg.DeepstackOrder()
	h := cfg.HiddenSize
	embed, err := ld.Load(placement.ID{Module: placement.PatchEmbed}, prefix, v.embedSpecs(), func() (err error) {
		v.patchMat, err = be.Reshape(v.PatchW, h, cfg.PatchDim())
		return err
	})
	if err != nil {
		return nil, err
	}
	v.Units = append(v.Units, embed)
	v.embedUnit = embed
	e, data, err := embed.Blob.Tensor("pos_embed.weight")
	if err != nil {
		v.Close()
		return nil, err
	}
	v.pos = posTable{dt: e.DType, data: data, hidden: h}
	v.Deepstack = make([]*Merger, len(cfg.DeepstackVisualIndexes))
	v.deepstackUnits = make([]*models.Unit, len(cfg.DeepstackVisualIndexes))
	for i := range cfg.Depth {
		b := &VisionBlock{cfg: cfg}
		us, err := ld.LoadParts(placement.ID{Module: placement.Vision, Index: i}, fmt.Sprintf("%sblocks.%d.", prefix, i), b.specs(),
			func(p placement.Part) error {
				if p == placement.Attn {
					return b.bindViews(be)
				}
				return nil
			})
		if err != nil {
			v.Close()
			return nil, err
		}
		v.Blocks = append(v.Blocks, b)
		v.Units = append(v.Units, us...)
		v.blockUnits = append(v.blockUnits, us)
		j := slices.Index(cfg.DeepstackVisualIndexes, i)
		if j < 0 {
			continue
		}
		m := &Merger{cfg: cfg, PostShuffleNorm: true}
		u, err := ld.Load(placement.ID{Module: placement.Deepstack, Index: j}, fmt.Sprintf("%sdeepstack_merger_list.%d.", prefix, j), m.specs(), nil)
		if err != nil {
			v.Close()
			return nil, err
		}
		v.Deepstack[j] = m
		v.deepstackUnits[j] = u
		v.Units = append(v.Units, u)
	}
	v.Merger = &Merger{cfg: cfg}
	u, err := ld.Load(placement.ID{Module: placement.Merger}, prefix+"merger.", v.Merger.specs(), nil)
	if err != nil {
		v.Close()
		return nil, err
	}
	v.mergerUnit = u
	v.Units = append(v.Units, u)
	return v, nil
}

// embedSpecs is the patch embedding's table: the Conv3d, its bias and the
// position table (read by rows on the host).
func (v *Vision) embedSpecs() []models.Spec {
	c, h := v.Config, v.Config.HiddenSize
	return []models.Spec{
		{Name: "patch_embed.proj.weight", Shape: []int{h, c.InChannels, c.TemporalPatchSize, c.PatchSize, c.PatchSize}, Dst: &v.PatchW},
		{Name: "patch_embed.proj.bias", Shape: []int{h}, Dst: &v.PatchB},
		{Name: "pos_embed.weight", Shape: []int{c.NumPositionEmbeddings, h}, Dst: &v.PosEmbed, Table: true},
	}
}

// Close releases the tower's backend tensors.
func (v *Vision) Close() {
	for _, t := range []*backend.Tensor{&v.PatchW, &v.PatchB, &v.PosEmbed} {
		if *t != nil {
			v.be.Free(*t)
			*t = nil
		}
	}
	for _, b := range v.Blocks {
		freeSpecs(v.be, b.specs())
	}
	for _, m := range v.Deepstack {
		if m != nil {
			freeSpecs(v.be, m.specs())
		}
	}
	if v.Merger != nil {
		freeSpecs(v.be, v.Merger.specs())
	}
	v.Blocks, v.Deepstack, v.Merger = nil, nil, nil
}

func freeSpecs(be backend.Backend, specs []models.Spec) {
	for _, s := range specs {
		if *s.Dst != nil {
			be.Free(*s.Dst)
			*s.Dst = nil
		}
	}
}

// DeepstackBlocks returns the vision blocks whose outputs feed DeepStack
// features, in increasing order: feature k goes to text layer k.
func (v *Vision) DeepstackBlocks() []int { return v.dsBlocks }
