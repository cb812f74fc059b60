package diffusion

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFlowTimes(t *testing.T) {
	assert.Equal(t, []float32{0, 1}, Flow{Steps: 1}.Times())
	assert.Equal(t, []float32{0, 0.25, 0.5, 0.75, 1}, Flow{Steps: 4}.Times())
	ts := Flow{Steps: 10}.Times()
	require.Len(t, ts, 11)
	step := float32(0.1)
	// torch: the first half start + step·i, the second end − step·(n−1−i)
	assert.Equal(t, float32(step*3), ts[3])
	assert.Equal(t, 1-float32(step*3), ts[7])
	assert.Equal(t, float32(0.5), ts[5])
	assert.Equal(t, float32(1), ts[10])
}

func TestFlowIntegrateClosedForms(t *testing.T) {
	ctx := context.Background()
	// v = 2t: x(1) = x0 + Σ 2·t_i·dt = x0 + (N−1)/N for the uniform grid
	x := []float32{0.5, -1}
	require.NoError(t, Flow{Steps: 10}.Integrate(ctx, x, func(_ context.Context, x []float32, t float32) ([]float32, error) {
		return []float32{2 * t, 2 * t}, nil
	}))
	assert.InDelta(t, 0.5+0.9, x[0], 1e-6)
	assert.InDelta(t, -1+0.9, x[1], 1e-6)
	// v = −x: Euler gives x0·Π(1 − dt_i) = x0·0.9^10
	x = []float32{3}
	require.NoError(t, Flow{Steps: 10}.Integrate(ctx, x, func(_ context.Context, x []float32, _ float32) ([]float32, error) {
		return []float32{-x[0]}, nil
	}))
	assert.InDelta(t, 3*math.Pow(0.9, 10), x[0], 1e-6)
}

func TestFlowIntegrateErrors(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	calls := 0
	err := Flow{Steps: 10}.Integrate(ctx, make([]float32, 4), func(context.Context, []float32, float32) ([]float32, error) {
		if calls++; calls == 3 {
			return nil, boom
		}
		return make([]float32, 4), nil
	})
	assert.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "Euler step 2")
	err = Flow{Steps: 2}.Integrate(ctx, make([]float32, 4), func(context.Context, []float32, float32) ([]float32, error) {
		return make([]float32, 3), nil
	})
	assert.ErrorContains(t, err, "velocity has 3 values")
	assert.Error(t, Flow{}.Integrate(ctx, nil, nil))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = Flow{Steps: 2}.Integrate(cancelled, make([]float32, 4), func(context.Context, []float32, float32) ([]float32, error) {
		return make([]float32, 4), nil
	})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestGaussianNoise(t *testing.T) {
	a, b := GaussianNoise(42, 100000), GaussianNoise(42, 100000)
	assert.Equal(t, a, b, "same seed, same noise")
	assert.NotEqual(t, a[:16], GaussianNoise(43, 16))
	var sum, sq float64
	for _, v := range a {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean := sum / float64(len(a))
	assert.InDelta(t, 0, mean, 0.02)
	assert.InDelta(t, 1, sq/float64(len(a))-mean*mean, 0.02)
}
