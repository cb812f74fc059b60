// Package engine turns observations (encoded camera frames and an ego
// history) into plans with a loaded Alpamayo-R1 model: frame decoding and
// preprocessing (package vision), the model (models/alpamayo), and the
// conversion to protocol messages. The NATS node and `vlanode infer` both
// run inferences through it.
package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/models/alpamayo"
	"vlanode/models/qwen3vl"
	"vlanode/msgs"
	"vlanode/node"
	"vlanode/vision"
)

// Cameras are the default cameras of both Alpamayo models, in the model's
// order (NVlabs/alpamayo helper.py): the camera-major order of an
// observation's frames without a camera order.
var Cameras = alpamayo.DefaultCameras

// Observation shape of Alpamayo-R1: 4 frames per camera at 10 Hz.
const (
	FramesPerCamera = 4
	FramePeriod     = 100 * time.Millisecond
)

// CameraPixels is the largest frame the default request budget allows for
// each frame of an observation: 2048 × 2048 pixels, room for the 1920×1080
// cameras Alpamayo-R1 was trained on and for the usual automotive sizes
// (1920×1208, 2048×1536, 2560×1440).
const CameraPixels = 2048 * 2048

// DefaultMaxRequestPixels is the default budget of one request's frames,
// the sum of their declared width × height: an observation's 16 frames
// (len(Cameras) × FramesPerCamera) of CameraPixels each, 67,108,864
// pixels. Frames over it are refused as bad input before any is decoded.
const DefaultMaxRequestPixels = 16 * CameraPixels

// Setting tunes an engine when it is made (NewAlpamayo).
type Setting func(*settings)

type settings struct {
	maxPixels int
	host      bool
	capacity  Capacity
}

// Capacity is what the model's plan holds at once: Batch requests of
// Samples trajectory samples each (residency.Workload's Batch and
// Samples). The zero value holds one request of one sample.
type Capacity struct {
	Batch, Samples int
	// Unlimited says the plan has no budget: any batch fits.
	Unlimited bool
}

// slots is the number of trajectory samples the plan holds in all.
func (c Capacity) slots() int { return max(c.Batch, 1) * max(c.Samples, 1) }

// PlanCapacity sets what the model's plan holds at once; batches larger
// than it are run in parts, and a request with more samples than it holds
// is refused (unsupported). Without a budget any batch fits.
func PlanCapacity(c Capacity) Setting { return func(s *settings) { s.capacity = c } }

// MaxRequestPixels sets the budget of one request's frames (see
// DefaultMaxRequestPixels); n ≤ 0 keeps the default.
func MaxRequestPixels(n int) Setting {
	return func(s *settings) {
		if n > 0 {
			s.maxPixels = n
		}
	}
}

// Alpamayo runs a loaded model. It is safe for concurrent use; inferences
// run one at a time.
type Alpamayo struct {
	model  *alpamayo.Model
	name   string
	proc   *vision.Processor
	dev    *vision.DeviceProcessor // the processor on the model's backend, when it preprocesses images
	budget uint64
	cap    Capacity

	mu    sync.Mutex
	batch vision.Batch
}

// Options tune an inference beyond the observation.
type Options struct {
	Greedy bool
	Seed   uint64
	Noise  []float32
	// Cameras name the frames' cameras in their camera-major order (nil:
	// Cameras). The frames go to the model in its order (by camera
	// index); each camera has the same number of frames.
	Cameras []string
	// NavText and Question are Alpamayo 1.5's navigation instruction and
	// VQA question (alpamayo.Request).
	NavText, Question string
	// Temperature and TopP sample the reasoning (0: the model's
	// defaults); NoiseTemperature scales the flow's initial noise and
	// GuidanceWeight sets classifier-free guidance (alpamayo.Request).
	Temperature, TopP, NoiseTemperature, GuidanceWeight float64
	// Samples is the number of trajectory samples (0: 1).
	Samples int
}

// PreprocessOnHost keeps the resize, normalization and patch layout of
// the frames on the host's cores even where the model's backend could run
// them (backend.ImagePrep: cuda), which it does by default.
func PreprocessOnHost(on bool) Setting { return func(s *settings) { s.host = on } }

