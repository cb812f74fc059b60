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
	"sync"
	"time"

	"vlanode/models"
	"vlanode/models/alpamayo"
	"vlanode/models/qwen3vl"
	"vlanode/msgs"
	"vlanode/node"
	"vlanode/vision"
)

// Cameras are Alpamayo-R1's cameras in the model's order (NVlabs/alpamayo
// helper.py): the camera-major order of an observation's frames.
var Cameras = []string{"cross_left_120fov", "front_wide_120fov", "cross_right_120fov", "front_tele_30fov"}

// Observation shape of Alpamayo-R1: 4 frames per camera at 10 Hz.
const (
	FramesPerCamera = 4
	FramePeriod     = 100 * time.Millisecond
)

// Alpamayo runs a loaded model. It is safe for concurrent use; inferences
// run one at a time.
type Alpamayo struct {
	model  *alpamayo.Model
	name   string
	proc   *vision.Processor
	budget uint64

	mu    sync.Mutex
	batch vision.Batch
}

// Options tune an inference beyond the observation.
type Options struct {
	Greedy bool
	Seed   uint64
	Noise  []float32
}

// NewAlpamayo wraps a loaded model. name is the model name plans carry;
// budget the VRAM budget in bytes (0: none).
func NewAlpamayo(m *alpamayo.Model, name string, budget uint64) (*Alpamayo, error) {
	cfg, err := ProcessorConfig(m)
	if err != nil {
		return nil, err
	}
	proc, err := vision.NewProcessor(cfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return &Alpamayo{model: m, name: name, proc: proc, budget: budget}, nil
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
		Model:           e.name,
		Cameras:         Cameras,
		FramesPerCamera: FramesPerCamera,
		FramePeriod:     FramePeriod,
		EgoPoses:        e.model.Config.TokensPerHistoryTraj / 3,
		BudgetBytes:     e.budget,
	}
}

// Infer answers the node's observation with a plan.
func (e *Alpamayo) Infer(ctx context.Context, obs *node.Observation) (*msgs.Plan, error) {
	res, pre, err := e.Run(ctx, obs.Frames, obs.EgoHistory, obs.MaxReasoningTokens, Options{Seed: uint64(obs.T0)})
	if err != nil {
		return nil, err
	}
	return PlanOf(res, pre), nil
}

// Run decodes and preprocesses the frames, then runs the model. It returns
// the result and the preprocessing time.
func (e *Alpamayo) Run(ctx context.Context, frames []msgs.Frame, ego []msgs.EgoPose, maxTokens int, opt Options) (*alpamayo.Result, time.Duration, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := ctx.Err(); err != nil { // cancelled (deadline, shutdown) while waiting for the lock
		return nil, 0, err
	}
	start := time.Now()
	if err := e.proc.ProcessFrames(&e.batch, frames); err != nil {
		if errors.Is(err, vision.ErrInvalidFrame) {
			return nil, 0, fmt.Errorf("%w: %w", node.ErrBadInput, err)
		}
		if errors.Is(err, vision.ErrNoOpenCV) {
			return nil, 0, fmt.Errorf("%w: %w", node.ErrUnsupported, err)
		}
		return nil, 0, err
	}
	pre := time.Since(start)
	req := &alpamayo.Request{
		Images:             qwen3vl.Images{Pixels: e.batch.PixelValues},
		MaxReasoningTokens: maxTokens,
		Greedy:             opt.Greedy,
		Seed:               opt.Seed,
		Noise:              opt.Noise,
	}
	for _, g := range e.batch.Grids {
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
	res, err := e.model.Infer(ctx, req)
	if err != nil {
		if errors.Is(err, models.ErrBadInput) {
			return nil, pre, fmt.Errorf("%w: %w", node.ErrBadInput, err)
		}
		return nil, pre, err
	}
	return res, pre, nil
}

// PlanOf converts a result to the protocol's Plan (the node fills id, node,
// stamp, model and total time).
func PlanOf(res *alpamayo.Result, preprocess time.Duration) *msgs.Plan {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p := &msgs.Plan{
		Reasoning: res.Reasoning,
		Trajectory: msgs.Trajectory{
			DT:  0.1,
			XYZ: make([][3]float64, len(res.XYZ)),
			Rot: make([][9]float64, len(res.Rot)),
		},
		Actions: make([][2]float64, len(res.Actions)),
		TimingMs: msgs.Timing{
			Preprocess: ms(preprocess),
			Vision:     ms(res.Timing.Vision),
			Prefill:    ms(res.Timing.Prefill),
			Decode:     ms(res.Timing.Decode),
			Diffusion:  ms(res.Timing.Diffusion),
		},
	}
	for i, v := range res.XYZ {
		p.Trajectory.XYZ[i] = [3]float64{float64(v[0]), float64(v[1]), float64(v[2])}
	}
	for i, r := range res.Rot {
		for j := range r {
			p.Trajectory.Rot[i][j] = float64(r[j])
		}
	}
	for i, a := range res.Actions {
		p.Actions[i] = [2]float64{float64(a[0]), float64(a[1])}
	}
	return p
}
