package placement

import (
	"errors"
	"fmt"
)

// Workload is the shape of one inference: what the planner sizes the KV
// cache and activations for, and how often each stage repeats.
type Workload struct {
	Name string `json:"name"`
	// Images and PatchesPerImage give the vision stage's patches
	// (16 × 720 = 11,520 in the standard workload).
	Images          int `json:"images"`
	PatchesPerImage int `json:"patches_per_image"`
	// PromptTokens is the prefill length, visual tokens included.
	PromptTokens int `json:"prompt_tokens"`
	// ReasoningTokens is N: decode passes, one per reasoning token.
	ReasoningTokens int `json:"reasoning_tokens"`
	// EulerSteps are the diffusion passes of the action expert.
	EulerSteps int `json:"euler_steps"`
	// ActionTokens are the expert's rows per pass (64 waypoints).
	ActionTokens int `json:"action_tokens"`
	// PrefillChunk, when positive and shorter than the prompt, prefills
	// the prompt in passes of at most that many tokens (chunked prefill:
	// each pass appends its chunk to the KV cache and attends to every
	// key before it); 0 prefills the prompt in one pass.
	PrefillChunk int `json:"prefill_chunk,omitempty"`
}

// StandardWorkloadName names StandardWorkload.
const StandardWorkloadName = "standard"

// StandardWorkload is DESIGN.md's standard workload in the shape
// bench/results/standard-workload.md measured: 16 images (4 cameras × 4
// frames) of 576×320 → 720 patches each, a 3,042-token prompt, 21
// reasoning tokens, 10 Euler steps over 64 action tokens.
func StandardWorkload() Workload {
	return Workload{
		Name: StandardWorkloadName, Images: 16, PatchesPerImage: 720, PromptTokens: 3042,
		ReasoningTokens: 21, EulerSteps: 10, ActionTokens: 64,
	}
}

// TextWorkloadName names the workloads of text generation (TextWorkload).
const TextWorkloadName = "text"

// TextWorkload is text generation: a prompt of prompt tokens, prefilled
// in chunks of at most chunk tokens (0: one pass, see PrefillChunk), then
// newTokens greedy tokens: the first comes from the prefill's logits, each
// other from one decode pass, so newTokens−1 decode passes.
func TextWorkload(prompt, newTokens, chunk int) Workload {
	return Workload{Name: TextWorkloadName, PromptTokens: prompt, ReasoningTokens: max(newTokens-1, 0), PrefillChunk: chunk}
}

// Workloads maps the names the command line accepts to workloads.
func Workloads() map[string]Workload {
	return map[string]Workload{StandardWorkloadName: StandardWorkload()}
}

// Patches is the vision stage's patch count.
func (w Workload) Patches() int { return w.Images * w.PatchesPerImage }

// Validate checks the counts.
func (w Workload) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"images", w.Images}, {"patches_per_image", w.PatchesPerImage},
		{"reasoning_tokens", w.ReasoningTokens}, {"euler_steps", w.EulerSteps}, {"action_tokens", w.ActionTokens},
		{"prefill_chunk", w.PrefillChunk},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s is negative (%d)", f.name, f.v))
		}
	}
	if w.PromptTokens <= 0 {
		errs = append(errs, fmt.Errorf("prompt_tokens must be positive, got %d", w.PromptTokens))
	}
	if (w.Images == 0) != (w.PatchesPerImage == 0) {
		errs = append(errs, fmt.Errorf("images (%d) and patches_per_image (%d) must both be zero or both positive", w.Images, w.PatchesPerImage))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("placement: workload %q: %w", w.Name, err)
	}
	return nil
}

// Tiers are the token tiers of paper 2 (§4): a pass is placed by the
// number of new rows it multiplies through the weights, rounded up to the
// next tier. Past the last tier a prompt is prefilled in chunks of it.
var Tiers = []int{1, 4, 16, 32, 64, 512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10}

// Tier is the tier of a pass over rows new rows: the smallest tier that
// holds them (the last one past it).
func Tier(rows int) int {
	for _, t := range Tiers {
		if rows <= t {
			return t
		}
	}
	return Tiers[len(Tiers)-1]
}
