package qwen3

import (
	"context"
	"errors"
	"fmt"
	"time"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/layering"
	"vlanode/models"
	"vlanode/models/layered"
	"vlanode/placement"
	"vlanode/safetensors"
	"vlanode/sample"
)

// LoadOptions tune LoadWith.
type LoadOptions struct {
	// Layering, when set, places the units by a residency plan
	// (PlanText's units) and runs them through a layering executor.
	Layering *layered.Config
}

// LoadWith is Load with options: with Layering, every unit lives where
// the plan says (the embedding on the host, the others resident or
// streamed) and computes through the plan's executor.
func LoadWith(be backend.Backend, dir string, ck *safetensors.Checkpoint, opt LoadOptions) (*Model, error) {
	cfg, err := configs.LoadQwen3(dir)
	if err != nil {
		return nil, err
	}
	ld := models.NewLoader(be, ck)
	if opt.Layering != nil {
		if err := opt.Layering.ConfigureLoader(ld); err != nil {
			return nil, fmt.Errorf("qwen3: %w", err)
		}
	}
	m, err := New(ld, cfg, "model.", "lm_head.weight")
	if err != nil {
		return nil, err
	}
	if opt.Layering == nil {
		return m, nil
	}
	if m.layered, err = layered.New(opt.Layering, be, ld.Units); err != nil {
		m.Close()
		return nil, fmt.Errorf("qwen3: %w", err)
	}
	m.Exec = m.layered
	if c, ok := be.(interface{ CopiesWeights() bool }); ok && c.CopiesWeights() && !opt.Layering.Replaceable {
		// The backend holds its own copy of every resident unit: their host
		// blobs go back to the runtime.
		for _, u := range ld.Units {
			if u.Weights == placement.Resident {
				u.Blob.Data = nil
			}
		}
	}
	return m, nil
}

// Replan places the model's units as cfg's plan says and runs them
// through a new executor on cfg's device: the model MUST have been loaded
// with a Replaceable layering, and the previous executor's device MUST be
// closed first (the units' views into it are freed here). The plan must
// cut the LM head into the loaded model's blocks (the same limit: the
// largest part). Nothing of the checkpoint is read again.
func (m *Model) Replan(cfg *layered.Config) error {
	if m.layered == nil {
		return errors.New("qwen3: replan of a model loaded without a layering executor")
	}
	ex, err := layered.Replace(cfg, m.be, m.Units)
	if err != nil {
		// The units may be half placed and the old executor's device is
		// gone: nothing runs until a plan is placed.
		m.unplaced = fmt.Errorf("qwen3: %w", err)
		return m.unplaced
	}
	m.layered, m.Exec, m.unplaced = ex, ex, nil
	return nil
}

// SetProfiling turns the executor's per-unit timing on or off for the next
// generations (Generation.Layers.Turns); it does nothing without
// LoadOptions.Layering.
func (m *Model) SetProfiling(on bool) {
	if m.layered != nil {
		m.layered.SetProfiling(on)
	}
}

// GenerateOptions tune Generate.
type GenerateOptions struct {
	// Chunk prefills the prompt in passes of at most Chunk tokens (chunked
	// prefill; the plan's Workload.PrefillChunk); 0 prefills it in one
	// pass.
	Chunk int
	// Logits picks every token on the host from the downloaded logits of
	// its position and keeps them (Generation.Logits).
	Logits bool
}

// Generation is what Generate did.
type Generation struct {
	// IDs are the generated tokens.
	IDs []int32
	// Logits are the logits each token was picked from, [len(IDs)][vocab]
	// (GenerateOptions.Logits).
	Logits [][]float32
	// PromptTokens is the prompt's length, Chunks the prefill's passes.
	PromptTokens, Chunks int
	// Prefill runs from the start to the first token picked; Decode from
	// there to the last; Total is both and the setup.
	Prefill, Decode, Total time.Duration
	// Layers is the layering executor's timing (with LoadOptions.Layering,
	// when the plan streams something or profiling is on).
	Layers *layering.Profile
	// HomeError says why homes the plan gave units could not be allocated
	// (they were streamed instead).
	HomeError string
	// VRAMPeakBytes is the most device memory in use at once
	// (backend.MemoryPeak); 0 on a backend without device memory.
	VRAMPeakBytes int64
}

