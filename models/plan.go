package models

import (
	"vlanode/placement"
	"vlanode/tensor"
	"vlanode/weights"
)

// PlanTensors are the planner's tensors of part of a table of specs (the
// same table the loader binds, so a plan's unit sizes are the loaded
// blobs' sizes). A tensor of two or more dimensions is a matrix multiplied
// by every row through the unit, seen as [shape[0], the rest] (a Conv3d
// patch embedding is a [hidden, patch] matrix), unless it is a Table.
func PlanTensors(specs []Spec, part placement.Part) []placement.Tensor {
	var out []placement.Tensor
	for _, s := range specs {
		if s.Part != part {
			continue
		}
		t := placement.Tensor{Name: s.Name, Shape: s.Shape, Split: s.Split}
		if len(s.Shape) >= 2 && !s.Table {
			rest := 1
			for _, d := range s.Shape[1:] {
				rest *= d
			}
			t.Shape, t.Matrix = []int{s.Shape[0], rest}, true
		}
		out = append(out, t)
	}
	return out
}

// PlanBytes is the size of the blob the loader packs ts into (bf16
// weights, each tensor at a weights.Align aligned offset).
func PlanBytes(ts []placement.Tensor) int64 {
	specs := make([]weights.Spec, len(ts))
	for i, t := range ts {
		specs[i] = weights.Spec{Name: t.Name, DType: tensor.BF16, Shape: t.Shape}
	}
	_, n := weights.Layout(specs)
	return n
}

// PlanUnit is the planner's unit of one part of a table of specs, its work
// given by work (which receives the part's tensors); splitDim is the
// length a CPU/GPU split divides (0: the part does not split).
func PlanUnit(id placement.ID, specs []Spec, splitDim int, work func(ts []placement.Tensor) []placement.Work) placement.Unit {
	ts := PlanTensors(specs, id.Part)
	return placement.Unit{ID: id, Tensors: ts, Bytes: PlanBytes(ts), SplitDim: splitDim, Work: work(ts)}
}
