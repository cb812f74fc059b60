package diffusion

import (
	"vlanode/configs"
	"vlanode/models"
	"vlanode/models/qwen3"
	"vlanode/placement"
)

// PlanUnits publishes the action side under g as the planner's units, in
// execution order and from the loader's own tables: action_in_proj (its
// Fourier frequencies stay on the host), each expert layer's attention and
// MLP parts (module placement.Expert, over the prompt, the reasoning and
// the action tokens), then the final norm with action_out_proj. Each runs
// once an Euler step over the action tokens of every trajectory sample of
// a sequence (g.ExpertRows), once for each sequence of a batch.
func PlanUnits(expert *configs.Qwen3, in *configs.ActionInProjConfig, g placement.Geometry) []placement.Unit {
	if !g.Diffusion {
		return nil
	}
	rows := g.ExpertRows
	step := func(ts []placement.Tensor) []placement.Work {
		return []placement.Work{g.Work(placement.StageDiffusion, ts, rows, 0)}
	}
	proj := newActionInProj(InProjConfig{NumEncLayers: in.NumEncLayers, HiddenSize: in.HiddenSize,
		NumFourierFeats: in.NumFourierFeats, MaxFreq: in.MaxFreq}, ActionDims, expert.HiddenSize)
	out := []placement.Unit{models.PlanUnit(placement.ID{Module: placement.ActionIn}, proj.specs(), 0, step)}
	stages := []qwen3.StageRows{{Stage: placement.StageDiffusion, Rows: rows, Keys: float64(g.ExpertCtx)}}
	for i := range expert.NumHiddenLayers {
		out = append(out, qwen3.PlanLayer(expert, placement.Expert, i, g, stages)...)
	}
	head := &Expert{Config: &Config{Expert: ExpertConfig{HiddenSize: expert.HiddenSize}}, OutProj: &ActionOutProj{}}
	return append(out, models.PlanUnit(placement.ID{Module: placement.ActionOut}, head.headSpecs(), 0, step))
}
