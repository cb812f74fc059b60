package diffusion

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Field is a velocity field: the velocity at state x and time t, with as
// many values as x. The expert is one (Expert.Velocity bound to a prefix).
type Field func(ctx context.Context, x []float32, t float32) ([]float32, error)

// Flow is the flow-matching sampler of the source (diffusion/flow_matching.py,
// int_method "euler"): time runs from 0 (noise) to 1 (data) over Steps
// Euler steps. Training pairs x_t = t·x + (1−t)·ε with the target v = x − ε.
type Flow struct {
	Steps int
}

// Times returns torch.linspace(0, 1, Steps+1) in float32 as torch computes
// it: step = 1/Steps in float32, the first half start + step·i and the
// second half end − step·(Steps−i), so the grid is symmetric and ends
// exactly at 1.
func (f Flow) Times() []float32 {
	n := f.Steps + 1
	out := make([]float32, n)
	if n == 1 {
		return out
	}
	step := float32(1) / float32(n-1)
	half := n / 2
	for i := range out {
		if i < half {
			out[i] = float32(step * float32(i))
		} else {
			out[i] = 1 - float32(step*float32(n-1-i))
		}
	}
	return out
}

// Integrate runs the Euler steps on x in place: for i < Steps,
// x += (t_{i+1} − t_i)·v(x, t_i), each product and sum rounded to float32,
// the state kept in float32 as in the source.
func (f Flow) Integrate(ctx context.Context, x []float32, v Field) error {
	if f.Steps <= 0 {
		return fmt.Errorf("diffusion: %d Euler steps", f.Steps)
	}
	ts := f.Times()
	for i := range f.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		vel, err := v(ctx, x, ts[i])
		if err != nil {
			return fmt.Errorf("diffusion: Euler step %d (t = %g): %w", i, ts[i], err)
		}
		if len(vel) != len(x) {
			return fmt.Errorf("diffusion: Euler step %d: velocity has %d values for a state of %d", i, len(vel), len(x))
		}
		dt := ts[i+1] - ts[i]
		for j := range x {
			x[j] += float32(dt * vel[j])
		}
	}
	return nil
}

// GaussianNoise returns n independent standard normal values from a PCG
// generator seeded with seed: the same values for the same seed on every
// machine. They are not torch.randn's; to reproduce a torch run, pass its
// noise to Expert.Sample instead.
func GaussianNoise(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}
