package msgs_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestRoundTrip(t *testing.T) {
	req := sampleRequest()
	latest := msgs.InferRequest{ID: "req-2", UseLatest: true, EgoHistory: req.EgoHistory}
	noHistory := msgs.InferRequest{ID: "req-3", UseLatest: true} // nil history goes out as []
	plan := samplePlan()
	emptyPlan := msgs.Plan{ID: "req-4", Node: "n", Model: "m"}
	frame := rawFrame("front_wide_120fov", t0, 6, 4)
	padded := rawFrame("front_wide_120fov", t0, 3, 2)
	padded.Encoding, padded.Step, padded.Data = msgs.EncodingMono8, 8, make([]byte, 16)
	jpeg := msgs.Frame{Camera: "front_tele_30fov", StampNs: t0, Encoding: msgs.EncodingJPEG,
		Width: 1920, Height: 1080, Data: []byte{0xff, 0xd8, 0xff, 0xe0, 0xff, 0xd9}}
	status := sampleStatus()
	bare := msgs.Status{Node: "cpu-a", Model: "m"}
	errReply := *msgs.NewError("req-5", msgs.CodeOverloaded, "queue full (8 waiting)")

	cases := []struct {
		name   string
		msg    any
		decode func([]byte) (any, error)
	}{
		{"frame/rgb8", frame, func(b []byte) (any, error) { return deref(msgs.DecodeFrame(b)) }},
		{"frame/mono8-padded", padded, func(b []byte) (any, error) { return deref(msgs.DecodeFrame(b)) }},
		{"frame/jpeg", jpeg, func(b []byte) (any, error) { return deref(msgs.DecodeFrame(b)) }},
		{"request/frames", req, func(b []byte) (any, error) { return deref(msgs.DecodeInferRequest(b)) }},
		{"request/use_latest", latest, func(b []byte) (any, error) { return deref(msgs.DecodeInferRequest(b)) }},
		{"request/no-history", noHistory, func(b []byte) (any, error) { return deref(msgs.DecodeInferRequest(b)) }},
		{"plan", plan, func(b []byte) (any, error) { return deref(msgs.DecodePlan(b)) }},
		{"plan/empty", emptyPlan, func(b []byte) (any, error) { return deref(msgs.DecodePlan(b)) }},
		{"error", errReply, func(b []byte) (any, error) { return deref(msgs.DecodeError(b)) }},
		{"status", status, func(b []byte) (any, error) { return deref(msgs.DecodeStatus(b)) }},
		{"status/bare", bare, func(b []byte) (any, error) { return deref(msgs.DecodeStatus(b)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := mustMarshal(t, tc.msg)
			require.Equal(t, b, mustMarshal(t, ptrTo(tc.msg)), "a value and a pointer encode alike")
			require.EqualValues(t, msgs.Version, generic(t, b)["v"])

			got, err := tc.decode(b)
			require.NoError(t, err)
			require.Equal(t, versioned(tc.msg), got)
		})
	}
}

// deref returns *p, so that decoded messages compare with values.
func deref[T any](p *T, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return *p, nil
}

// ptrTo returns a pointer to a copy of a message value.
func ptrTo(msg any) any {
	switch m := msg.(type) {
	case msgs.Frame:
		return &m
	case msgs.InferRequest:
		return &m
	case msgs.Plan:
		return &m
	case msgs.Error:
		return &m
	case msgs.Status:
		return &m
	}
	panic(fmt.Sprintf("ptrTo(%T)", msg))
}

// versioned returns the message as it decodes: with V set on it and on its
// frames.
func versioned(msg any) any {
	switch m := msg.(type) {
	case msgs.Frame:
		m.V = msgs.Version
		return m
	case msgs.InferRequest:
		m.V = msgs.Version
		m.Frames = append([]msgs.Frame(nil), m.Frames...)
		for i := range m.Frames {
			m.Frames[i].V = msgs.Version
		}
		return m
	case msgs.Plan:
		m.V = msgs.Version
		return m
	case msgs.Error:
		m.V = msgs.Version
		return m
	case msgs.Status:
		m.V = msgs.Version
		return m
	}
	panic(fmt.Sprintf("versioned(%T)", msg))
}

func TestMarshalDoesNotModify(t *testing.T) {
	req := sampleRequest()
	require.Zero(t, req.V)
	mustMarshal(t, &req)
	require.Zero(t, req.V)
	require.Zero(t, req.Frames[0].V)
}

func TestMarshalRejects(t *testing.T) {
	_, err := msgs.Marshal(map[string]any{"v": 1})
	require.EqualError(t, err, "msgs: Marshal of map[string]interface {}, which is not a protocol message")
	_, err = msgs.Marshal((*msgs.Plan)(nil))
	require.EqualError(t, err, "msgs: Marshal(nil *msgs.Plan)")
	_, err = msgs.Marshal(nil)
	require.Error(t, err)
}

// TestWireKeys pins the keys of every message to DESIGN.md's protocol v1.
func TestWireKeys(t *testing.T) {
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return ks
	}
	req := generic(t, mustMarshal(t, sampleRequest()))
	require.ElementsMatch(t, []string{"v", "id", "frames", "ego_history", "prompt", "max_reasoning_tokens", "deadline_ms"}, keys(req))
	frame := req["frames"].([]any)[0].(map[string]any)
	require.ElementsMatch(t, []string{"v", "camera", "stamp_ns", "seq", "encoding", "width", "height", "data"}, keys(frame))
	require.IsType(t, []byte(nil), frame["data"], "data is bin")
	pose := req["ego_history"].([]any)[0].(map[string]any)
	require.ElementsMatch(t, []string{"stamp_ns", "xyz", "rot"}, keys(pose))

	plan := generic(t, mustMarshal(t, samplePlan()))
	require.ElementsMatch(t, []string{"v", "id", "node", "model", "stamp_ns", "trajectory", "actions", "reasoning",
		"timing_ms", "budget_bytes", "vram_peak_bytes"}, keys(plan))
	require.ElementsMatch(t, []string{"dt", "xyz", "rot"}, keys(plan["trajectory"].(map[string]any)))
	require.ElementsMatch(t, []string{"preprocess", "vision", "prefill", "decode", "diffusion", "total"},
		keys(plan["timing_ms"].(map[string]any)))

	e := generic(t, mustMarshal(t, msgs.NewError("x", msgs.CodeInternal, "boom")))
	require.Equal(t, map[string]any{"v": int8(1), "id": "x",
		"error": map[string]any{"code": "internal", "message": "boom"}}, e)

	st := generic(t, mustMarshal(t, sampleStatus()))
	require.ElementsMatch(t, []string{"v", "node", "model", "budget_bytes", "plan", "gpu", "queue_depth", "counters"}, keys(st))
	require.ElementsMatch(t, []string{"name", "memory_total_bytes", "memory_used_bytes", "memory_free_bytes",
		"pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max", "temperature_c", "sm_clock_mhz", "mem_clock_mhz",
		"throttle_reasons"}, keys(st["gpu"].(map[string]any)))
}