// NewAlpamayo wraps a loaded model. name is the model name plans carry;
// budget the VRAM budget in bytes (0: none).
func NewAlpamayo(m *alpamayo.Model, name string, budget uint64, opts ...Setting) (*Alpamayo, error) {
	st := settings{maxPixels: DefaultMaxRequestPixels}
	for _, o := range opts {
		o(&st)
	}
	cfg, err := ProcessorConfig(m)
	if err != nil {
		return nil, err
	}
	proc, err := vision.NewProcessor(cfg, vision.WithMaxPixels(st.maxPixels))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Alpamayo{model: m, name: name, proc: proc, budget: budget, cap: st.capacity}
	if budget == 0 {
		e.cap.Unlimited = true // no budget: any batch fits
	}
	if _, ok := m.Backend().(backend.ImagePrep); ok && !st.host {
		if e.dev, err = proc.OnDevice(m.Backend()); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	return e, nil
}

// PreprocessesOnDevice reports whether the frames are resized, normalized
// and cut into patches on the model's backend.
func (e *Alpamayo) PreprocessesOnDevice() bool { return e.dev != nil }

// Close releases the memory the engine keeps for preprocessing on the
// device; the model is the caller's.
func (e *Alpamayo) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dev == nil {
		return nil
	}
	err := e.dev.Close()
	e.dev = nil
	return err
}

// ProcessorConfig is the image processor of a model: the VLM's patch and
// merge sizes with the checkpoint's min/max pixels.
func ProcessorConfig(m *alpamayo.Model) (vision.Config, error) {
	v := m.VLM.Config.Vision
	cfg := vision.AlpamayoConfig()
	cfg.PatchSize, cfg.TemporalPatchSize, cfg.MergeSize = v.PatchSize, v.TemporalPatchSize, v.SpatialMergeSize
	if p := m.Config.MinPixels; p != nil {
		cfg.MinPixels = *p
	}
	if p := m.Config.MaxPixels; p != nil {
		cfg.MaxPixels = *p
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("engine: image processor of the checkpoint: %w", err)
	}
	return cfg, nil
}

// Info describes the model to the node.
func (e *Alpamayo) Info() node.EngineInfo {
	return node.EngineInfo{
		Model:            e.name,
		Cameras:          Cameras,
		SupportedCameras: alpamayo.CameraNames(),
		FramesPerCamera:  FramesPerCamera,
		FramePeriod:      FramePeriod,
		EgoPoses:         e.model.Config.TokensPerHistoryTraj / 3,
		BudgetBytes:      e.budget,
	}
}

// CheckFrame checks a frame without decoding it (vision.CheckFrame: its
// declared size, encoding and data length, and a JPEG's or PNG's header
// against the declared size). The node calls it on every published frame
// (node.FrameChecker) and drops one that fails.
func (e *Alpamayo) CheckFrame(f *msgs.Frame) error { return vision.CheckFrame(f) }

var _ node.FrameChecker = (*Alpamayo)(nil)

// Infer answers the node's observation with a plan (or with its question,
// an answer). Without temperature it samples at the model's defaults;
// temperature 0 decodes greedily. The seed is the request's, or t0.
func (e *Alpamayo) Infer(ctx context.Context, obs *node.Observation) (*msgs.Plan, error) {
	opt, err := observationOptions(obs)
	if err != nil {
		return nil, err
	}
	res, pre, err := e.Run(ctx, obs.Frames, obs.EgoHistory, obs.MaxReasoningTokens, opt)
	if err != nil {
		return nil, err
	}
	return PlanOf(res, pre), nil
}

// observationOptions are the inference options of an observation's
// request keys.
func observationOptions(obs *node.Observation) (Options, error) {
	if obs.Prompt != "" {
		return Options{}, fmt.Errorf("%w: prompt: Alpamayo models take no free-form prompt; send nav_text (a navigation instruction) or question (VQA) to Alpamayo 1.5", node.ErrUnsupported)
	}
	opt := Options{
		Seed: uint64(obs.T0), Cameras: obs.CameraOrder,
		NavText: obs.NavText, Question: obs.Question,
		Samples: obs.NumTrajSamples,
	}
	if obs.Seed != nil {
		opt.Seed = *obs.Seed
	}
	if t := obs.Temperature; t != nil {
		opt.Greedy, opt.Temperature = *t == 0, *t
	}
	if p := obs.TopP; p != nil {
		opt.TopP = *p
	}
	return opt, nil
}

