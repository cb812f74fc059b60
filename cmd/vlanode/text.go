package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/cuda"
	"vlanode/device"
	"vlanode/layering"
	"vlanode/models/qwen3"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/safetensors"
)

// textFlags are the text workload's flags (plan, generate, bench on a
// Qwen3 text model): the prompt's length, the tokens generated, the
// prefill's chunk.
type textFlags struct {
	promptLen, newTokens, chunk int
}

// defaultPromptLen is the text workload's prompt when none is given.
const defaultPromptLen = 512

func (f *textFlags) register(fs *flag.FlagSet, promptHelp string) {
	fs.IntVar(&f.promptLen, "prompt-len", 0, promptHelp)
	fs.IntVar(&f.chunk, "prefill-chunk", 0, "prefill the prompt in passes of at most this many tokens (chunked prefill); 0: the planner picks the chunk (the whole prompt up to the top token tier, 16,384, or a smaller tier down to 512, whichever it predicts faster)")
}

func (f *textFlags) check() error {
	if f.promptLen < 0 || f.chunk < 0 || f.newTokens <= 0 {
		return usagef("--prompt-len and --prefill-chunk must not be negative, the new tokens positive")
	}
	return nil
}

// textArch is the planner's architecture of a Qwen3 text model in dir;
// another model type is refused.
func textArch(dir string) (*residency.Arch, error) {
	mt, err := configs.ReadModelType(dir)
	if err != nil {
		return nil, err
	}
	if mt != "qwen3" {
		if slices.Contains(configs.SupportedModelTypes, mt) {
			return nil, fmt.Errorf("%s: model_type %q: the text workload runs Qwen3 text models (qwen3)", dir, mt)
		}
		return nil, configs.UnknownArchitecture(dir, mt)
	}
	return loadArch(dir, "")
}

// textSpec says what text model to load within what budget, for which
// generation.
type textSpec struct {
	dir     string
	device  string
	threads int
	budget  int64 // 0: unlimited
	layers  layerFlags
	// promptLen and newTokens are the generation the plan is for; chunk
	// its prefill chunk (0: the planner's).
	promptLen, newTokens, chunk int
	// replaceable loads the model so that replan can place it for
	// another plan (bench: one load per budget).
	replaceable bool
}

// budgetedText is a Qwen3 text model loaded within a budget, its units
// placed by a plan for one generation's shape, with what keeps it alive.
type budgetedText struct {
	be    backend.Backend
	ck    *safetensors.Checkpoint
	model *qwen3.Model
	plan  *residency.Plan
	mode  layering.Mode
	// blobs are the pinned host blobs (CUDA), kept across plans.
	blobs *hostBlobs

	closers     []func() error // the backend and the blobs
	planClosers []func() error // the plan's executor device and CPU engine
}

// Close releases the model, the executor's device and CPU engine, the
// checkpoint, the pinned blobs and the backend, in that order.
func (b *budgetedText) Close() error {
	if b.model != nil {
		b.model.Close()
	}
	errs := []error{b.closePlan()}
	if b.ck != nil {
		b.ck.Close()
	}
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	b.closers = nil
	return errors.Join(errs...)
}

// closePlan releases the current plan's executor device and CPU engine.
func (b *budgetedText) closePlan() error {
	var errs []error
	for i := len(b.planClosers) - 1; i >= 0; i-- {
		errs = append(errs, b.planClosers[i]())
	}
	b.planClosers = nil
	return errors.Join(errs...)
}

// replan plans the generation s describes and places the loaded model
// for it (loaded with s.replaceable, within the same budget): the last
// plan's executor device is closed, the units re-placed and a new
// executor made; nothing of the checkpoint is read again. A generation
// that does not plan leaves the model as it was.
func (b *budgetedText) replan(s textSpec, log io.Writer) error {
	plan, err := planText(s)
	if err != nil {
		return err
	}
	mode, err := s.layers.resolveMode(plan)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := b.closePlan(); err != nil {
		return err
	}
	b.plan, b.mode = plan, mode
	lay, closers, err := layeredConfig(b.be, plan, mode, false, s.layers.cpuThreads, b.blobs)
	b.planClosers = closers
	if err != nil {
		return err
	}
	lay.Replaceable = true
	if err := b.model.Replan(lay); err != nil {
		return err
	}
	fmt.Fprintf(log, "vlanode: re-placed in %v: %d units resident, %d streamed (%s mode); %s\n",
		time.Since(start).Round(time.Millisecond), residentUnits(plan), streamedUnits(plan), mode, stageKinds(plan))
	return nil
}

// planText plans the generation s describes on the text model in s.dir.
func planText(s textSpec) (*residency.Plan, error) {
	arch, err := textArch(s.dir)
	if err != nil {
		return nil, err
	}
	prof, _, err := loadProfile(s.layers.profile)
	if err != nil {
		return nil, err
	}
	return qwen3.PlanGeneration(arch, s.promptLen, s.newTokens, s.chunk, prof, s.budget, s.layers.textOptions())
}

