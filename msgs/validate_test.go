package msgs_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestFrameValidate(t *testing.T) {
	frame := func(enc msgs.Encoding, w, h, step, n int) msgs.Frame {
		return msgs.Frame{Camera: "front_wide_120fov", StampNs: t0, Encoding: enc, Width: w, Height: h, Step: step,
			Data: make([]byte, n)}
	}
	cases := []struct {
		name  string
		frame msgs.Frame
		want  string // "" for valid
	}{
		{"rgb8 packed", frame(msgs.EncodingRGB8, 1920, 1080, 0, 1920*1080*3), ""},
		{"rgb8 explicit step", frame(msgs.EncodingRGB8, 1920, 1080, 5760, 1920*1080*3), ""},
		{"bgr8 padded rows", frame(msgs.EncodingBGR8, 5, 2, 16, 32), ""},
		{"mono8 packed", frame(msgs.EncodingMono8, 7, 3, 0, 21), ""},
		{"jpeg, any size", frame(msgs.EncodingJPEG, 1920, 1080, 0, 100), ""},
		{"png, step ignored", frame(msgs.EncodingPNG, 1920, 1080, 3, 100), ""},
		{"largest", frame(msgs.EncodingMono8, msgs.MaxDimension, 1, 0, msgs.MaxDimension), ""},

		{"no camera", msgs.Frame{Encoding: msgs.EncodingJPEG, Width: 1, Height: 1, Data: []byte{1}},
			"camera: must not be empty"},
		{"no encoding", frame("", 1, 1, 0, 1), `encoding: unknown encoding "", want one of jpeg, png, rgb8, bgr8, mono8`},
		{"width too large", frame(msgs.EncodingJPEG, msgs.MaxDimension+1, 1, 0, 1), "width: 16385 out of range 1..16384"},
		{"height zero", frame(msgs.EncodingJPEG, 1, 0, 0, 1), "height: 0 out of range 1..16384"},
		{"jpeg empty", frame(msgs.EncodingJPEG, 1, 1, 0, 0), "data: must not be empty"},
		{"rgb8 size vs width×height×channels", frame(msgs.EncodingRGB8, 1920, 1080, 0, 1920*1080),
			"data: got 2073600 bytes, want 6220800 (width 1920 × height 1080 × 3 bytes a pixel for rgb8)"},
		{"rgb8 size vs step", frame(msgs.EncodingRGB8, 1920, 1080, 5776, 1920*1080*3),
			"data: got 6220800 bytes, want 6238080 (step 5776 × height 1080)"},
		{"bgr8 step below row", frame(msgs.EncodingBGR8, 5, 2, 14, 28), "step: 14 is less than width × bytes a pixel = 5 × 3 = 15"},
		{"mono8 step negative", frame(msgs.EncodingMono8, 5, 2, -5, 10), "step: must not be negative, got -5"},
		{"step overflows", frame(msgs.EncodingMono8, 5, 2, math.MaxInt, 10), "step: 9223372036854775807 too large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.frame.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			requireFieldError(t, err, tc.want, msgs.CodeBadRequest)
		})
	}
}

func TestInferRequestValidate(t *testing.T) {
	r := sampleRequest()
	require.NoError(t, r.Validate())

	r.Frames[6].Height = 3
	requireFieldError(t, r.Validate(), "frames[6].data: got 24 bytes, want 36 (width 4 × height 3 × 3 bytes a pixel for rgb8)",
		msgs.CodeBadRequest)

	r = sampleRequest()
	r.EgoHistory[4].XYZ[1] = math.NaN()
	requireFieldError(t, r.Validate(), "ego_history[4].xyz[1]: not finite", msgs.CodeBadRequest)

	r = sampleRequest()
	r.EgoHistory[0].Rot[3] = math.Inf(-1)
	requireFieldError(t, r.Validate(), "ego_history[0].rot[3]: not finite", msgs.CodeBadRequest)

	r = msgs.InferRequest{ID: "r", UseLatest: true, MaxReasoningTokens: -3}
	requireFieldError(t, r.Validate(), "max_reasoning_tokens: must not be negative, got -3", msgs.CodeBadRequest)
}

func TestPlanValidate(t *testing.T) {
	p := samplePlan()
	require.NoError(t, p.Validate())
	require.NoError(t, (&msgs.Plan{ID: "r"}).Validate(), "a plan without waypoints needs no dt")

	p.Trajectory.XYZ[63][2] = math.Inf(1)
	requireFieldError(t, p.Validate(), "trajectory.xyz[63][2]: not finite", msgs.CodeBadRequest)

	p = samplePlan()
	p.Trajectory.Rot[0][0] = math.NaN()
	requireFieldError(t, p.Validate(), "trajectory.rot[0][0]: not finite", msgs.CodeBadRequest)

	p = samplePlan()
	p.Trajectory.DT = math.Inf(1)
	requireFieldError(t, p.Validate(), "trajectory.dt: must be positive and finite, got +Inf", msgs.CodeBadRequest)

	p = samplePlan()
	p.TimingMs.Total = math.NaN()
	requireFieldError(t, p.Validate(), "timing_ms.total: must be finite and non-negative, got NaN", msgs.CodeBadRequest)
}

func TestEncoding(t *testing.T) {
	for enc, ch := range map[msgs.Encoding]int{"jpeg": 0, "png": 0, "rgb8": 3, "bgr8": 3, "mono8": 1} {
		require.True(t, enc.Known(), enc)
		require.Equal(t, ch, enc.Channels(), enc)
	}
	require.False(t, msgs.Encoding("rgba8").Known())
	require.Zero(t, msgs.Encoding("rgba8").Channels())
}
