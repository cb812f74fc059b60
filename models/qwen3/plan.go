package qwen3

import (
	"vlanode/configs"
	"vlanode/models"
	"vlanode/placement"
)

// StageRows is one stage a decoder layer runs in: the rows a pass
// multiplies and the keys its attention reads, on average.
type StageRows struct {
	Stage placement.Stage
	Rows  int
	Keys  float64
}

// PlanLayer publishes decoder layer index of module m as the planner's
// units: its attention part and its MLP part (which splits between CPU
// and GPU along the intermediate size), from the loader's own table
// (Layer.Specs), with their work in each stage of stages.
func PlanLayer(c *configs.Qwen3, m placement.Module, index int, g placement.Geometry, stages []StageRows) []placement.Unit {
	specs := NewLayer(c).Specs()
	width := c.NumAttentionHeads * c.HeadDim
	var out []placement.Unit
	for _, part := range models.SpecParts(specs) {
		split := 0
		if part == placement.MLP {
			split = c.IntermediateSize
		}
		out = append(out, models.PlanUnit(placement.ID{Module: m, Index: index, Part: part}, specs, split,
			func(ts []placement.Tensor) []placement.Work {
				var ws []placement.Work
				for _, st := range stages {
					attn := 0.0
					if part == placement.Attn {
						attn = placement.AttnFLOPs(st.Rows, st.Keys, width)
					}
					ws = append(ws, g.Work(st.Stage, ts, st.Rows, attn))
				}
				return ws
			}))
	}
	return out
}

// PlanText publishes a Qwen3 text model (or a VLM's language model) under
// g: the embedding (on the host: its rows are gathered there), the
// decoder layers (module placement.VLM) and the LM head cut into blocks of
// rows no larger than limit bytes (the largest other unit, so that the
// DFB slots are sized by a layer's part rather than by the head; 0: the
// model's own largest part). The head's blocks are computed in every
// prefill pass (the last row of each chunk) and in every decode step;
// with splitHead, the blocks after the first (which holds the norm) split
// their rows between the CPU and the GPU (Model.headSplit).
func PlanText(c *configs.Qwen3, g placement.Geometry, limit int64, splitHead bool) []placement.Unit {
	emb := models.PlanUnit(placement.ID{Module: placement.Embedding}, []models.Spec{
		{Name: "embed_tokens.weight", Shape: []int{c.VocabSize, c.HiddenSize}, Table: true},
	}, 0, func(ts []placement.Tensor) []placement.Work {
		// The embedding's work is the host's share of a pass: gathering
		// rows, uploads, reading the logits and sampling (a profile's
		// "embedding" entries measure it).
		return []placement.Work{g.Work(placement.StagePrefill, ts, g.Chunk, 0), g.Work(placement.StageDecode, ts, 1, 0)}
	})
	emb.HostOnly = true
	out := []placement.Unit{emb}
	stages := []StageRows{
		// A chunk of C rows at offset i·C attends to i·C + C/2 keys on
		// average: over the prompt's passes, half the prompt.
		{Stage: placement.StagePrefill, Rows: g.Chunk, Keys: float64(g.Prompt) / 2},
		{Stage: placement.StageDecode, Rows: 1, Keys: g.DecodeCtx},
	}
	for i := range c.NumHiddenLayers {
		out = append(out, PlanLayer(c, placement.VLM, i, g, stages)...)
	}
	if limit <= 0 {
		for _, u := range out[1:] {
			limit = max(limit, u.Bytes)
		}
	}
	for b, blk := range headSpecs(c, HeadBlocksFor(c, limit), "", "lm_head.weight") {
		split := 0
		if splitHead && b > 0 {
			split = blk.rows
		}
		out = append(out, models.PlanUnit(placement.ID{Module: placement.LMHead, Index: b}, blk.specs, split,
			func(ts []placement.Tensor) []placement.Work {
				return []placement.Work{g.Work(placement.StagePrefill, ts, 1, 0), g.Work(placement.StageDecode, ts, 1, 0)}
			}))
	}
	return out
}

// HeadBlocksFor is the fewest blocks of rows that cut the final norm and
// the LM head into blobs of at most limit bytes each (1 when limit is not
// positive or the head fits).
func HeadBlocksFor(c *configs.Qwen3, limit int64) int {
	size := func(n int) int64 {
		return models.PlanBytes(models.PlanTensors(headSpecs(c, n, "", "lm_head.weight")[0].specs, placement.Whole))
	}
	if limit <= 0 || size(1) <= limit {
		return 1
	}
	n := int((size(1) + limit - 1) / limit)
	for ; n < c.VocabSize; n++ { // padding may push a block over; then one more
		if size(n) <= limit {
			return n
		}
	}
	return c.VocabSize
}
