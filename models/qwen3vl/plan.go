package qwen3vl

import (
	"vlanode/configs"
	"vlanode/models"
	"vlanode/placement"
)

// PlanVision publishes the vision tower under g as the planner's units, in
// execution order and from the loader's own tables: the patch embedding,
// each block's attention and MLP parts followed by the DeepStack merger
// that reads its output, then the patch merger. Attention stays inside
// each image.
func PlanVision(c *configs.Qwen3VLVision, g placement.Geometry) []placement.Unit {
	if !g.Vision {
		return nil
	}
	vision := func(ts []placement.Tensor, rows int, attn float64) []placement.Work {
		return []placement.Work{g.Work(placement.StageVision, ts, rows, attn)}
	}
	v := &Vision{Config: c}
	out := []placement.Unit{models.PlanUnit(placement.ID{Module: placement.PatchEmbed}, v.embedSpecs(), 0,
		func(ts []placement.Tensor) []placement.Work { return vision(ts, g.Patches, 0) })}
	blocks, mergers := c.DeepstackOrder()
	segment := g.Patches / max(g.W.Images, 1)
	next := 0
	for i := range c.Depth {
		specs := (&VisionBlock{cfg: c}).specs()
		for _, part := range models.SpecParts(specs) {
			attn := 0.0
			if part == placement.Attn {
				attn = placement.AttnFLOPs(g.Patches, float64(segment), c.HiddenSize)
			}
			// A vision pass multiplies thousands of rows: its MLPs never
			// split with the CPU (and their biases would be added twice).
			out = append(out, models.PlanUnit(placement.ID{Module: placement.Vision, Index: i, Part: part}, specs, 0,
				func(ts []placement.Tensor) []placement.Work { return vision(ts, g.Patches, attn) }))
		}
		for next < len(blocks) && blocks[next] == i {
			m := &Merger{cfg: c, PostShuffleNorm: true}
			out = append(out, models.PlanUnit(placement.ID{Module: placement.Deepstack, Index: mergers[next]}, m.specs(), 0,
				func(ts []placement.Tensor) []placement.Work { return vision(ts, g.Merged, 0) }))
			next++
		}
	}
	m := &Merger{cfg: c}
	return append(out, models.PlanUnit(placement.ID{Module: placement.Merger}, m.specs(), 0,
		func(ts []placement.Tensor) []placement.Work { return vision(ts, g.Merged, 0) }))
}
