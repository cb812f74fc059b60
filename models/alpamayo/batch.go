package alpamayo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"vlanode/backend"
	"vlanode/diffusion"
	"vlanode/models"
	"vlanode/models/qwen3"
	"vlanode/models/qwen3vl"
	"vlanode/placement"
)

// InferBatch runs several requests together and returns each one's result
// or error, as Infer would return them for that request alone. Within a
// budget that streams units, the plans (reasoning, unguided) go through
// one executor run: the vision pass over every request's images, the
// prefill of every prompt, the decode steps of every sequence in lockstep
// (a sequence that ends drops out; the others' steps go on unchanged) and
// the expert at each Euler step, each streamed unit copied once a pass for
// all of them. Each sequence's computes run one after the other inside the
// unit's turn, with the shapes they have alone (its trajectory samples in
// one product, diffusion.Expert.SampleBatch): every result is the lone
// run's, bit for bit.
//
// Run one at a time instead, each through Infer: questions and guided
// requests (their passes differ), teacher-forced ones (each step returns
// its logits), and every request when the model runs
// without an executor (every unit resident: nothing to share) or its plan
// computes shares of units on the CPU (one hand-off a unit turn).
//
// The batch's results share its stage times, its executor profile and
// its peak of device memory. The sequences' vision passes and prefills
// share one pass's activations (each keeps its hidden states, features and
// rotary tables), as residency's fixed costs of a batch count them. The
// caller bounds the batch by the plan's fixed costs (Layering.Plan,
// residency.Workload's Batch and Samples).
func (m *Model) InferBatch(ctx context.Context, reqs []*Request) ([]*Result, []error) {
	results, errs := make([]*Result, len(reqs)), make([]error, len(reqs))
	var together []int
	for i, r := range reqs {
		if err := m.check(r); err != nil {
			errs[i] = err
			continue
		}
		if m.batches() && r.Question == "" && m.guidance(r) == 0 && r.TeacherForced == nil {
			together = append(together, i)
		}
	}
	if len(together) > 1 {
		rs := make([]*Request, len(together))
		for k, i := range together {
			rs[k] = reqs[i]
		}
		res, es := m.inferTogether(ctx, rs)
		for k, i := range together {
			results[i], errs[i] = res[k], es[k]
		}
	} else {
		together = nil
	}
	for i, r := range reqs {
		if errs[i] != nil || results[i] != nil || slices.Contains(together, i) {
			continue
		}
		results[i], errs[i] = m.Infer(ctx, r)
	}
	return results, errs
}

// batches says whether requests run together: the model runs through an
// executor (something is streamed, or profiled) and its plan computes no
// share of a unit on the CPU.
func (m *Model) batches() bool {
	lay := m.layered
	return lay != nil && lay.Runs() && !lay.CPUShares()
}

// sequence is one request's state in a batch.
type sequence struct {
	req    *Request
	res    *Result
	err    error
	maxNew int
	feat   *qwen3vl.Features
	prompt []int32
	sess   *qwen3vl.Session
	logits []float32
	gen    []int32
	offset int
}