func TestDecodeReply(t *testing.T) {
	plan := samplePlan()
	p, e, err := msgs.DecodeReply(mustMarshal(t, plan))
	require.NoError(t, err)
	require.Nil(t, e)
	require.Equal(t, versioned(plan), *p)

	p, e, err = msgs.DecodeReply(mustMarshal(t, msgs.NewError("req-1", msgs.CodeDeadlineExceeded, "late")))
	require.NoError(t, err)
	require.Nil(t, p)
	require.Equal(t, msgs.NewError("req-1", msgs.CodeDeadlineExceeded, "late"), e)

	p, e, err = msgs.DecodeReply([]byte{0x93, 1, 2, 3})
	require.Nil(t, p)
	require.Nil(t, e)
	requireFieldError(t, err, "message must be a map, got array", msgs.CodeBadRequest)

	// The "error" key decides: a broken Error is reported as one.
	_, _, err = msgs.DecodeReply(encode(t, map[string]any{"v": 1, "id": "r", "error": "nope"}))
	requireFieldError(t, err, "error: want map, got string", msgs.CodeBadRequest)
	_, _, err = msgs.DecodeReply(encode(t, map[string]any{"v": 1, "id": "r"}))
	requireFieldError(t, err, "node: required", msgs.CodeBadRequest)
}

func TestErrorReply(t *testing.T) {
	_, err := msgs.DecodeInferRequest(encode(t, map[string]any{"v": 1, "id": 5}))
	require.Equal(t, msgs.NewError("r", msgs.CodeBadRequest, "id: want string, got integer"),
		msgs.ErrorReply("r", err))

	_, err = msgs.DecodeInferRequest(encode(t, map[string]any{"v": 2, "id": "r"}))
	require.Equal(t, msgs.NewError("r", msgs.CodeUnsupported, "v: unsupported protocol version 2 (want 1)"),
		msgs.ErrorReply("r", err))

	wrapped := fmt.Errorf("handling request: %w", &msgs.FieldError{Path: "frames", Msg: "too many"})
	require.Equal(t, msgs.NewError("r", msgs.CodeBadRequest, "frames: too many"), msgs.ErrorReply("r", wrapped))

	require.Equal(t, msgs.NewError("r", msgs.CodeInternal, "cuda: out of memory"),
		msgs.ErrorReply("r", errors.New("cuda: out of memory")))
}

func TestRequestID(t *testing.T) {
	require.Equal(t, "req-9", msgs.RequestID(encode(t, map[string]any{"id": "req-9", "frames": 3})))
	require.Equal(t, "", msgs.RequestID(encode(t, map[string]any{"id": 9})))
	require.Equal(t, "", msgs.RequestID([]byte{0xc1}))
}