// Generate prefills prompt (in chunks, as opt says) and greedy-decodes n
// tokens: the first from the prefill's last logits, each other from one
// decode pass over the token before it (the last token is not fed back).
// With a layering executor the passes run as its plan places them: the
// prefill's passes with the prefill's placement, the decode steps with the
// decode's.
func (m *Model) Generate(ctx context.Context, prompt []int32, n int, opt GenerateOptions) (*Generation, error) {
	start := time.Now()
	if m.unplaced != nil {
		return nil, fmt.Errorf("qwen3: the last plan could not be placed: %w", m.unplaced)
	}
	if len(prompt) == 0 || n <= 0 {
		return nil, fmt.Errorf("qwen3: generate %d tokens after %d: %w", n, len(prompt), models.ErrBadInput)
	}
	chunk := opt.Chunk
	if chunk <= 0 || chunk > len(prompt) {
		chunk = len(prompt)
	}
	g := &Generation{PromptTokens: len(prompt), Chunks: (len(prompt) + chunk - 1) / chunk}
	if mp, ok := m.be.(backend.MemoryPeak); ok {
		mp.ResetPeak()
		defer func() { g.VRAMPeakBytes = mp.PeakBytes() }()
	}
	sess, err := m.NewSession(len(prompt) + n - 1)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	var run *layering.Runner
	if lay := m.layered; lay != nil && lay.Runs() {
		if run, err = lay.Start(m.schedule(g.Chunks, n-1)); err != nil {
			return nil, fmt.Errorf("qwen3: %w", err)
		}
		defer lay.End() // after an error: let queued copies finish
	}
	t0 := time.Now()
	var next int
	for lo := 0; lo < len(prompt); lo += chunk {
		// Every chunk's pass runs the LM head on its last row, as the plan
		// counts it; the last chunk's pick is the first token.
		if next, err = m.step(ctx, sess, prompt[lo:min(lo+chunk, len(prompt))], g, opt.Logits && lo+chunk >= len(prompt)); err != nil {
			return nil, fmt.Errorf("qwen3: prefill: %w", err)
		}
	}
	if err := m.be.Sync(); err != nil {
		return nil, err
	}
	g.Prefill = time.Since(t0)
	t0 = time.Now()
	g.IDs = append(g.IDs, int32(next))
	for len(g.IDs) < n {
		if next, err = m.step(ctx, sess, g.IDs[len(g.IDs)-1:], g, opt.Logits); err != nil {
			return nil, fmt.Errorf("qwen3: decode step %d: %w", len(g.IDs), err)
		}
		g.IDs = append(g.IDs, int32(next))
	}
	if err := m.be.Sync(); err != nil {
		return nil, err
	}
	g.Decode = time.Since(t0)
	if run != nil {
		if g.Layers, err = run.Finish(); err != nil {
			return nil, fmt.Errorf("qwen3: %w", err)
		}
		if g.Layers.HomeErrors != nil {
			g.HomeError = g.Layers.HomeErrors.Error()
		}
	}
	g.Total = time.Since(start)
	return g, nil
}

// step appends ids and picks the greedy token after them: on the device
// where the backend can (one index comes back), else, or when keep is
// set, from downloaded logits, which keep appends to g.Logits.
func (m *Model) step(ctx context.Context, sess *Session, ids []int32, g *Generation, keep bool) (int, error) {
	x, err := sess.forwardHidden(ctx, ids)
	if err != nil {
		return 0, err
	}
	defer m.be.Free(x)
	if !keep {
		id, ok, err := m.GreedyNext(x, 0, -1)
		switch {
		case err != nil:
			return 0, err
		case ok && id < 0:
			return 0, errors.New("qwen3: every logit is NaN")
		case ok:
			return id, nil
		}
	}
	logits, err := m.Logits(x, false)
	if err != nil {
		return 0, err
	}
	if keep {
		g.Logits = append(g.Logits, logits)
	}
	return sample.Greedy(logits), nil
}

// schedule is a generation's passes: chunks prefill passes, then decodes
// decode passes, each over the decoder layers' parts and the LM head's
// blocks.
func (m *Model) schedule(chunks, decodes int) []layering.Pass {
	var lm []*models.Unit
	for _, l := range m.LayerUnits {
		lm = append(lm, l.Attn, l.MLP)
	}
	lm = append(lm, HeadUnits(m.Head)...)
	passes := m.layered.Stage("prefill", placement.StagePrefill, lm, chunks)
	return append(passes, m.layered.Stage("decode", placement.StageDecode, lm, decodes)...)
}
