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
// t = 1 over the expert's velocity field. The samples are integrated one
// after the other; SampleBatch runs several through each pass together.
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
	temp, err := noiseTemperature(opt.Temperature)
	if err != nil {
		return nil, err
	}
	flow := e.flowOf(opt.Steps)
	out := make([][]float32, len(prefixes))
	for i := range prefixes {
		x := scaled(noise[i*per:(i+1)*per], temp)
		var err error
		if opt.Unguided != nil {
			e.lastGraphed, e.lastGraphErr = false, nil
			err = flow.Integrate(ctx, x, e.GuidedField(prefixes[i], opt.Unguided[i], float32(opt.GuidanceWeight)))
		} else {
			err = e.integrate(ctx, flow, x, solo(&prefixes[i]))
		}
		if err != nil {
			return nil, fmt.Errorf("diffusion: sample %d: %w", i, err)
		}
		out[i] = x
	}
	return out, nil
}

// Draws are the trajectory samples of one prefix in SampleBatch: Samples
// of them, each from its own noise, all attending to the prefix's cache.
type Draws struct {
	Prefix Prefix
	// Samples is the number of samples, at least 1. The prefix's cache
	// needs room for all their action tokens: Len + Samples·Waypoints
	// rows (sample j's keys and values go to rows Len + j·Waypoints on).
	Samples int
	// Noise is the samples' initial states [Samples][Waypoints][2]
	// before Temperature scales them; nil draws them from
	// GaussianNoise(Seed, …), so that sample 0's noise is a lone
	// sample's of the same seed (as torch.randn over B·K samples gives
	// the first sample the draw of a batch of one).
	Noise []float32
	// Seed seeds the noise when Noise is nil.
	Seed uint64
	// Temperature scales the initial noise as SampleOptions.Temperature.
	Temperature float64
}

// SampleBatch runs flow matching for every sample of every Draws
// together: each Euler step runs each unit of the expert once, so that a
// streamed unit is copied once a step for all of them. Within a unit's
// turn each Draws computes in turn over its own rows, as it would alone:
// its samples' action tokens in one product (Samples·Waypoints rows), the
// norms, rotary embedding and attention per sample, each over its own
// rows of its prefix's cache (qwen3.Span.Groups). steps overrides the
// config's Euler steps when positive. It returns each Draws' samples'
// normalised actions [Samples][Waypoints·2].
//
// Each Draws' results are those of SampleBatch over that Draws alone, bit
// for bit on every backend; one sample's are Sample's. Sample j > 0 of a
// Draws is a lone sample of its noise up to the products over more rows:
// bit-identical on a backend whose products compute each row alone (cpu),
// within rounding where a GEMM's algorithm depends on the rows (cuBLAS
// picks another for 384 rows than vla_gemm_rows for 64); sample 0 of K is
// that too, which is what the tests bound.
func (e *Expert) SampleBatch(ctx context.Context, draws []Draws, steps int) ([][][]float32, error) {
	per := e.Waypoints() * ActionDims
	var x []float32
	var prefixes []Prefix
	var samples []int
	for i, d := range draws {
		if d.Samples < 1 {
			return nil, fmt.Errorf("diffusion: draws %d: %d samples: %w", i, d.Samples, models.ErrBadInput)
		}
		noise := d.Noise
		if noise == nil {
			noise = GaussianNoise(d.Seed, d.Samples*per)
		}
		if len(noise) != d.Samples*per {
			return nil, fmt.Errorf("diffusion: draws %d: noise of %d values for %d samples of %d: %w", i, len(noise), d.Samples, per, models.ErrBadInput)
		}
		temp, err := noiseTemperature(d.Temperature)
		if err != nil {
			return nil, err
		}
		x = append(x, scaled(noise, temp)...)
		prefixes = append(prefixes, d.Prefix)
		samples = append(samples, d.Samples)
	}
	if len(draws) == 0 {
		return nil, nil
	}
	gs := groupsOf(prefixes, samples, e.Waypoints())
	if len(gs) > 1 {
		restore, err := e.widen(len(gs) * e.Waypoints())
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	if err := e.integrate(ctx, e.flowOf(steps), x, gs); err != nil {
		return nil, fmt.Errorf("diffusion: %w", err)
	}
	out := make([][][]float32, len(draws))
	at := 0
	for i, d := range draws {
		for range d.Samples {
			out[i] = append(out[i], x[at:at+per])
			at += per
		}
	}
	return out, nil
}

// widen gives the Expert activations (and device flow memory) for a pass
// of rows action tokens until restore is called, which frees them and
// puts the one-sample ones back.
func (e *Expert) widen(rows int) (restore func(), err error) {
	if e.s == nil {
		return nil, fmt.Errorf("diffusion: expert is closed")
	}
	base, flow := e.s, e.flow
	wide, err := newScratch(e.be, e.Config, rows, ActionDims, e.InProj.features())
	if err != nil {
		return nil, err
	}
	e.s, e.flow = wide, nil
	return func() {
		e.freeFlow()
		e.s.free(e.be)
		e.s, e.flow = base, flow
	}, nil
}

// flowOf is the flow of the config's Euler steps, or of steps when
// positive.
func (e *Expert) flowOf(steps int) Flow {
	if steps > 0 {
		return Flow{Steps: steps}
	}
	return Flow{Steps: e.Config.Steps}
}

// noiseTemperature is the factor of the initial noise: t, or 1 for 0.
func noiseTemperature(t float64) (float32, error) {
	temp := float32(1)
	if t != 0 {
		temp = float32(t)
	}
	if !(temp >= 0) || math.IsInf(float64(temp), 0) {
		return 0, fmt.Errorf("diffusion: noise temperature %g: %w", t, models.ErrBadInput)
	}
	return temp, nil
}

// scaled is a copy of noise times temp.
func scaled(noise []float32, temp float32) []float32 {
	x := append([]float32(nil), noise...)
	for j := range x {
		x[j] *= temp
	}
	return x
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

// integrate runs the Euler steps of the groups' samples (x holds them in
// order), replaying them from a graph where the backend can (see
// models.StepGraph), all on the device where it is a backend.FlowFeed and
// every unit is in place.
func (e *Expert) integrate(ctx context.Context, flow Flow, x []float32, gs []group) error {
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
		return e.integrateOnDevice(ctx, ff, df, flow, x, gs)
	}
	return flow.Integrate(ctx, x, func(ctx context.Context, x []float32, t float32) ([]float32, error) {
		if err := e.forward(ctx, gs, x, t, true); err != nil {
			return nil, err
		}
		v, err := e.be.Download(e.s.out)
		if err != nil {
			return nil, fmt.Errorf("diffusion: downloading the velocity: %w", err)
		}
		return v, nil
	})
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