// loadBudgetedText plans the generation within the budget, opens the
// backend with its allocator limited to the budget, and loads the model
// with the plan's placement, its units run by a layering executor.
func loadBudgetedText(s textSpec, log io.Writer) (*budgetedText, error) {
	plan, err := planText(s)
	if err != nil {
		return nil, err
	}
	mode, err := s.layers.resolveMode(plan)
	if err != nil {
		return nil, err
	}
	b := &budgetedText{plan: plan, mode: mode}
	start := time.Now()
	be, err := device.Open(s.device, device.Options{Threads: s.threads, Budget: s.budget}, log)
	if err != nil {
		return nil, err
	}
	b.be = be
	b.closers = append(b.closers, be.Close)
	if _, ok := be.(*cuda.Backend); ok {
		b.blobs = &hostBlobs{}
		b.closers = append(b.closers, b.blobs.free)
	}
	lay, closers, err := layeredConfig(be, plan, mode, false, s.layers.cpuThreads, b.blobs)
	b.planClosers = closers
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	lay.Replaceable = s.replaceable
	if b.ck, err = safetensors.Open(s.dir); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	if b.model, err = qwen3.LoadWith(be, s.dir, b.ck, qwen3.LoadOptions{Layering: lay}); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	fmt.Fprintf(log, "vlanode: %s within %s in %v: %d units resident, %d streamed (%s mode); %s\n",
		s.dir, budgetText(s.budget), time.Since(start).Round(time.Millisecond), residentUnits(plan), streamedUnits(plan), mode, stageKinds(plan))
	return b, nil
}

// stageKinds says each stage's plan: "prefill 4096 rows in 1 pass
// gpu-only, decode 1 row × 15 dynamic (CPU 0.55)".
func stageKinds(p *residency.Plan) string {
	out := ""
	for i, sp := range p.Stages {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %d rows × %d %s", sp.Stage, sp.Rows, sp.Passes, sp.Kind)
		if sp.Kind == residency.Dynamic {
			out += fmt.Sprintf(" (CPU %.2f)", sp.CPUShare)
		}
	}
	return out
}

// generate generates n tokens after prompt on the loaded model with the
// plan's prefill chunk.
func (b *budgetedText) generate(ctx context.Context, prompt []int32, n int) (*qwen3.Generation, error) {
	return b.model.Generate(ctx, prompt, n, qwen3.GenerateOptions{Chunk: b.plan.Workload.PrefillChunk})
}

// syntheticPrompt is a prompt of n token ids for measurements: token i is
// (1 + 7919·i) mod min(vocab, 151643) (ordinary ids of Qwen's vocabulary,
// no special tokens).
func syntheticPrompt(n, vocab int) []int32 {
	m := min(vocab, 151643)
	out := make([]int32, n)
	for i := range out {
		out[i] = int32((1 + 7919*int64(i)) % int64(m))
	}
	return out
}

// textTiming is a generation's timing with the plan's prediction: ms and
// tokens per second of the prefill and of the decode.
type textTiming struct {
	PromptTokens   int     `json:"prompt_tokens"`
	NewTokens      int     `json:"new_tokens"`
	Chunk          int     `json:"prefill_chunk"`
	Chunks         int     `json:"prefill_passes"`
	PrefillMs      float64 `json:"prefill_ms"`
	DecodeMs       float64 `json:"decode_ms"`
	PrefillTokS    float64 `json:"prefill_tokens_per_s"`
	DecodeTokS     float64 `json:"decode_tokens_per_s"`
	PredPrefillMs  float64 `json:"predicted_prefill_ms"`
	PredDecodeMs   float64 `json:"predicted_decode_ms"`
	PredPrefillTok float64 `json:"predicted_prefill_tokens_per_s"`
	PredDecodeTok  float64 `json:"predicted_decode_tokens_per_s"`
}

// timingOf is g's timing beside plan's prediction (the decode's tokens
// per second count its passes: the tokens after the first).
func timingOf(g *qwen3.Generation, plan *residency.Plan) textTiming {
	t := textTiming{PromptTokens: g.PromptTokens, NewTokens: len(g.IDs), Chunks: g.Chunks, Chunk: plan.Workload.PrefillChunk,
		PrefillMs: ms(g.Prefill), DecodeMs: ms(g.Decode),
		PredPrefillMs: plan.PredictedMs[placement.StagePrefill], PredDecodeMs: plan.PredictedMs[placement.StageDecode]}
	if t.Chunk == 0 {
		t.Chunk = g.PromptTokens
	}
	rate := func(n int, ms float64) float64 {
		if ms <= 0 {
			return 0
		}
		return float64(n) / (ms / 1e3)
	}
	t.PrefillTokS, t.PredPrefillTok = rate(g.PromptTokens, t.PrefillMs), rate(g.PromptTokens, t.PredPrefillMs)
	t.DecodeTokS, t.PredDecodeTok = rate(len(g.IDs)-1, t.DecodeMs), rate(len(g.IDs)-1, t.PredDecodeMs)
	return t
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// genResult is one generation on a budgeted model, with the CPU engine's
// compute time in it and its tasks' waits for their input from the GPU.
type genResult struct {
	gen                  *qwen3.Generation
	cpuBusyMs, cpuWaitMs float64
}

// runGeneration generates n tokens after prompt on bm.
func runGeneration(ctx context.Context, bm *budgetedText, prompt []int32, n int) (*genResult, error) {
	g, err := bm.generate(ctx, prompt, n)
	if err != nil {
		return nil, err
	}
	r := &genResult{gen: g}
	if g.Layers != nil {
		r.cpuBusyMs, r.cpuWaitMs = g.Layers.CPUMs()
	}
	return r, nil
}
