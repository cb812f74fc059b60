package alpamayo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"vlanode/backend"
	"vlanode/diffusion"
	"vlanode/layering"
	"vlanode/models"
	"vlanode/models/qwen3"
	"vlanode/models/qwen3vl"
	"vlanode/placement"
	"vlanode/sample"
)

// Request is one inference: preprocessed images and the ego history.
type Request struct {
	// Images are the preprocessed camera images (pixel_values rows and one
	// grid per image), camera-major, oldest first, as the model expects.
	Images qwen3vl.Images
	// HistXYZ and HistRot are the ego poses in the t0 frame at 10 Hz,
	// oldest first, the last at t0 (16 for Alpamayo-R1).
	HistXYZ [][3]float32
	HistRot [][9]float32
	// MaxReasoningTokens bounds the reasoning decode (0: the config's
	// tokens_per_future_traj).
	MaxReasoningTokens int
	// Greedy decodes the reasoning by argmax instead of sampling with
	// Temperature and TopP (0 means the release's 0.6 and 0.98).
	Greedy      bool
	Temperature float64
	TopP        float64
	// Seed makes sampling and the flow-matching noise reproducible.
	Seed uint64
	// Noise, when set, is the flow matching's initial state [64][2].
	Noise []float32
}

// Default sampling of the release (NVlabs/alpamayo test_inference.py).
const (
	DefaultTemperature = 0.6
	DefaultTopP        = 0.98
)

// Timing is the wall time of each stage. On a backend with a
// backend.Stopwatch (cuda) the vision stage's is the device's time from its
// first work to its last, and the prefill's the rest of the wall time since
// the vision began (the host prepares the prefill while the device runs
// the encoder); the stages still add up to the time since the vision began.
type Timing struct {
	Vision, Prefill, Decode, Diffusion, Total time.Duration
}

// Result is the model's plan.
type Result struct {
	Reasoning    string
	ReasoningIDs []int32
	// Actions are the denormalised controls, (acceleration m/s², curvature
	// 1/m) per waypoint; Normalized are the sampled values before that.
	Actions    [][2]float32
	Normalized []float32
	XYZ        [][3]float32
	Rot        [][9]float32
	// PromptTokens is the prompt length, CachedTokens L (what the expert
	// attended to).
	PromptTokens, CachedTokens int
	Timing                     Timing
	// Layers is the layering executor's timing of the inference (with
	// Layering; per unit with Layering.Profile). It is nil when the plan
	// streams nothing and profiling is off: the units then run in place,
	// without the executor.
	Layers *layering.Profile
	// DecodeGraph and DiffusionGraph say whether the decode steps and the
	// Euler steps replayed captured graphs (a backend that captures, every
	// unit resident, no profiling); GraphError says why a capture failed.
	DecodeGraph, DiffusionGraph bool
	GraphError                  string
	// HomeError says why homes the plan gave units could not be
	// allocated (they were streamed instead in their stage).
	HomeError string
}