// Run decodes and preprocesses the frames, then runs the model. It returns
// the result and the preprocessing time: on the host's cores, or, when the
// device preprocesses (PreprocessesOnDevice), the host's decoding and the
// queueing of the device's work, which runs ahead of the vision encoder.
func (e *Alpamayo) Run(ctx context.Context, frames []msgs.Frame, ego []msgs.EgoPose, maxTokens int, opt Options) (*alpamayo.Result, time.Duration, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := ctx.Err(); err != nil { // cancelled (deadline, shutdown) while waiting for the lock
		return nil, 0, err
	}
	req, pre, release, err := e.request(ctx, frames, ego, maxTokens, opt, &e.batch)
	if err != nil {
		return nil, pre, err
	}
	defer release()
	res, err := e.model.Infer(ctx, req)
	if err != nil {
		return nil, pre, modelError(err)
	}
	return res, pre, nil
}

// modelError marks the model's errors for the node: bad input and
// unsupported requests as such.
func modelError(err error) error {
	switch {
	case errors.Is(err, models.ErrBadInput):
		return fmt.Errorf("%w: %w", node.ErrBadInput, err)
	case errors.Is(err, models.ErrUnsupported):
		return fmt.Errorf("%w: %w", node.ErrUnsupported, err)
	}
	return err
}

// request decodes and preprocesses the frames (into vb on the host) and
// builds the model's request. release frees what the preprocessing holds.
func (e *Alpamayo) request(ctx context.Context, frames []msgs.Frame, ego []msgs.EgoPose, maxTokens int, opt Options, vb *vision.Batch) (*alpamayo.Request, time.Duration, func(), error) {
	start := time.Now()
	if k := max(opt.Samples, 1); !e.cap.Unlimited && k > e.cap.slots() {
		return nil, 0, nil, fmt.Errorf("%w: num_traj_samples: %d samples; this node's plan holds %d (serve --samples, --max-batch)", node.ErrUnsupported, k, e.cap.slots())
	}
	frames, cameras, err := modelOrder(frames, opt.Cameras)
	if err != nil {
		return nil, 0, nil, err
	}
	req := &alpamayo.Request{
		Cameras:            cameras,
		NavText:            opt.NavText,
		Question:           opt.Question,
		MaxReasoningTokens: maxTokens,
		Greedy:             opt.Greedy,
		Temperature:        opt.Temperature,
		TopP:               opt.TopP,
		Seed:               opt.Seed,
		Noise:              opt.Noise,
		NoiseTemperature:   opt.NoiseTemperature,
		GuidanceWeight:     opt.GuidanceWeight,
		Samples:            opt.Samples,
	}
	grids, release, err := e.preprocess(ctx, frames, &req.Images, vb)
	if err != nil {
		if errors.Is(err, vision.ErrInvalidFrame) {
			return nil, 0, nil, fmt.Errorf("%w: %w", node.ErrBadInput, err)
		}
		return nil, 0, nil, err
	}
	pre := time.Since(start)
	for _, g := range grids {
		req.Images.Grids = append(req.Images.Grids, qwen3vl.Grid{T: g.T, H: g.H, W: g.W})
	}
	for _, p := range ego {
		var xyz [3]float32
		var rot [9]float32
		for i, v := range p.XYZ {
			xyz[i] = float32(v)
		}
		for i, v := range p.Rot {
			rot[i] = float32(v)
		}
		req.HistXYZ = append(req.HistXYZ, xyz)
		req.HistRot = append(req.HistRot, rot)
	}
	return req, pre, release, nil
}

// InferBatch answers the node's observations together (node.BatchEngine):
// each is preprocessed, and they run through alpamayo.Model.InferBatch in
// parts that the plan holds (Capacity: at most Batch requests, Samples
// trajectory samples each on average). Each plan is the one Infer gives
// the observation alone (see alpamayo.Model.InferBatch for the
// tolerances).
func (e *Alpamayo) InferBatch(ctx context.Context, obs []*node.Observation) []node.Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]node.Result, len(obs))
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	type prepared struct {
		at  int
		req *alpamayo.Request
		pre time.Duration
	}
	var ready []prepared
	for i, o := range obs {
		opt, err := observationOptions(o)
		if err != nil {
			out[i].Err = err
			continue
		}
		req, pre, release, err := e.request(ctx, o.Frames, o.EgoHistory, o.MaxReasoningTokens, opt, &vision.Batch{})
		if err != nil {
			out[i].Err = err
			continue
		}
		defer release()
		ready = append(ready, prepared{at: i, req: req, pre: pre})
	}
	for len(ready) > 0 {
		n, samples := 0, 0
		for n < len(ready) && (e.cap.Unlimited || n < max(e.cap.Batch, 1) && samples+max(ready[n].req.Samples, 1) <= e.cap.slots()) {
			samples += max(ready[n].req.Samples, 1)
			n++
		}
		n = max(n, 1) // a request alone always fits (request checked its samples)
		part := ready[:n]
		ready = ready[n:]
		reqs := make([]*alpamayo.Request, len(part))
		for k, p := range part {
			reqs[k] = p.req
		}
		res, errs := e.model.InferBatch(ctx, reqs)
		for k, p := range part {
			if errs[k] != nil {
				out[p.at].Err = modelError(errs[k])
				continue
			}
			out[p.at].Plan = PlanOf(res[k], p.pre)
		}
	}
	return out
}

