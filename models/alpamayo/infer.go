package alpamayo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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
	// Cameras are the camera indices (Camera.Index) of the images' cameras
	// in their order: each camera has len(Images.Grids)/len(Cameras)
	// images. Alpamayo 1.5's prompt then names each camera before its
	// first image and each frame ("Front camera: frame 0 …", as
	// NVlabs/alpamayo1.5 helper.py writes it when given camera indices);
	// Alpamayo-R1's prompt has no such names. Nil: no names.
	Cameras []int
	// HistXYZ and HistRot are the ego poses in the t0 frame at 10 Hz,
	// oldest first, the last at t0 (16 for Alpamayo-R1).
	HistXYZ [][3]float32
	HistRot [][9]float32
	// NavText (Alpamayo 1.5) is a navigation instruction ("Turn left in
	// 30m"), written between <|route_start|> and <|route_end|> after the
	// history; empty: no route section.
	NavText string
	// Question (Alpamayo 1.5) asks a question about the scene instead of
	// planning (VQA): the result has the Answer and no trajectory, and the
	// ego history is not used.
	Question string
	// MaxReasoningTokens bounds the reasoning decode, or the answer's (0:
	// the config's tokens_per_future_traj).
	MaxReasoningTokens int
	// Greedy decodes the reasoning by argmax instead of sampling with
	// Temperature and TopP (0 means the release's 0.6 and 0.98).
	Greedy      bool
	Temperature float64
	TopP        float64
	// Seed makes sampling and the flow-matching noise reproducible.
	Seed uint64
	// Noise, when set, is the flow matching's initial state of every
	// sample, [Samples][64][2], before NoiseTemperature scales it (the
	// source's torch.randn draw).
	Noise []float32
	// Samples is the number of trajectory samples (the release's
	// num_traj_samples); 0 means 1. The samples share the prompt's
	// prefill, the reasoning and its cache, and run through the expert
	// together, each from its own noise: sample 0's is a lone sample's
	// (the first Waypoints·2 values of the seed's noise), so that sample 0
	// is the plan of Samples 1 (see diffusion.Expert.SampleBatch for the
	// rounding). At most MaxSamples.
	Samples int
	// NoiseTemperature scales the flow's initial noise (Alpamayo 1.5's
	// sample(temperature=…)); 0 means 1.
	NoiseTemperature float64
	// TeacherForced, with Greedy, feeds these reasoning tokens in place of
	// the picked ones (argmax after the last) and keeps every step's
	// logits in Result.StepLogits: what a check compares between two
	// plans at the same inputs (vlanode bench --margins), not a served
	// option. The steps then return their logits to the host.
	TeacherForced []int32
	// GuidanceWeight turns on classifier-free guidance (Alpamayo 1.5's
	// sample_trajectories_from_data_with_vlm_rollout_cfg_nav): with
	// NavText, each Euler step mixes the expert's velocity over the cache
	// with the navigation text and over a cache without it as (1 − w)·
	// unguided + w·guided. 0 takes the config's diffusion_cfg
	// (inference_guidance_weight where use_classifier_free_guidance is
	// true, none otherwise); 1 is no guidance.
	GuidanceWeight float64
}

// MaxSamples bounds Request.Samples: each sample adds Waypoints rows to
// every expert pass and to the KV cache.
const MaxSamples = 16

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

// Result is the model's plan, or with Request.Question its answer.
type Result struct {
	Reasoning    string
	ReasoningIDs []int32
	// Answer is the answer to Request.Question: the generated text up to
	// <|answer_end|> (or the end of the generation), trimmed, as
	// extract_text_tokens reads it; AnswerIDs are the generated tokens.
	Answer    string
	AnswerIDs []int32
	// GuidanceWeight is the classifier-free guidance weight the diffusion
	// used; 0 when it ran without guidance.
	GuidanceWeight float64
	// Actions are the denormalised controls, (acceleration m/s², curvature
	// 1/m) per waypoint; Normalized are the sampled values before that.
	Actions    [][2]float32
	Normalized []float32
	XYZ        [][3]float32
	Rot        [][9]float32
	// Samples are the other trajectory samples of Request.Samples (1 to
	// K−1), each as the fields above hold sample 0.
	Samples []Trajectory
	// PromptTokens is the prompt length, CachedTokens L (what the expert
	// attended to). PromptIDs is the prompt.
	PromptTokens, CachedTokens int
	PromptIDs                  []int32
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
	// StepLogits are the reasoning steps' logits (masked as the picks saw
	// them), one row a step, with Request.TeacherForced; nil otherwise.
	StepLogits [][]float32
	// VRAMPeakBytes is the most device memory in use at once during the
	// inference (weights, caches, activations and workspaces, as the
	// backend counts them: backend.MemoryPeak); 0 on a backend without
	// device memory (cpu).
	VRAMPeakBytes int64
}