// Infer runs the whole pipeline for one request.
func (m *Model) Infer(ctx context.Context, req *Request) (*Result, error) {
	start := time.Now()
	if err := m.check(req); err != nil {
		return nil, err
	}
	res := &Result{}
	maxNew := req.MaxReasoningTokens
	if maxNew <= 0 {
		maxNew = m.Config.TokensPerFutureTraj
	}
	var run *layering.Runner
	if lay := m.layered; lay != nil && !lay.direct() {
		var err error
		if run, err = lay.exec.Start(m.schedule(maxNew, m.Expert.Config.Steps)); err != nil {
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
		lay.run = run
		defer func() {
			lay.run = nil
			_ = run.Abort() // after an error: let queued copies finish
		}()
	}
	stamp := func(d *time.Duration, since time.Time) error {
		if err := m.be.Sync(); err != nil {
			return err
		}
		*d = time.Since(since)
		return nil
	}

	// The vision stage ends in a mark on a backend with a Stopwatch, not
	// a wait: the host builds the prompt and queues the prefill while the
	// device finishes the encoder, and the vision's time is the device's.
	vt0 := time.Now()
	sw, _ := m.be.(backend.Stopwatch)
	if m.SyncStages {
		sw = nil
	}
	var vmarks [2]backend.Mark
	var err error
	if sw != nil {
		defer func() {
			for _, mk := range vmarks {
				_ = sw.ReleaseMark(mk)
			}
		}()
		if vmarks[0], err = sw.Mark(); err != nil {
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
	}
	feat, err := m.VLM.Vision.Encode(ctx, &req.Images)
	if err != nil {
		return nil, fmt.Errorf("alpamayo: vision: %w", err)
	}
	defer func() { feat.Free(m.be) }()
	if sw != nil {
		if vmarks[1], err = sw.Mark(); err != nil {
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
	} else if err := stamp(&res.Timing.Vision, vt0); err != nil {
		return nil, err
	}

	hist, err := m.Expert.HistoryTokens(req.HistXYZ, int32(m.Config.HistTokenStartIdx()))
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	merge := m.VLM.Config.Vision.SpatialMergeSize
	perImage := make([]int, len(req.Images.Grids))
	for i, g := range req.Images.Grids {
		perImage[i] = g.Patches() / (merge * merge)
	}
	prompt, err := m.buildPrompt(perImage, hist)
	if err != nil {
		return nil, err
	}
	res.PromptTokens = len(prompt)

	sess, err := m.VLM.NewSession(len(prompt) + maxNew + m.Expert.Waypoints())
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	defer sess.Close()

	t0 := time.Now()
	logits, err := sess.Prefill(ctx, qwen3vl.Prompt{IDs: prompt, Features: feat}, false)
	if err != nil {
		return nil, fmt.Errorf("alpamayo: prefill: %w", err)
	}
	if err := stamp(&res.Timing.Prefill, t0); err != nil {
		return nil, err
	}
	if sw != nil {
		// The prefill's share is the rest since the vision began: the
		// host's work in between ran while the device ran the encoder.
		end := time.Now()
		if res.Timing.Vision, err = sw.Elapsed(vmarks[0], vmarks[1]); err != nil {
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
		res.Timing.Prefill = end.Sub(vt0) - res.Timing.Vision
	}
	feat.Free(m.be) // the prefill was their last reader: the decode's homes take its room

	t0 = time.Now()
	gen, offset, err := m.reason(ctx, sess, logits, req, maxNew)
	if err != nil {
		return nil, err
	}
	if err := stamp(&res.Timing.Decode, t0); err != nil {
		return nil, err
	}
	var graphErrs []error
	var gerr error
	res.DecodeGraph, gerr = sess.StepGraph()
	graphErrs = append(graphErrs, gerr)
	if run != nil {
		if err := run.Skip(string(placement.StageDecode)); err != nil {
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
	}
	res.ReasoningIDs = gen
	res.CachedTokens = sess.Len()
	if res.Reasoning, err = m.reasoningText(gen); err != nil {
		return nil, err
	}

	t0 = time.Now()
	prefix := diffusion.Prefix{Len: sess.Len(), Offset: len(prompt) + offset, RopeDelta: sess.RopeDelta()}
	for l := 0; l < m.VLM.Config.Text.NumHiddenLayers; l++ {
		k, v := sess.Cache(l)
		prefix.Cache = append(prefix.Cache, diffusion.KV{K: k, V: v})
	}
	acts, err := m.Expert.Sample(ctx, []diffusion.Prefix{prefix}, diffusion.SampleOptions{Noise: req.Noise, Seed: req.Seed})
	if err != nil {
		return nil, fmt.Errorf("alpamayo: diffusion: %w", err)
	}
	if err := stamp(&res.Timing.Diffusion, t0); err != nil {
		return nil, err
	}
	res.DiffusionGraph, gerr = m.Expert.StepGraph()
	if err := errors.Join(append(graphErrs, gerr)...); err != nil {
		res.GraphError = err.Error()
	}
	if run != nil {
		if res.Layers, err = run.Finish(); err != nil {
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
		if res.Layers.HomeErrors != nil {
			res.HomeError = res.Layers.HomeErrors.Error()
		}
	}
	res.Normalized = acts[0]
	tr, err := m.Expert.ActionsToTrajectory(acts[0], req.HistXYZ, req.HistRot)
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	accel, kappa, err := m.Expert.Space.Denormalize(acts[0])
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	res.Actions = make([][2]float32, len(accel))
	for i := range accel {
		res.Actions[i] = [2]float32{accel[i], kappa[i]}
	}
	res.XYZ, res.Rot = tr.XYZ, tr.Rot
	res.Timing.Total = time.Since(start)
	return res, nil
}

// reason decodes the chain of thought after the prompt. It returns the
// sampled tokens and the offset (within them) just past the first
// <|traj_future_start|>, or len(gen) when none came. As the release's
// generate does, the last sampled token is never fed back, except
// <|traj_future_start|>, which the expert must see: generation stops one
// step after it.
func (m *Model) reason(ctx context.Context, sess *qwen3vl.Session, logits []float32, req *Request, maxNew int) ([]int32, int, error) {
	var smp *sample.Sampler
	if !req.Greedy {
		temp, topP := req.Temperature, req.TopP
		if temp == 0 {
			temp = DefaultTemperature
		}
		if topP == 0 {
			topP = DefaultTopP
		}
		var err error
		if smp, err = sample.NewSampler(temp, topP, req.Seed); err != nil {
			return nil, 0, fmt.Errorf("alpamayo: %w: %w", models.ErrBadInput, err)
		}
	}
	if smp == nil && logits != nil && maxNew > 0 {
		gr, err := sess.StartGreedy(m.Tokens.TrajFirst, m.Tokens.TrajLast)
		if err != nil {
			return nil, 0, fmt.Errorf("alpamayo: %w", err)
		}
		if gr != nil {
			gen, err := m.reasonFed(ctx, gr, logits, maxNew)
			gr.Close()
			if !errors.Is(err, qwen3.ErrNoFeed) {
				return gen, len(gen), err
			}
			// Refused at its first step, with nothing appended: the steps
			// below wait for each token instead.
		}
	}
	var gen []int32
	next := -1 // greedy after the first token: picked by the decode step itself
	for len(gen) < maxNew {
		if logits != nil {
			m.maskTrajectoryTokens(logits)
			var err error
			if next, err = m.pick(logits, smp); err != nil {
				return nil, 0, err
			}
		} else if next < 0 {
			return nil, 0, errors.New("alpamayo: every logit is NaN")
		}
		gen = append(gen, int32(next))
		if next == m.Tokens.EOS {
			return gen, len(gen), nil
		}
		if len(gen) == maxNew && next != m.Tokens.FutureStart {
			break // the last sampled token is not fed back
		}
		var err error
		if smp == nil && next != m.Tokens.FutureStart {
			// The next greedy token is picked where the logits are (on
			// the GPU: one index comes back, not the vocabulary's logits),
			// with the trajectory tokens masked as maskTrajectoryTokens
			// does.
			logits = nil
			next, err = sess.DecodeGreedy(ctx, []int32{int32(next)}, m.Tokens.TrajFirst, m.Tokens.TrajLast)
		} else {
			logits, err = sess.Decode(ctx, []int32{int32(next)}, false)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("alpamayo: decode step %d: %w", len(gen), err)
		}
		if gen[len(gen)-1] == int32(m.Tokens.FutureStart) {
			return gen, len(gen), nil
		}
	}
	return gen, len(gen), nil
}

// reasonFed is reason's greedy loop on steps fed on the device
// (qwen3vl.Greedy): the step that feeds a token the host has not read yet
// is queued before the host reads it, wherever that token is fed whatever
// it is (all but <|im_end|>, whose speculative step is dropped), so that
// the device runs step after step while the host reads their tokens. The
// tokens and the cache are reason's, bit for bit.
func (m *Model) reasonFed(ctx context.Context, gr *qwen3vl.Greedy, logits []float32, maxNew int) ([]int32, error) {
	m.maskTrajectoryTokens(logits)
	first, err := m.pick(logits, nil)
	if err != nil {
		return nil, err
	}
	gen := []int32{int32(first)}
	eos, fs := m.Tokens.EOS, m.Tokens.FutureStart
	if first == eos || len(gen) == maxNew && first != fs {
		return gen, nil
	}
	if err := gr.Queue(ctx, int32(first)); err != nil {
		return nil, fmt.Errorf("alpamayo: decode step 1: %w", err) // ErrNoFeed: reason's loop instead
	}
	if first == fs {
		return gen, nil // the step after it is not needed: its pick is dropped
	}
	for {
		// The step feeding gen's last token is queued; its pick will be
		// fed too unless it is <|im_end|>, or the last token allowed
		// (then only <|traj_future_start|> is).
		spec := len(gen)+1 < maxNew
		if spec {
			if err := gr.Queue(ctx, -1); err != nil {
				return nil, fmt.Errorf("alpamayo: decode step %d: %w", len(gen)+1, err)
			}
		}
		next, err := gr.Next()
		if err != nil {
			return nil, fmt.Errorf("alpamayo: decode step %d: %w", len(gen), err)
		}
		if next < 0 {
			return nil, errors.New("alpamayo: every logit is NaN")
		}
		gen = append(gen, int32(next))
		switch {
		case next == eos:
			if spec {
				if err := gr.Drop(); err != nil {
					return nil, fmt.Errorf("alpamayo: %w", err)
				}
			}
			return gen, nil
		case !spec:
			if next == fs {
				if err := gr.Queue(ctx, int32(next)); err != nil {
					return nil, fmt.Errorf("alpamayo: decode step %d: %w", len(gen), err)
				}
			}
			return gen, nil
		case next == fs:
			return gen, nil
		}
	}
}

func (m *Model) pick(logits []float32, smp *sample.Sampler) (int, error) {
	if smp == nil {
		id := sample.Greedy(logits)
		if id < 0 {
			return 0, errors.New("alpamayo: every logit is NaN")
		}
		return id, nil
	}
	id, err := smp.Next(logits)
	if err != nil {
		return 0, fmt.Errorf("alpamayo: sampling: %w", err)
	}
	return id, nil
}

// maskTrajectoryTokens removes <i0>… from the reasoning's choices, as the
// release's logits processor does.
func (m *Model) maskTrajectoryTokens(logits []float32) {
	lo, hi := m.Tokens.TrajFirst, min(m.Tokens.TrajLast, len(logits)-1)
	for i := lo; i <= hi; i++ {
		logits[i] = float32(math.Inf(-1))
	}
}

// reasoningText decodes the chain of thought: the generated tokens up to
// <|cot_end|>, <|traj_future_start|> or <|im_end|>.
func (m *Model) reasoningText(gen []int32) (string, error) {
	ids := make([]int, 0, len(gen))
	for _, id := range gen {
		if int(id) == m.Tokens.CoTEnd || int(id) == m.Tokens.FutureStart || int(id) == m.Tokens.EOS {
			break
		}
		ids = append(ids, int(id))
	}
	text, err := m.Tok.Decode(ids)
	if err != nil {
		return "", fmt.Errorf("alpamayo: decoding the reasoning: %w", err)
	}
	return text, nil
}

// check validates a request against the model.
func (m *Model) check(req *Request) error {
	want := m.Config.TokensPerHistoryTraj / 3
	if len(req.HistXYZ) != want || len(req.HistRot) != want {
		return fmt.Errorf("alpamayo: %w: ego history has %d positions and %d rotations, want %d poses", models.ErrBadInput, len(req.HistXYZ), len(req.HistRot), want)
	}
	for i := range req.HistXYZ {
		for _, v := range append(req.HistXYZ[i][:], req.HistRot[i][:]...) {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("alpamayo: %w: ego history pose %d is not finite", models.ErrBadInput, i)
			}
		}
	}
	if len(req.Images.Grids) == 0 {
		return fmt.Errorf("alpamayo: %w: no images", models.ErrBadInput)
	}
	if n := m.Expert.Waypoints() * diffusion.ActionDims; req.Noise != nil && len(req.Noise) != n {
		return fmt.Errorf("alpamayo: %w: noise has %d values, want %d", models.ErrBadInput, len(req.Noise), n)
	}
	return nil
}
