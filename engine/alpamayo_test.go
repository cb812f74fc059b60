package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models/alpamayo"
	"vlanode/msgs"
)

func TestPlanOf(t *testing.T) {
	res := &alpamayo.Result{
		Reasoning: "slow down for the cyclist",
		Actions:   [][2]float32{{0.5, -0.01}, {0.25, 0.02}},
		XYZ:       [][3]float32{{0.5, 0, 0}, {1.1, 0.1, 0}},
		Rot:       [][9]float32{{1, 0, 0, 0, 1, 0, 0, 0, 1}, {1, 0, 0, 0, 1, 0, 0, 0, 1}},
		Timing: alpamayo.Timing{Vision: 2 * time.Millisecond, Prefill: 3 * time.Millisecond,
			Decode: 5 * time.Millisecond, Diffusion: 7 * time.Millisecond},
	}
	p := PlanOf(res, 1500*time.Microsecond)
	assert.Equal(t, "slow down for the cyclist", p.Reasoning)
	assert.Equal(t, 0.1, p.Trajectory.DT)
	assert.Equal(t, [3]float64{float64(float32(1.1)), float64(float32(0.1)), 0}, p.Trajectory.XYZ[1])
	assert.Equal(t, [2]float64{0.25, float64(float32(0.02))}, p.Actions[1])
	assert.Equal(t, msgs.Timing{Preprocess: 1.5, Vision: 2, Prefill: 3, Decode: 5, Diffusion: 7}, p.TimingMs)
	// The node fills id, node, stamp, model and the total; the rest must
	// already be a valid plan body.
	p.V, p.ID, p.Node, p.Model, p.StampNs, p.TimingMs.Total = msgs.Version, "r1", "n", "m", 1, 19
	require.NoError(t, p.Validate())
}

func TestDefaultMaxRequestPixels(t *testing.T) {
	assert.Equal(t, len(Cameras)*FramesPerCamera*CameraPixels, DefaultMaxRequestPixels, "an observation's frames")
	var st settings
	MaxRequestPixels(5)(&st)
	assert.Equal(t, 5, st.maxPixels)
	MaxRequestPixels(0)(&st)
	assert.Equal(t, 5, st.maxPixels, "0 keeps what was set")
}