// inferTogether runs plan requests (no question, no guidance, checked)
// through one executor run; see InferBatch.
func (m *Model) inferTogether(ctx context.Context, reqs []*Request) ([]*Result, []error) {
	start := time.Now()
	seqs := make([]*sequence, len(reqs))
	sched := scheduleSpec{steps: m.Expert.Config.Steps}
	for i, r := range reqs {
		s := &sequence{req: r, res: &Result{}, maxNew: r.MaxReasoningTokens}
		if s.maxNew <= 0 {
			s.maxNew = m.Config.TokensPerFutureTraj
		}
		sched.decodes = max(sched.decodes, s.maxNew)
		seqs[i] = s
	}
	defer func() {
		for _, s := range seqs {
			if s.feat != nil {
				s.feat.Free(m.be)
			}
			if s.sess != nil {
				s.sess.Close()
			}
		}
	}()
	fail := func(err error) ([]*Result, []error) {
		errs := make([]error, len(seqs))
		for i := range errs {
			errs[i] = err
		}
		return nil, errs
	}
	var peak int64
	if mp, ok := m.be.(backend.MemoryPeak); ok {
		mp.ResetPeak()
		defer func() {
			for _, s := range seqs {
				s.res.VRAMPeakBytes = peak
			}
		}()
		defer func() { peak = mp.PeakBytes() }()
	}
	lay := m.layered
	run, err := lay.Start(m.schedule(sched))
	if err != nil {
		return fail(fmt.Errorf("alpamayo: %w", err))
	}
	g := &gang{exec: lay}
	vision, text := m.VLM.Vision.Exec, m.VLM.Text.Exec
	m.VLM.Vision.Exec, m.VLM.Text.Exec = g, g
	defer func() {
		m.VLM.Vision.Exec, m.VLM.Text.Exec = vision, text
		lay.End() // after an error: let queued copies finish
	}()

	var timing Timing
	stages := []struct {
		name string
		d    *time.Duration
		step func(s *sequence) error
	}{
		{"vision", &timing.Vision, func(s *sequence) error { return m.batchVision(ctx, s) }},
		{"prefill", &timing.Prefill, func(s *sequence) error { return m.batchPrefill(ctx, s) }},
		{"decode", &timing.Decode, func(s *sequence) error { return m.batchDecode(ctx, s) }},
	}
	// The sequences' vision passes and prefills run each unit in turn:
	// they share one pass's activations (each keeps its hidden states,
	// features and rotary tables), freed before the decode.
	m.VLM.Vision.ShareScratch(true)
	m.VLM.Text.Shared = qwen3.NewSharedScratch(m.be, m.VLM.Text.Config)
	unshare := func() {
		m.VLM.Vision.ShareScratch(false)
		if sh := m.VLM.Text.Shared; sh != nil {
			sh.Free()
			m.VLM.Text.Shared = nil
		}
	}
	defer unshare()
	m.hostWork = g.host // sampling runs beside the other members' code
	defer func() { m.hostWork = nil }()
	for _, st := range stages {
		switch st.name {
		case "prefill":
			// The vision passes are done (synchronized): their shared
			// scratch goes before the prompts' caches are allocated, as
			// the plan's prefill stage counts none of it.
			m.VLM.Vision.ShareScratch(false)
		case "decode":
			unshare()
		}
		t0 := time.Now()
		live := liveOf(seqs)
		if len(live) == 0 {
			break
		}
		errs := g.run(len(live), func(i int) error { return st.step(live[i]) })
		for i, err := range errs {
			if err != nil && live[i].err == nil {
				live[i].err = err
			}
		}
		if err := m.be.Sync(); err != nil {
			return fail(fmt.Errorf("alpamayo: %s: %w", st.name, err))
		}
		*st.d = time.Since(t0)
	}
	live := liveOf(seqs)
	if len(live) == 0 {
		return results(seqs)
	}
	if err := run.Skip(string(placement.StageDecode)); err != nil {
		return fail(fmt.Errorf("alpamayo: %w", err))
	}
	t0 := time.Now()
	draws := make([]diffusion.Draws, len(live))
	for i, s := range live {
		draws[i] = m.draws(s.req, m.prefixOf(s.sess, len(s.prompt)+s.offset))
	}
	acts, err := m.Expert.SampleBatch(ctx, draws, 0)
	if err != nil {
		return fail(fmt.Errorf("alpamayo: diffusion: %w", err))
	}
	if err := m.be.Sync(); err != nil {
		return fail(fmt.Errorf("alpamayo: diffusion: %w", err))
	}
	timing.Diffusion = time.Since(t0)
	prof, err := run.Finish()
	if err != nil {
		return fail(fmt.Errorf("alpamayo: %w", err))
	}
	for i, s := range live {
		s.res.Layers = prof
		if prof.HomeErrors != nil {
			s.res.HomeError = prof.HomeErrors.Error()
		}
		if err := m.setTrajectories(s.res, s.req, acts[i]); err != nil {
			s.err = err
		}
	}
	timing.Total = time.Since(start)
	for _, s := range seqs {
		s.res.Timing = timing
	}
	return results(seqs)
}

// liveOf is the sequences without an error.
func liveOf(seqs []*sequence) []*sequence {
	var out []*sequence
	for _, s := range seqs {
		if s.err == nil {
			out = append(out, s)
		}
	}
	return out
}

// results are the sequences' results and errors.
func results(seqs []*sequence) ([]*Result, []error) {
	res, errs := make([]*Result, len(seqs)), make([]error, len(seqs))
	for i, s := range seqs {
		if s.err != nil {
			errs[i] = s.err
			continue
		}
		res[i] = s.res
	}
	return res, errs
}

// batchVision is a sequence's vision stage in a batch.
func (m *Model) batchVision(ctx context.Context, s *sequence) error {
	feat, err := m.VLM.Vision.Encode(ctx, &s.req.Images)
	if err != nil {
		return fmt.Errorf("alpamayo: vision: %w", err)
	}
	s.feat = feat
	return nil
}

// batchPrefill is a sequence's prompt and prefill in a batch, with a cache
// for its reasoning and its trajectory samples' action tokens.
func (m *Model) batchPrefill(ctx context.Context, s *sequence) error {
	prompt, err := m.prompt(s.req)
	if err != nil {
		return err
	}
	s.prompt = prompt
	s.res.PromptTokens, s.res.PromptIDs = len(prompt), prompt
	if s.sess, err = m.VLM.NewSession(len(prompt) + s.maxNew + s.req.samples()*m.Expert.Waypoints()); err != nil {
		return fmt.Errorf("alpamayo: %w", err)
	}
	if s.logits, err = s.sess.Prefill(ctx, qwen3vl.Prompt{IDs: prompt, Features: s.feat}, false); err != nil {
		return fmt.Errorf("alpamayo: prefill: %w", err)
	}
	s.feat.Free(m.be) // the prefill was its last reader
	s.feat = nil
	return nil
}

// batchDecode is a sequence's reasoning decode in a batch: it leaves the
// gang when its reasoning ends.
func (m *Model) batchDecode(ctx context.Context, s *sequence) error {
	gen, offset, err := m.reason(ctx, s.sess, s.logits, s.req, s.maxNew, m.reasoning(), nil)
	if err != nil {
		return err
	}
	s.gen, s.offset, s.logits = gen, offset, nil
	s.res.ReasoningIDs = gen
	s.res.CachedTokens = s.sess.Len()
	if s.res.Reasoning, err = m.reasoningText(gen); err != nil {
		return err
	}
	return nil
}

var _ models.Runner = (*gang)(nil)
