package alpamayo

import (
	"vlanode/diffusion"
	"vlanode/models/qwen3"
	"vlanode/models/qwen3vl"
	"vlanode/placement"
	"vlanode/residency"
)

// PlanUnits publishes the units of a model of architecture a (an
// Alpamayo-R1, a Qwen3-VL or a Qwen3 text model) under w, in execution
// order, from the families' own loader tables: the vision tower
// (qwen3vl.PlanVision), the language model with its LM head cut to the
// largest other unit, its blocks not split with the CPU
// (qwen3.PlanText), and the action side
// (diffusion.PlanUnits). residency.NewPlan places them.
func PlanUnits(a *residency.Arch, w placement.Workload) []placement.Unit {
	g := a.Geometry(w)
	var vision, action []placement.Unit
	if a.Vision != nil {
		vision = qwen3vl.PlanVision(a.Vision, g)
	}
	if a.Expert != nil && a.ActionIn != nil {
		action = diffusion.PlanUnits(a.Expert, a.ActionIn, g)
	}
	limit := placement.Largest(vision, action, qwen3.PlanLayer(a.Text, placement.VLM, 0, g, nil))
	out := append(vision, qwen3.PlanText(a.Text, g, limit, false)...)
	return placement.DropIdle(append(out, action...))
}
