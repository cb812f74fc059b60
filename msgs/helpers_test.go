package msgs_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"vlanode/msgs"
)

// The Alpamayo-R1 cameras, in the order the model takes them.
var cameras = []string{"cross_left_120fov", "front_wide_120fov", "cross_right_120fov", "front_tele_30fov"}

const (
	t0      = int64(1_764_000_000_000_000_000) // ns
	frameDt = int64(100_000_000)               // 10 Hz
)

// rawFrame returns a packed rgb8 frame of w×h pixels.
func rawFrame(camera string, stamp int64, w, h int) msgs.Frame {
	data := make([]byte, w*h*3)
	for i := range data {
		data[i] = byte(i)
	}
	return msgs.Frame{Camera: camera, StampNs: stamp, Seq: uint64(stamp / frameDt), Encoding: msgs.EncodingRGB8,
		Width: w, Height: h, Data: data}
}

var identity = [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}

// sampleRequest is the standard workload's shape with tiny images: 4
// cameras × 4 frames of 4×2 rgb8, camera-major, oldest first, and 16 ego
// poses at 10 Hz ending at t0.
func sampleRequest() msgs.InferRequest {
	r := msgs.InferRequest{ID: "req-1", Prompt: "drive", MaxReasoningTokens: 64, DeadlineMs: 250}
	for _, cam := range cameras {
		for k := int64(3); k >= 0; k-- {
			r.Frames = append(r.Frames, rawFrame(cam, t0-k*frameDt, 4, 2))
		}
	}
	for k := int64(15); k >= 0; k-- {
		r.EgoHistory = append(r.EgoHistory, msgs.EgoPose{
			StampNs: t0 - k*frameDt,
			XYZ:     [3]float64{-float64(k) * 1.5, 0.01 * float64(k), 0},
			Rot:     identity,
		})
	}
	return r
}

func samplePlan() msgs.Plan {
	p := msgs.Plan{
		ID: "req-1", Node: "gpu-a", Model: "alpamayo-r1-10b", StampNs: t0,
		Trajectory: msgs.Trajectory{DT: 0.1},
		Reasoning:  "The light ahead is green; keep the lane.",
		TimingMs: msgs.Timing{Preprocess: 3.5, Vision: 20.25, Prefill: 80, Decode: 120.5,
			Diffusion: 60, Total: 290.125},
		BudgetBytes: 8_000_000_000, VRAMPeakBytes: 7_900_000_000,
	}
	for i := range 64 {
		x := 1.5 * float64(i+1) * 0.1
		p.Trajectory.XYZ = append(p.Trajectory.XYZ, [3]float64{x, 0, 0})
		p.Trajectory.Rot = append(p.Trajectory.Rot, identity)
		p.Actions = append(p.Actions, [2]float64{0.25, -0.001})
	}
	return p
}

func sampleStatus() msgs.Status {
	return msgs.Status{
		Node: "gpu-a", Model: "alpamayo-r1-10b", BudgetBytes: 16_000_000_000,
		Plan: &msgs.PlanSummary{Mode: "dynamic", ResidentBytes: 12e9, StreamedBytes: 9e9, HostBytes: 1e9,
			FixedBytes: 2e9, PredictedMs: 310.5},
		GPU: &msgs.GPU{Name: "NVIDIA H200", MemoryTotalBytes: 150e9, MemoryUsedBytes: 16e9, MemoryFreeBytes: 134e9,
			PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16, TemperatureC: 41,
			SMClockMHz: 1980, MemClockMHz: 3201, ThrottleReasons: []string{"gpu_idle", "sw_power_cap"}},
		QueueDepth: 2,
		Counters:   map[string]uint64{"requests": 1000, "plans": 990, "errors.overloaded": 10},
	}
}

// mustMarshal encodes a protocol message.
func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgs.Marshal(v)
	require.NoError(t, err)
	return b
}

// generic turns encoded bytes into plain maps and slices that tests can
// edit and encode again with encode.
func generic(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, msgpack.Unmarshal(b, &m))
	return m
}

// encode encodes any Go value with the plain msgpack encoder.
func encode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	require.NoError(t, err)
	return b
}

// requireFieldError checks that err is a *msgs.FieldError with the text
// want and the code code.
func requireFieldError(t *testing.T, err error, want string, code msgs.Code) {
	t.Helper()
	require.Error(t, err)
	var fe *msgs.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, want, err.Error())
	require.Equal(t, code, fe.Code)
}
