package alpamayo

import (
	"vlanode/layering"
	"vlanode/models"
	"vlanode/models/layered"
	"vlanode/models/qwen3"
	"vlanode/placement"
)

// Layering runs the model through a layering executor, its units placed by
// a residency plan (layered.Config: the plan, the executor's mode, device
// and view function, the host allocator, profiling, the CPU engine).
type Layering = layered.Config

// scheduleSpec is what one inference runs.
type scheduleSpec struct {
	decodes, steps int
	// answer: a question's answer, no diffusion.
	answer bool
	// guided: classifier-free guidance, a second prefill (the prompt
	// without the navigation text), the generated tokens fed to it in one
	// pass, and two expert passes per Euler step.
	guided bool
}

// schedule is one inference's passes: the vision pass, the prefill (and
// the unguided one), decodes decode steps (the ones a stop token makes
// unnecessary are skipped), the generated tokens fed to the unguided cache
// and steps Euler steps (two expert passes each with guidance).
func (m *Model) schedule(sp scheduleSpec) []layering.Pass {
	stage := m.layered.Stage
	text := m.VLM.Text
	var lm []*models.Unit
	for _, l := range text.LayerUnits {
		lm = append(lm, l.Attn, l.MLP)
	}
	lm = append(lm, qwen3.HeadUnits(text.Head)...)
	passes := stage("vision", placement.StageVision, m.VLM.Vision.Units, 1)
	passes = append(passes, stage("prefill", placement.StagePrefill, lm, 1)...)
	if sp.guided {
		passes = append(passes, stage("prefill.unguided", placement.StagePrefill, lm, 1)...)
	}
	passes = append(passes, stage("decode", placement.StageDecode, lm, sp.decodes)...)
	if sp.answer {
		return passes
	}
	steps := sp.steps
	if sp.guided {
		passes = append(passes, stage("feed.unguided", placement.StagePrefill, lm, 1)...)
		steps *= 2
	}
	return append(passes, stage("diffusion", placement.StageDiffusion, m.Expert.Units, steps)...)
}

// SetGraphs lets the decode and Euler steps replay captured graphs where
// the backend can (the default), or runs them op by op.
func (m *Model) SetGraphs(on bool) {
	m.VLM.Text.NoGraphs, m.Expert.NoGraphs = !on, !on
}

// SetProfiling turns the executor's per-unit timing on or off for the next
// inferences (Result.Layers.Turns); it does nothing without Layering.
func (m *Model) SetProfiling(on bool) {
	if m.layered != nil {
		m.layered.SetProfiling(on)
	}
}
