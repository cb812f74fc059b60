package diffusion

import (
	"context"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/diffusion/actionspace"
	"vlanode/models"
)

// SampleOptions configures Expert.Sample.
type SampleOptions struct {
	// Steps overrides the config's number of Euler steps when positive.
	Steps int
	// Noise is the initial state of every sample, [samples][Waypoints][2]
	// row-major (the source's torch.randn draw). Nil draws it from
	// GaussianNoise(Seed, …).
	Noise []float32
	// Seed seeds the Gaussian noise when Noise is nil.
	Seed uint64
	// Temperature scales the initial noise (sample()'s temperature in
	// NVlabs/alpamayo1.5: x = randn·temperature; below 1 samples are
	// steadier and less diverse). 0 means 1.
	Temperature float64
	// Unguided, when set, are the prefixes without the condition, one per
	// prefix (Alpamayo 1.5's cache without the navigation text):
	// classifier-free guidance takes each Euler step along
	// (1 − GuidanceWeight)·v_unguided + GuidanceWeight·v_guided
	// (FlowMatching._guided_v).
	Unguided []Prefix
	// GuidanceWeight is the guidance's weight (inference_guidance_weight):
	// 0 only the unguided field, 1 only the guided one, above 1 more
	// guidance.
	GuidanceWeight float64
}

// Sample runs flow matching for one sample per prefix (each sample has its
// own reasoning, hence its own VLM cache) and returns each sample's
// normalised actions [Waypoints][2]: Euler steps from noise at t = 0 to
// t = 1 over the expert's velocity field.
func (e *Expert) Sample(ctx context.Context, prefixes []Prefix, opt SampleOptions) ([][]float32, error) {
	per := e.Waypoints() * ActionDims
	noise := opt.Noise
	if noise == nil {
		noise = GaussianNoise(opt.Seed, len(prefixes)*per)
	}
	if len(noise) != len(prefixes)*per {
		return nil, fmt.Errorf("diffusion: noise of %d values for %d samples of %d: %w", len(noise), len(prefixes), per, models.ErrBadInput)
	}
	if opt.Unguided != nil && len(opt.Unguided) != len(prefixes) {
		return nil, fmt.Errorf("diffusion: %d unguided prefixes for %d samples: %w", len(opt.Unguided), len(prefixes), models.ErrBadInput)
	}
	temp := float32(1)
	if opt.Temperature != 0 {
		temp = float32(opt.Temperature)
	}
	if !(temp >= 0) || math.IsInf(float64(temp), 0) {
		return nil, fmt.Errorf("diffusion: noise temperature %g: %w", opt.Temperature, models.ErrBadInput)
	}
	flow := Flow{Steps: e.Config.Steps}
	if opt.Steps > 0 {
		flow.Steps = opt.Steps
	}
	out := make([][]float32, len(prefixes))
	for i := range prefixes {
		x := append([]float32(nil), noise[i*per:(i+1)*per]...)
		for j := range x {
			x[j] *= temp
		}
		var err error
		if opt.Unguided != nil {
			e.lastGraphed, e.lastGraphErr = false, nil
			err = flow.Integrate(ctx, x, e.GuidedField(prefixes[i], opt.Unguided[i], float32(opt.GuidanceWeight)))
		} else {
			err = e.integrate(ctx, flow, x, prefixes[i])
		}
		if err != nil {
			return nil, fmt.Errorf("diffusion: sample %d: %w", i, err)
		}
		out[i] = x
	}
	return out, nil
}

// GuidedField is classifier-free guidance's velocity field: the expert's
// velocity with prefix p (the condition) and with unguided (without it),
// mixed as (1 − w)·v_unguided + w·v_guided. Each evaluation runs the
// expert twice, op by op: a graph captured for one prefix does not serve
// the other.
func (e *Expert) GuidedField(p, unguided Prefix, w float32) Field {
	return func(ctx context.Context, x []float32, t float32) ([]float32, error) {
		vg, err := e.Velocity(ctx, p, x, t)
		if err != nil {
			return nil, err
		}
		vu, err := e.Velocity(ctx, unguided, x, t)
		if err != nil {
			return nil, fmt.Errorf("diffusion: unguided: %w", err)
		}
		for i := range vg {
			vg[i] = (1-w)*vu[i] + w*vg[i]
		}
		return vg, nil
	}
}

// integrate runs one sample's Euler steps, replaying them from a graph
// where the backend can (see models.StepGraph), all on the device where
// it is a backend.FlowFeed and every unit is in place.
func (e *Expert) integrate(ctx context.Context, flow Flow, x []float32, p Prefix) error {
	if !e.NoGraphs {
		e.graph = &models.StepGraph{}
		defer func() {
			e.lastGraphed, e.lastGraphErr = e.graph.Captured(), e.graph.Err()
			_ = e.graph.Close()
			e.graph = nil
		}()
	}
	ff, df, err := e.flowFeed()
	if err != nil {
		return err
	}
	if _, dp := e.be.(backend.DevicePos); ff != nil && dp && !e.HostEuler && models.Direct(e.Exec) {
		return e.integrateOnDevice(ctx, ff, df, flow, x, &p)
	}
	return flow.Integrate(ctx, x, e.Field(p))
}

// StepGraph reports whether the last sample's Euler steps replayed a
// captured graph, and why not when the capture failed.
func (e *Expert) StepGraph() (bool, error) { return e.lastGraphed, e.lastGraphErr }

// Field is the expert's velocity field for prefix p (Velocity bound to p).
func (e *Expert) Field(p Prefix) Field {
	return func(ctx context.Context, x []float32, t float32) ([]float32, error) {
		return e.Velocity(ctx, p, x, t)
	}
}

// ActionsToTrajectory integrates sampled (normalised) actions into the
// future trajectory in the t0 frame, starting from the speed the ego
// history implies (see actionspace.Space.ToTrajectory).
func (e *Expert) ActionsToTrajectory(actions []float32, histXYZ [][3]float32, histRot [][9]float32) (*actionspace.Trajectory, error) {
	tr, err := e.Space.ToTrajectory(actions, histXYZ, histRot)
	if err != nil {
		return nil, fmt.Errorf("diffusion: %w", err)
	}
	return tr, nil
}

// HistoryTokens returns the vocabulary ids that replace the prompt's
// <|traj_history|> placeholders, in order: the delta tokenizer's tokens of
// the history positions plus offset, the id of the first history token
// (the first trajectory token <i0> plus the future tokenizer's vocabulary:
// 151669 + 3000 in the release).
func (e *Expert) HistoryTokens(histXYZ [][3]float32, offset int32) ([]int32, error) {
	ids, err := e.Config.History.HistoryTokens(histXYZ, offset)
	if err != nil {
		return nil, fmt.Errorf("diffusion: history tokens: %w", err)
	}
	return ids, nil
}
