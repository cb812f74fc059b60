package diffusion

import (
	"context"
	"fmt"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/tensor"
)

// devFlow is the device memory of Euler steps on a backend.FlowFeed: the
// state stays there from the noise to the actions, each step's Fourier
// features and Euler update run there, and a device counter picks the
// step's time, so that the host queues every step without waiting for the
// one before it (it waited ~0.1 ms a step for the velocity, then built the
// next step's features while the device idled).
type devFlow struct {
	freqs backend.Tensor // [channels, H] the channels' frequencies
	x     backend.Tensor // [t, channels] the state
	tf1   backend.Tensor // [1, 2H] one time's features (setInputs)
	tf    backend.Tensor // [steps, 2H] every step's time features
	dt    backend.Tensor // [1, steps] the steps' sizes
	step  backend.Tensor // I32 [1]: the step the next one is
	steps int
	tfH   []float32 // host staging of tf1
}

// flowFeed returns the backend as a backend.FlowFeed with the Expert's
// device flow memory (made on first use), or nil where the backend is not
// one.
func (e *Expert) flowFeed() (backend.FlowFeed, *devFlow, error) {
	ff, ok := e.be.(backend.FlowFeed)
	switch {
	case !ok:
		return nil, nil, nil
	case e.s == nil:
		return nil, nil, fmt.Errorf("diffusion: expert is closed")
	}
	if e.flow != nil {
		return ff, e.flow, nil
	}
	c, h := e.InProj.channels, e.InProj.cfg.NumFourierFeats/2
	df := &devFlow{tfH: make([]float32, 2*h)}
	e.flow = df
	freqs := make([]float32, 0, c*h)
	for ch := range c {
		freqs = append(freqs, e.InProj.Freqs[ch]...)
	}
	var err error
	if df.freqs, err = e.be.Alloc("activations", tensor.F32, c, h); err == nil {
		if err = e.be.Upload(df.freqs, freqs); err == nil {
			if df.x, err = e.be.Alloc("activations", tensor.F32, e.s.t, c); err == nil {
				df.tf1, err = e.be.Alloc("activations", tensor.F32, 1, 2*h)
			}
		}
	}
	if err != nil {
		e.freeFlow()
		return nil, nil, fmt.Errorf("diffusion: the Euler steps' device memory: %w", err)
	}
	return ff, df, nil
}

// freeFlow frees the device flow memory.
func (e *Expert) freeFlow() {
	if df := e.flow; df != nil {
		for _, t := range []backend.Tensor{df.freqs, df.x, df.tf1, df.tf, df.dt, df.step} {
			if t != nil {
				e.be.Free(t)
			}
		}
		e.flow = nil
	}
}

// deviceFeatures computes action_in_proj's input on the device from x and
// t: the x uploaded, t's features from the host (the same function the
// steps' table is made with).
func (e *Expert) deviceFeatures(ff backend.FlowFeed, df *devFlow, x []float32, t float32) error {
	fourier(df.tfH, t, e.InProj.Freqs[e.InProj.channels])
	if err := e.be.Upload(df.x, x); err != nil {
		return fmt.Errorf("diffusion: uploading the actions: %w", err)
	}
	if err := e.be.Upload(df.tf1, df.tfH); err != nil {
		return fmt.Errorf("diffusion: uploading the time's features: %w", err)
	}
	if err := ff.Fourier(e.s.feats, df.x, df.freqs, df.tf1, nil); err != nil {
		return fmt.Errorf("diffusion: Fourier features: %w", err)
	}
	return nil
}

// integrateOnDevice runs flow's Euler steps on x (every group's samples,
// in order) in place on a
// backend.FlowFeed with every unit in place: x goes up once, every step
// (features, the expert, the update) is queued without a wait, from a
// graph captured during the first where the backend captures, and x comes
// back once. The bits are Integrate's over Velocity on the same backend:
// the same ops, the same features, the same update.
func (e *Expert) integrateOnDevice(ctx context.Context, ff backend.FlowFeed, df *devFlow, flow Flow, x []float32, gs []group) error {
	s, be := e.s, e.be
	if flow.Steps <= 0 {
		return fmt.Errorf("diffusion: %d Euler steps", flow.Steps)
	}
	if len(x) != s.t*ActionDims {
		return fmt.Errorf("diffusion: %d action values, want %d×%d: %w", len(x), s.t, ActionDims, models.ErrBadInput)
	}
	if err := e.checkGroups(gs, s.t); err != nil {
		return err
	}
	if err := e.flowSteps(df, flow.Steps); err != nil {
		return err
	}
	ts := flow.Times()
	h2 := e.InProj.cfg.NumFourierFeats
	tfH, dtH := make([]float32, flow.Steps*h2), make([]float32, flow.Steps)
	for i := range flow.Steps {
		fourier(tfH[i*h2:(i+1)*h2], ts[i], e.InProj.Freqs[e.InProj.channels])
		dtH[i] = ts[i+1] - ts[i]
	}
	for _, u := range []struct {
		dst backend.Tensor
		src []float32
	}{{df.x, x}, {df.tf, tfH}, {df.dt, dtH}} {
		if err := be.Upload(u.dst, u.src); err != nil {
			return fmt.Errorf("diffusion: uploading the Euler steps' inputs: %w", err)
		}
	}
	if err := be.(backend.DevicePos).UploadI32(df.step, []int32{0}); err != nil {
		return fmt.Errorf("diffusion: the Euler step counter: %w", err)
	}
	if err := e.uploadRope(gs, s); err != nil {
		return err
	}
	step := func() error {
		if err := ff.Fourier(s.feats, df.x, df.freqs, df.tf, df.step); err != nil {
			return fmt.Errorf("diffusion: Fourier features: %w", err)
		}
		if err := e.compute(ctx, gs, true); err != nil {
			return err
		}
		if err := ff.EulerStep(df.x, s.out, df.dt, df.step); err != nil {
			return fmt.Errorf("diffusion: Euler update: %w", err)
		}
		return nil
	}
	for i := range flow.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		if g := e.graph; g != nil && g.Usable(be, e.Exec) {
			var done bool
			if done, err = g.Run(ctx, be, step); err == nil && !done {
				err = g.Err() // the first step failed op by op
			}
		} else {
			err = step()
		}
		if err != nil {
			return fmt.Errorf("diffusion: Euler step %d (t = %g): %w", i, ts[i], err)
		}
	}
	v, err := be.Download(df.x)
	if err != nil {
		return fmt.Errorf("diffusion: downloading the actions: %w", err)
	}
	copy(x, v)
	return nil
}

// flowSteps sizes the steps' tables for n steps.
func (e *Expert) flowSteps(df *devFlow, n int) error {
	if df.steps == n && df.step != nil {
		return nil
	}
	for _, t := range []*backend.Tensor{&df.tf, &df.dt, &df.step} {
		if *t != nil {
			e.be.Free(*t)
			*t = nil
		}
	}
	df.steps = 0
	var err error
	if df.tf, err = e.be.Alloc("activations", tensor.F32, n, e.InProj.cfg.NumFourierFeats); err == nil {
		if df.dt, err = e.be.Alloc("activations", tensor.F32, 1, n); err == nil {
			df.step, err = e.be.Alloc("activations", tensor.I32, 1)
		}
	}
	if err != nil {
		return fmt.Errorf("diffusion: the Euler steps' tables: %w", err)
	}
	df.steps = n
	return nil
}
