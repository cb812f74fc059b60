package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models/alpamayo"
	"vlanode/msgs"
	"vlanode/node"
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

func TestPlanOfAnswerAndPeak(t *testing.T) {
	p := PlanOf(&alpamayo.Result{Answer: "The road is clear.", AnswerIDs: []int32{5, 6}, VRAMPeakBytes: 3 << 30}, 0)
	assert.Equal(t, "The road is clear.", p.Answer)
	assert.Equal(t, uint64(3<<30), p.VRAMPeakBytes)
	assert.Empty(t, p.Trajectory.XYZ)
	p.V, p.ID, p.Node, p.Model, p.StampNs = msgs.Version, "q", "n", "m", 1
	require.NoError(t, p.Validate(), "an answer's plan has no waypoints")
}

func TestObservationOptions(t *testing.T) {
	zero, hot, topP, seed := 0.0, 0.9, 0.5, uint64(77)
	for _, c := range []struct {
		name string
		obs  node.Observation
		want Options
	}{
		{"defaults: sampling seeded by t0", node.Observation{T0: 42}, Options{Seed: 42}},
		{"temperature 0 is greedy", node.Observation{T0: 42, Temperature: &zero}, Options{Seed: 42, Greedy: true}},
		{"sampling keys", node.Observation{T0: 42, Temperature: &hot, TopP: &topP, Seed: &seed,
			CameraOrder: []string{"front_wide_120fov"}, NavText: "Turn left", Question: ""},
			Options{Seed: 77, Temperature: 0.9, TopP: 0.5, Cameras: []string{"front_wide_120fov"}, NavText: "Turn left"}},
	} {
		got, err := observationOptions(&c.obs)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	_, err := observationOptions(&node.Observation{Prompt: "drive"})
	assert.ErrorIs(t, err, node.ErrUnsupported)
	assert.ErrorContains(t, err, "prompt:")
}

func TestModelOrder(t *testing.T) {
	var frames []msgs.Frame
	for _, c := range []string{"front_tele_30fov", "cross_left_120fov"} {
		for k := range FramesPerCamera {
			frames = append(frames, msgs.Frame{Camera: c, StampNs: int64(k)})
		}
	}
	got, idx, err := modelOrder(frames, []string{"front_tele_30fov", "cross_left_120fov"})
	require.NoError(t, err)
	assert.Equal(t, []int{0, 6}, idx, "by camera index")
	assert.Equal(t, "cross_left_120fov", got[0].Camera)
	assert.Equal(t, "front_tele_30fov", got[4].Camera)
	assert.Equal(t, int64(3), got[7].StampNs, "each camera's frames keep their order")

	_, _, err = modelOrder(frames[:7], []string{"front_tele_30fov", "cross_left_120fov"})
	assert.ErrorIs(t, err, node.ErrBadInput)
	assert.ErrorContains(t, err, "got 7 images, want 8")
	_, _, err = modelOrder(frames, []string{"front_tele_30fov", "roof"})
	assert.ErrorContains(t, err, `unknown camera "roof"`)
	_, _, err = modelOrder(frames, nil)
	assert.ErrorContains(t, err, "got 8 images, want 16", "the default cameras")
}