// Trajectory is one trajectory sample: its actions, as Result holds
// sample 0's.
type Trajectory struct {
	Actions    [][2]float32
	Normalized []float32
	XYZ        [][3]float32
	Rot        [][9]float32
}

// samples is the request's number of trajectory samples.
func (req *Request) samples() int { return max(req.Samples, 1) }

// Infer runs the whole pipeline for one request: vision, prompt, prefill,
// reasoning decode, diffusion, trajectory (or with a question: vision,
// prompt, prefill, the answer's decode).
func (m *Model) Infer(ctx context.Context, req *Request) (*Result, error) {
	start := time.Now()
	if err := m.check(req); err != nil {
		return nil, err
	}
	weight := m.guidance(req)
	res := &Result{GuidanceWeight: weight}
	if mp, ok := m.be.(backend.MemoryPeak); ok {
		mp.ResetPeak()
		defer func() { res.VRAMPeakBytes = mp.PeakBytes() }()
	}
	maxNew := req.MaxReasoningTokens
	if maxNew <= 0 {
		maxNew = m.Config.TokensPerFutureTraj
	}
	var run *layering.Runner
	if lay := m.layered; lay != nil && lay.Runs() {
		sched := scheduleSpec{decodes: maxNew, steps: m.Expert.Config.Steps, answer: req.Question != "", guided: weight != 0, samples: req.samples()}
		var err error
		if run, err = lay.Start(m.schedule(sched)); err != nil {
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
		defer lay.End() // after an error: let queued copies finish
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

	prompt, err := m.prompt(req)
	if err != nil {
		return nil, err
	}
	res.PromptTokens, res.PromptIDs = len(prompt), prompt

	sess, err := m.VLM.NewSession(len(prompt) + maxNew + req.samples()*m.Expert.Waypoints())
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	defer sess.Close()

	t0 := time.Now()
	logits, err := sess.Prefill(ctx, qwen3vl.Prompt{IDs: prompt, Features: feat}, false)
	if err != nil {
		return nil, fmt.Errorf("alpamayo: prefill: %w", err)
	}
	// Classifier-free guidance's cache without the navigation text: its
	// prompt through the prefill now, while the image features are there;
	// the generated tokens follow after the decode.
	var unguided *qwen3vl.Session
	var unguidedLen int
	if weight != 0 {
		up, err := m.withoutRoute(prompt)
		if err != nil {
			return nil, err
		}
		if unguided, err = m.VLM.NewSession(len(up) + maxNew + m.Expert.Waypoints()); err != nil {
			return nil, fmt.Errorf("alpamayo: the unguided cache: %w", err)
		}
		defer unguided.Close()
		if _, err := unguided.Prefill(ctx, qwen3vl.Prompt{IDs: up, Features: feat}, false); err != nil {
			return nil, fmt.Errorf("alpamayo: unguided prefill: %w", err)
		}
		unguidedLen = len(up)
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
	feat.Free(m.be) // the prefills were their last readers: the decode's homes take their room

	t0 = time.Now()
	dec := m.reasoning()
	if req.Question != "" {
		dec = m.answering()
	}
	var keep *[][]float32
	if req.TeacherForced != nil {
		keep = &res.StepLogits
	}
	gen, offset, err := m.reason(ctx, sess, logits, req, maxNew, dec, keep)
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
	res.CachedTokens = sess.Len()
	if req.Question != "" {
		res.AnswerIDs = gen
		if res.Answer, err = m.answerText(gen); err != nil {
			return nil, err
		}
		if err := errors.Join(graphErrs...); err != nil {
			res.GraphError = err.Error()
		}
		if run != nil {
			if res.Layers, err = run.Finish(); err != nil {
				return nil, fmt.Errorf("alpamayo: %w", err)
			}
		}
		res.Timing.Total = time.Since(start)
		return res, nil
	}
	res.ReasoningIDs = gen
	if res.Reasoning, err = m.reasoningText(gen); err != nil {
		return nil, err
	}

	t0 = time.Now()
	prefix := m.prefixOf(sess, len(prompt)+offset)
	var acts [][]float32
	if unguided != nil {
		// The unguided cache gets every generated token after its prompt,
		// the last one too (the source feeds the whole generation): the
		// same reasoning, without the navigation text. Past a
		// <|traj_future_start|> the offset hides nothing fed; without
		// one the expert sees the whole generation there.
		if len(gen) > 0 {
			if _, err := unguided.Decode(ctx, gen, false); err != nil {
				return nil, fmt.Errorf("alpamayo: the unguided cache: %w", err)
			}
		}
		acts, err = m.guidedSamples(ctx, req, prefix, m.prefixOf(unguided, unguidedLen+offset), weight)
	} else {
		var draws [][][]float32
		draws, err = m.Expert.SampleBatch(ctx, []diffusion.Draws{m.draws(req, prefix)}, 0)
		if err == nil {
			acts = draws[0]
		}
	}
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
	if err := m.setTrajectories(res, req, acts); err != nil {
		return nil, err
	}
	res.Timing.Total = time.Since(start)
	return res, nil
}

// draws is the request's trajectory samples over prefix, for
// diffusion.Expert.SampleBatch.
func (m *Model) draws(req *Request, prefix diffusion.Prefix) diffusion.Draws {
	return diffusion.Draws{Prefix: prefix, Samples: req.samples(), Noise: req.Noise, Seed: req.Seed, Temperature: req.NoiseTemperature}
}

// guidedSamples runs classifier-free guidance's flow for each of the
// request's samples, one after the other (each Euler step runs the expert
// over both caches), sample j from the j-th draw of the noise.
func (m *Model) guidedSamples(ctx context.Context, req *Request, prefix, unguided diffusion.Prefix, weight float64) ([][]float32, error) {
	k := req.samples()
	prefixes, ung := make([]diffusion.Prefix, k), make([]diffusion.Prefix, k)
	for i := range k {
		prefixes[i], ung[i] = prefix, unguided
	}
	opt := diffusion.SampleOptions{Noise: req.Noise, Seed: req.Seed, Temperature: req.NoiseTemperature, Unguided: ung, GuidanceWeight: weight}
	return m.Expert.Sample(ctx, prefixes, opt)
}

// setTrajectories denormalizes each sample's actions and integrates them
// into its trajectory: sample 0 into res's fields, the others into
// res.Samples.
func (m *Model) setTrajectories(res *Result, req *Request, acts [][]float32) error {
	for i, a := range acts {
		tr, err := m.trajectory(req, a)
		if err != nil {
			return err
		}
		if i == 0 {
			res.Actions, res.Normalized, res.XYZ, res.Rot = tr.Actions, tr.Normalized, tr.XYZ, tr.Rot
			continue
		}
		res.Samples = append(res.Samples, tr)
	}
	return nil
}

// trajectory is one sample's normalised actions made into controls and a
// trajectory from the request's ego history.
func (m *Model) trajectory(req *Request, acts []float32) (Trajectory, error) {
	tr, err := m.Expert.ActionsToTrajectory(acts, req.HistXYZ, req.HistRot)
	if err != nil {
		return Trajectory{}, fmt.Errorf("alpamayo: %w", err)
	}
	accel, kappa, err := m.Expert.Space.Denormalize(acts)
	if err != nil {
		return Trajectory{}, fmt.Errorf("alpamayo: %w", err)
	}
	out := Trajectory{Normalized: acts, Actions: make([][2]float32, len(accel)), XYZ: tr.XYZ, Rot: tr.Rot}
	for i := range accel {
		out.Actions[i] = [2]float32{accel[i], kappa[i]}
	}
	return out, nil
}

// prompt builds the request's prompt: the history tokens of its ego
// history (none for a question) in the chat template around its images.
func (m *Model) prompt(req *Request) ([]int32, error) {
	spec := promptSpec{cameras: req.Cameras, question: req.Question, nav: req.NavText, hasNav: req.NavText != ""}
	if !m.Config.Is15() {
		spec.cameras = nil // Alpamayo-R1's prompt names no cameras
	}
	merge := m.VLM.Config.Vision.SpatialMergeSize
	for _, g := range req.Images.Grids {
		spec.perImage = append(spec.perImage, g.Patches()/(merge*merge))
	}
	if req.Question == "" {
		var err error
		if spec.history, err = m.Expert.HistoryTokens(req.HistXYZ, int32(m.Config.HistTokenStartIdx())); err != nil {
			return nil, fmt.Errorf("alpamayo: %w", err)
		}
	}
	return m.buildPrompt(spec)
}

// prefixOf is the expert's view of a session after the reasoning: its
// cache, and offset, the index just past the first <|traj_future_start|>
// (in prompt + generated tokens).
func (m *Model) prefixOf(sess *qwen3vl.Session, offset int) diffusion.Prefix {
	p := diffusion.Prefix{Len: sess.Len(), Offset: offset, RopeDelta: sess.RopeDelta()}
	for l := 0; l < m.VLM.Config.Text.NumHiddenLayers; l++ {
		k, v := sess.Cache(l)
		p.Cache = append(p.Cache, diffusion.KV{K: k, V: v})
	}
	return p
}

// guidance is the classifier-free guidance weight of a request, 0 for
// none: the request's, or the config's where it turns guidance on; only
// with navigation text (the unguided cache is the one without it), and
// never at weight 1, where the mix is the guided velocity alone.
func (m *Model) guidance(req *Request) float64 {
	if req.NavText == "" || req.Question != "" {
		return 0
	}
	w := req.GuidanceWeight
	if w == 0 {
		d := m.Config.DiffusionCfg
		if d == nil || !d.UseClassifierFreeGuidance {
			return 0
		}
		w = d.InferenceGuidanceWeight
	}
	if w == 1 {
		return 0
	}
	return w
}

// decoding says how a decode picks and where it stops.
type decoding struct {
	// maskLo, maskHi: logits [maskLo, maskHi] are taken as -Inf (the
	// trajectory tokens in the reasoning); maskLo > maskHi masks nothing.
	maskLo, maskHi int
	// ends stop the decode and are not fed back (<|im_end|>).
	ends []int
	// fedEnd stops the decode and is fed back (<|traj_future_start|>,
	// which the expert must see); -1 for none.
	fedEnd int
}

// reasoning is the chain of thought's decoding (the release's rollout):
// trajectory tokens masked, to <|traj_future_start|> or <|im_end|>.
func (m *Model) reasoning() decoding {
	return decoding{maskLo: m.Tokens.TrajFirst, maskHi: m.Tokens.TrajLast, ends: []int{m.Tokens.EOS}, fedEnd: m.Tokens.FutureStart}
}

// answering is a VQA answer's decoding (Alpamayo 1.5's generate_text): no
// mask, to <|im_end|>, or to <|answer_end|>, after which extract_text_tokens
// reads nothing more.
func (m *Model) answering() decoding {
	return decoding{maskLo: 0, maskHi: -1, ends: []int{m.Tokens.EOS, m.Tokens.AnswerEnd}, fedEnd: -1}
}

func (d decoding) isEnd(id int) bool { return slices.Contains(d.ends, id) }

// answerText decodes an answer: the generated text up to <|answer_end|>,
// <|im_end|> or the end, with surrounding whitespace trimmed.
func (m *Model) answerText(gen []int32) (string, error) {
	ids := make([]int, 0, len(gen))
	for _, id := range gen {
		if int(id) == m.Tokens.AnswerEnd || int(id) == m.Tokens.EOS {
			break
		}
		ids = append(ids, int(id))
	}
	text, err := m.Tok.Decode(ids)
	if err != nil {
		return "", fmt.Errorf("alpamayo: decoding the answer: %w", err)
	}
	return strings.TrimSpace(text), nil
}

// reason decodes after the prompt as dec says (the chain of thought, or an
// answer). It returns the sampled tokens and the offset (within them) just
// past dec's fed end token (the first <|traj_future_start|>), or len(gen)
// when none came. As the release's generate does, the last sampled token
// is never fed back, except the fed end token, which the expert must see:
// generation stops one step after it.
//
// With keep (and req.TeacherForced) each step's logits are appended to
// *keep, and the step feeds req.TeacherForced's token for it while there
// is one.
func (m *Model) reason(ctx context.Context, sess *qwen3vl.Session, logits []float32, req *Request, maxNew int, dec decoding, keep *[][]float32) ([]int32, int, error) {
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
	forced := keep != nil
	if smp == nil && logits != nil && maxNew > 0 && !forced {
		gr, err := sess.StartGreedy(dec.maskLo, dec.maskHi)
		if err != nil {
			return nil, 0, fmt.Errorf("alpamayo: %w", err)
		}
		if gr != nil {
			gen, err := m.reasonFed(ctx, gr, logits, maxNew, dec)
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
			var err error
			m.onHost(func() {
				maskLogits(logits, dec.maskLo, dec.maskHi)
				next, err = m.pick(logits, smp)
			})
			if err != nil {
				return nil, 0, err
			}
			if forced {
				*keep = append(*keep, slices.Clone(logits))
				if i := len(gen); i < len(req.TeacherForced) {
					next = int(req.TeacherForced[i])
				}
			}
		} else if next < 0 {
			return nil, 0, errors.New("alpamayo: every logit is NaN")
		}
		gen = append(gen, int32(next))
		if dec.isEnd(next) {
			return gen, len(gen), nil
		}
		if len(gen) == maxNew && next != dec.fedEnd {
			break // the last sampled token is not fed back
		}
		var err error
		if smp == nil && next != dec.fedEnd && !forced {
			// The next greedy token is picked where the logits are (on
			// the GPU: one index comes back, not the vocabulary's logits),
			// with dec's mask as maskLogits applies it.
			logits = nil
			next, err = sess.DecodeGreedy(ctx, []int32{int32(next)}, dec.maskLo, dec.maskHi)
		} else {
			logits, err = sess.Decode(ctx, []int32{int32(next)}, false)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("alpamayo: decode step %d: %w", len(gen), err)
		}
		if gen[len(gen)-1] == int32(dec.fedEnd) {
			return gen, len(gen), nil
		}
	}
	return gen, len(gen), nil
}

// reasonFed is reason's greedy loop on steps fed on the device
// (qwen3vl.Greedy): the step that feeds a token the host has not read yet
// is queued before the host reads it, wherever that token is fed whatever
// it is (all but an end token, whose speculative step is dropped), so that
// the device runs step after step while the host reads their tokens. The
// tokens and the cache are reason's, bit for bit.
func (m *Model) reasonFed(ctx context.Context, gr *qwen3vl.Greedy, logits []float32, maxNew int, dec decoding) ([]int32, error) {
	maskLogits(logits, dec.maskLo, dec.maskHi)
	first, err := m.pick(logits, nil)
	if err != nil {
		return nil, err
	}
	gen := []int32{int32(first)}
	fs := dec.fedEnd
	if dec.isEnd(first) || len(gen) == maxNew && first != fs {
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
		// fed too unless it is an end token, or the last token allowed
		// (then only the fed end token is).
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
		case dec.isEnd(next):
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

// onHost runs fn, work on the host alone (no backend), beside a batch's
// other members when one runs (Model.hostWork).
func (m *Model) onHost(fn func()) {
	if m.hostWork != nil {
		m.hostWork(fn)
		return
	}
	fn()
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

// maskLogits takes logits [lo, hi] out of the choices (the trajectory
// tokens <i0>… in the reasoning, as the release's logits processor does).
func maskLogits(logits []float32, lo, hi int) {
	hi = min(hi, len(logits)-1)
	for i := max(lo, 0); i <= hi; i++ {
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
	if err := m.checkOptions(req); err != nil {
		return err
	}
	want := m.Config.TokensPerHistoryTraj / 3
	if req.Question != "" {
		want = len(req.HistXYZ) // a question does not use the history
	}
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
	if req.Samples < 0 || req.Samples > MaxSamples {
		return fmt.Errorf("alpamayo: %w: %d trajectory samples (want 1 to %d)", models.ErrBadInput, req.Samples, MaxSamples)
	}
	if n := req.samples() * m.Expert.Waypoints() * diffusion.ActionDims; req.Noise != nil && len(req.Noise) != n {
		return fmt.Errorf("alpamayo: %w: noise has %d values, want %d (%d samples)", models.ErrBadInput, len(req.Noise), n, req.samples())
	}
	if req.TeacherForced != nil && !req.Greedy {
		return fmt.Errorf("alpamayo: %w: teacher-forced reasoning needs greedy decoding", models.ErrBadInput)
	}
	for i, id := range req.TeacherForced {
		if id < 0 || int(id) >= m.VLM.Config.Text.VocabSize {
			return fmt.Errorf("alpamayo: %w: teacher-forced token %d is %d, outside the vocabulary of %d", models.ErrBadInput, i, id, m.VLM.Config.Text.VocabSize)
		}
	}
	if c := len(req.Cameras); c > 0 && len(req.Images.Grids)%c != 0 {
		return fmt.Errorf("alpamayo: %w: %d images for %d cameras (want the same number of frames of each camera)", models.ErrBadInput, len(req.Images.Grids), c)
	}
	return nil
}

// checkOptions validates the request's options against the model: what
// only Alpamayo 1.5 takes, and the sampling values.
func (m *Model) checkOptions(req *Request) error {
	if !m.Config.Is15() {
		if req.NavText != "" {
			return fmt.Errorf("alpamayo: %w: navigation text is Alpamayo 1.5's input; %s has no route tokens in its prompt", models.ErrUnsupported, m.Config.ModelType)
		}
		if req.Question != "" {
			return fmt.Errorf("alpamayo: %w: questions (VQA) are Alpamayo 1.5's; %s only plans", models.ErrUnsupported, m.Config.ModelType)
		}
	}
	switch {
	case strings.TrimSpace(req.Question) == "" && req.Question != "":
		return fmt.Errorf("alpamayo: %w: the question is blank", models.ErrBadInput)
	case req.Question != "" && req.NavText != "":
		return fmt.Errorf("alpamayo: %w: navigation text is for planning; a question's prompt has no route", models.ErrBadInput)
	case req.Temperature < 0 || math.IsNaN(req.Temperature) || math.IsInf(req.Temperature, 0):
		return fmt.Errorf("alpamayo: %w: temperature %g (want a finite value >= 0)", models.ErrBadInput, req.Temperature)
	case req.TopP < 0 || req.TopP > 1 || math.IsNaN(req.TopP):
		return fmt.Errorf("alpamayo: %w: top_p %g (want 0 < top_p <= 1, or 0 for the default)", models.ErrBadInput, req.TopP)
	case req.NoiseTemperature < 0 || math.IsNaN(req.NoiseTemperature) || math.IsInf(req.NoiseTemperature, 0):
		return fmt.Errorf("alpamayo: %w: noise temperature %g (want a finite value >= 0)", models.ErrBadInput, req.NoiseTemperature)
	case req.GuidanceWeight < 0 || math.IsNaN(req.GuidanceWeight) || math.IsInf(req.GuidanceWeight, 0):
		return fmt.Errorf("alpamayo: %w: guidance weight %g (want a finite value >= 0)", models.ErrBadInput, req.GuidanceWeight)
	}
	seen := map[int]bool{}
	for _, c := range req.Cameras {
		if seen[c] || c < 0 {
			return fmt.Errorf("alpamayo: %w: camera index %d given twice or negative", models.ErrBadInput, c)
		}
		seen[c] = true
	}
	return nil
}