var _ node.BatchEngine = (*Alpamayo)(nil)

// preprocess turns frames into im's pixel values, on the device or in
// vb, and returns their grids and a function that frees what the
// device path allocated (also called by the vision embedding, through
// im.Done, once it has read them).
func (e *Alpamayo) preprocess(ctx context.Context, frames []msgs.Frame, im *qwen3vl.Images, vb *vision.Batch) ([]vision.Grid, func(), error) {
	if e.dev == nil {
		if err := e.proc.ProcessFrames(ctx, vb, frames); err != nil {
			return nil, nil, err
		}
		im.Pixels = vb.PixelValues
		return vb.Grids, func() {}, nil
	}
	db, err := e.dev.ProcessFrames(ctx, frames)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	be := e.model.Backend()
	release := func() { once.Do(func() { be.Free(db.PixelValues) }) }
	im.Device, im.Done = db.PixelValues, release
	return db.Grids, release, nil
}

// modelOrder checks the frames against their cameras (names; nil:
// Cameras): FramesPerCamera frames of each, camera-major, as NVIDIA's
// loader gives them. It returns them in the model's order, by camera
// index, with the cameras' indices in that order.
func modelOrder(frames []msgs.Frame, names []string) ([]msgs.Frame, []int, error) {
	if names == nil {
		names = Cameras
	}
	order, indices, err := alpamayo.CameraOrder(names)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: %w: %w", node.ErrBadInput, err)
	}
	k := FramesPerCamera
	if len(frames) != len(names)*k {
		return nil, nil, fmt.Errorf("engine: %w: got %d images, want %d: %d frames of each of the cameras %s, camera-major, oldest first",
			node.ErrBadInput, len(frames), len(names)*k, k, strings.Join(names, ", "))
	}
	out := make([]msgs.Frame, 0, len(frames))
	for _, i := range order {
		out = append(out, frames[i*k:(i+1)*k]...)
	}
	return out, indices, nil
}

// PlanOf converts a result to the protocol's Plan (the node fills id, node,
// stamp, model and total time).
func PlanOf(res *alpamayo.Result, preprocess time.Duration) *msgs.Plan {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p := &msgs.Plan{
		Reasoning:     res.Reasoning,
		Trajectory:    msgs.Trajectory{DT: 0.1},
		Answer:        res.Answer,
		VRAMPeakBytes: uint64(max(res.VRAMPeakBytes, 0)),
		TimingMs: msgs.Timing{
			Preprocess: ms(preprocess),
			Vision:     ms(res.Timing.Vision),
			Prefill:    ms(res.Timing.Prefill),
			Decode:     ms(res.Timing.Decode),
			Diffusion:  ms(res.Timing.Diffusion),
		},
	}
	p.Trajectory.XYZ, p.Trajectory.Rot, p.Actions = wireTrajectory(res.XYZ, res.Rot, res.Actions)
	for _, s := range res.Samples {
		ts := msgs.TrajSample{Trajectory: msgs.Trajectory{DT: p.Trajectory.DT}}
		ts.Trajectory.XYZ, ts.Trajectory.Rot, ts.Actions = wireTrajectory(s.XYZ, s.Rot, s.Actions)
		p.Samples = append(p.Samples, ts)
	}
	return p
}

// wireTrajectory converts a sample's waypoints and actions to the
// protocol's float64 arrays.
func wireTrajectory(xyz [][3]float32, rot [][9]float32, actions [][2]float32) ([][3]float64, [][9]float64, [][2]float64) {
	ox, or, oa := make([][3]float64, len(xyz)), make([][9]float64, len(rot)), make([][2]float64, len(actions))
	for i, v := range xyz {
		ox[i] = [3]float64{float64(v[0]), float64(v[1]), float64(v[2])}
	}
	for i, r := range rot {
		for j := range r {
			or[i][j] = float64(r[j])
		}
	}
	for i, a := range actions {
		oa[i] = [2]float64{float64(a[0]), float64(a[1])}
	}
	return ox, or, oa
}
