package msgs_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// Edits of a generic InferRequest, for the table of bad requests.

func set(key string, v any) func(map[string]any) {
	return func(m map[string]any) { m[key] = v }
}

func del(key string) func(map[string]any) {
	return func(m map[string]any) { delete(m, key) }
}

func frameSet(i int, key string, v any) func(map[string]any) {
	return func(m map[string]any) { m["frames"].([]any)[i].(map[string]any)[key] = v }
}

func frameDel(i int, key string) func(map[string]any) {
	return func(m map[string]any) { delete(m["frames"].([]any)[i].(map[string]any), key) }
}

func poseSet(i int, key string, v any) func(map[string]any) {
	return func(m map[string]any) { m["ego_history"].([]any)[i].(map[string]any)[key] = v }
}

func poseDel(i int, key string) func(map[string]any) {
	return func(m map[string]any) { delete(m["ego_history"].([]any)[i].(map[string]any), key) }
}

func edits(fs ...func(map[string]any)) func(map[string]any) {
	return func(m map[string]any) {
		for _, f := range fs {
			f(m)
		}
	}
}

func TestDecodeInferRequestBad(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	const unsupported = msgs.CodeUnsupported
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
		code msgs.Code // bad_request unless set
	}{
		// Version.
		{"v missing", del("v"), "v: required", ""},
		{"v nil", set("v", nil), "v: required, got nil", ""},
		{"v string", set("v", "1"), "v: want integer, got string", ""},
		{"v float", set("v", 1.0), "v: want integer, got float", ""},
		{"v 2", set("v", 2), "v: unsupported protocol version 2 (want 1)", unsupported},
		{"v 0", set("v", 0), "v: unsupported protocol version 0 (want 1)", unsupported},
		{"frame v 2", frameSet(1, "v", uint64(2)), "frames[1].v: unsupported protocol version 2 (want 1)", unsupported},
		{"frame v string", frameSet(1, "v", "one"), "frames[1].v: want integer, got string", ""},

		// Request fields.
		{"id missing", del("id"), "id: required", ""},
		{"id integer", set("id", 7), "id: want string, got integer", ""},
		{"id bin", set("id", []byte("r")), "id: want string, got bin", ""},
		{"id empty", set("id", ""), "id: must not be empty", ""},
		{"frames string", set("frames", "front"), "frames: want array, got string", ""},
		{"frames map", set("frames", map[string]any{}), "frames: want array, got map", ""},
		{"frame not map", frameSetAll(2, 42), "frames[2]: want map, got integer", ""},
		{"use_latest integer", set("use_latest", 1), "use_latest: want bool, got integer", ""},
		{"both", set("use_latest", true), "frames: want frames or use_latest, got both", ""},
		{"neither", del("frames"), "frames: want frames or use_latest, got neither", ""},
		{"neither (empty frames)", set("frames", []any{}), "frames: want frames or use_latest, got neither", ""},
		{"neither (use_latest false)", edits(del("frames"), set("use_latest", false)),
			"frames: want frames or use_latest, got neither", ""},
		{"prompt integer", set("prompt", 3), "prompt: want string, got integer", ""},
		{"max_reasoning_tokens float", set("max_reasoning_tokens", 1.5), "max_reasoning_tokens: want integer, got float", ""},
		{"max_reasoning_tokens negative", set("max_reasoning_tokens", -1), "max_reasoning_tokens: must not be negative, got -1", ""},
		{"deadline_ms string", set("deadline_ms", "100ms"), "deadline_ms: want integer, got string", ""},
		{"deadline_ms negative", set("deadline_ms", int16(-5)), "deadline_ms: must not be negative, got -5", ""},

		// Frame fields.
		{"camera missing", frameDel(0, "camera"), "frames[0].camera: required", ""},
		{"camera empty", frameSet(0, "camera", ""), "frames[0].camera: must not be empty", ""},
		{"camera bool", frameSet(0, "camera", true), "frames[0].camera: want string, got bool", ""},
		{"stamp_ns missing", frameDel(5, "stamp_ns"), "frames[5].stamp_ns: required", ""},
		{"stamp_ns overflow", frameSet(5, "stamp_ns", uint64(math.MaxUint64)),
			"frames[5].stamp_ns: integer 18446744073709551615 out of range", ""},
		{"seq negative", frameSet(0, "seq", -1), "frames[0].seq: want non-negative integer, got -1", ""},
		{"encoding missing", frameDel(0, "encoding"), "frames[0].encoding: required", ""},
		{"encoding unknown", frameSet(0, "encoding", "yuv422"),
			`frames[0].encoding: unknown encoding "yuv422", want one of jpeg, png, rgb8, bgr8, mono8`, ""},
		{"encoding upper case", frameSet(0, "encoding", "RGB8"),
			`frames[0].encoding: unknown encoding "RGB8", want one of jpeg, png, rgb8, bgr8, mono8`, ""},
		{"width string", frameSet(3, "width", "640"), "frames[3].width: want integer, got string", ""},
		{"width float", frameSet(3, "width", 4.0), "frames[3].width: want integer, got float", ""},
		{"width missing", frameDel(3, "width"), "frames[3].width: required", ""},
		{"width zero", frameSet(3, "width", 0), "frames[3].width: 0 out of range 1..16384", ""},
		{"height too large", frameSet(3, "height", 16385), "frames[3].height: 16385 out of range 1..16384", ""},
		{"height negative", frameSet(3, "height", -2), "frames[3].height: -2 out of range 1..16384", ""},
		{"step string", frameSet(0, "step", "12"), "frames[0].step: want integer, got string", ""},
		{"step negative", frameSet(0, "step", -12), "frames[0].step: must not be negative, got -12", ""},
		{"step below row", frameSet(2, "step", 11), "frames[2].step: 11 is less than width × bytes a pixel = 4 × 3 = 12", ""},
		{"data missing", frameDel(0, "data"), "frames[0].data: required", ""},
		{"data string", frameSet(0, "data", "\x00\x01"),
			"frames[0].data: want bin, got string (send bytes as msgpack bin, not str)", ""},
		{"data array", frameSet(0, "data", []any{1, 2}), "frames[0].data: want bin, got array", ""},
		{"data empty", frameSet(0, "data", []byte{}), "frames[0].data: must not be empty", ""},
		{"data short of width×height×channels", frameSet(2, "data", make([]byte, 23)),
			"frames[2].data: got 23 bytes, want 24 (width 4 × height 2 × 3 bytes a pixel for rgb8)", ""},
		{"data long of width×height×channels", frameSet(2, "data", make([]byte, 25)),
			"frames[2].data: got 25 bytes, want 24 (width 4 × height 2 × 3 bytes a pixel for rgb8)", ""},
		{"mono8 data of rgb8 size", frameSet(2, "encoding", "mono8"),
			"frames[2].data: got 24 bytes, want 8 (width 4 × height 2 × 1 bytes a pixel for mono8)", ""},
		{"data not step×height", frameSet(2, "step", 16), "frames[2].data: got 24 bytes, want 32 (step 16 × height 2)", ""},

		// Ego history.
		{"ego_history missing", del("ego_history"), "ego_history: required", ""},
		{"ego_history nil", set("ego_history", nil), "ego_history: required, got nil", ""},
		{"ego_history map", set("ego_history", map[string]any{}), "ego_history: want array, got map", ""},
		{"pose not map", set("ego_history", []any{[]any{1, 2, 3}}), "ego_history[0]: want map, got array", ""},
		{"pose stamp missing", poseDel(3, "stamp_ns"), "ego_history[3].stamp_ns: required", ""},
		{"pose stamp float", poseSet(3, "stamp_ns", 1.5e18), "ego_history[3].stamp_ns: want integer, got float", ""},
		{"xyz missing", poseDel(2, "xyz"), "ego_history[2].xyz: required", ""},
		{"xyz 2 numbers", poseSet(2, "xyz", []any{1.0, 2.0}), "ego_history[2].xyz: want 3 numbers, got 2", ""},
		{"xyz 4 numbers", poseSet(2, "xyz", []any{1.0, 2.0, 3.0, 4.0}), "ego_history[2].xyz: want 3 numbers, got 4", ""},
		{"xyz string", poseSet(2, "xyz", "1,2,3"), "ego_history[2].xyz: want array of 3 numbers, got string", ""},
		{"xyz element string", poseSet(1, "xyz", []any{1.0, 2.0, "3"}), "ego_history[1].xyz[2]: want number, got string", ""},
		{"xyz element nil", poseSet(1, "xyz", []any{nil, 2.0, 3.0}), "ego_history[1].xyz[0]: want number, got nil", ""},
		{"xyz NaN", poseSet(4, "xyz", []any{0.0, nan, 0.0}), "ego_history[4].xyz[1]: not finite", ""},
		{"xyz -Inf", poseSet(4, "xyz", []any{-inf, 0.0, 0.0}), "ego_history[4].xyz[0]: not finite", ""},
		{"xyz float32 +Inf", poseSet(15, "xyz", []any{float32(0), float32(0), float32(inf)}), "ego_history[15].xyz[2]: not finite", ""},
		{"rot 8 numbers", poseSet(0, "rot", []any{1, 0, 0, 0, 1, 0, 0, 0}), "ego_history[0].rot: want 9 numbers, got 8", ""},
		{"rot 3x3 nested", poseSet(0, "rot", []any{[]any{1, 0, 0}, []any{0, 1, 0}, []any{0, 0, 1}}),
			"ego_history[0].rot: want 9 numbers, got 3", ""},
		{"rot Inf", poseSet(5, "rot", []any{1, 0, 0, 0, 1, 0, 0, 0, inf}), "ego_history[5].rot[8]: not finite", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := generic(t, mustMarshal(t, sampleRequest()))
			tc.edit(m)
			_, err := msgs.DecodeInferRequest(encode(t, m))
			code := tc.code
			if code == "" {
				code = msgs.CodeBadRequest
			}
			requireFieldError(t, err, tc.want, code)
		})
	}
}

func frameSetAll(i int, v any) func(map[string]any) {
	return func(m map[string]any) { m["frames"].([]any)[i] = v }
}

func TestDecodeMalformed(t *testing.T) {
	valid := mustMarshal(t, sampleRequest())
	deep := []byte{0x81, 0xa1, 'x'}
	for range 40 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0x01)
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"nil", nil, "malformed msgpack: empty message"},
		{"empty", []byte{}, "malformed msgpack: empty message"},
		{"invalid code", []byte{0xc1}, "malformed msgpack: invalid code 0xc1"},
		{"array", []byte{0x93, 1, 2, 3}, "message must be a map, got array"},
		{"string", []byte{0xa3, 'a', 'b', 'c'}, "message must be a map, got string"},
		{"integer", []byte{0x07}, "message must be a map, got integer"},
		{"nil value", []byte{0xc0}, "message must be a map, got nil"},
		{"truncated value", []byte{0x81, 0xa1, 'v'}, "v: malformed msgpack: unexpected end of data"},
		{"truncated int", []byte{0x81, 0xa1, 'v', 0xcd, 0x01}, "v: malformed msgpack: unexpected end of data"},
		{"truncated key", []byte{0x81, 0xa3, 'v'}, "malformed msgpack: 3 bytes announced, 1 bytes left"},
		{"truncated message", valid[:len(valid)-3], ""},
		{"map longer than message", []byte{0x82, 0xa1, 'v', 0x01}, "malformed msgpack: 2 map entries announced, 3 bytes left"},
		{"huge array", []byte{0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff},
			"x: malformed msgpack: 4294967295 array elements announced, 0 bytes left"},
		{"huge bin", []byte{0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff},
			"x: malformed msgpack: 4294967295 bytes announced, 0 bytes left"},
		{"huge str", []byte{0x81, 0xa1, 'x', 0xdb, 0xff, 0xff, 0xff, 0xff},
			"x: malformed msgpack: 4294967295 bytes announced, 0 bytes left"},
		{"huge ext", []byte{0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x05},
			"x: malformed msgpack: 4294967295 bytes announced, 0 bytes left"},
		{"huge map", []byte{0x81, 0xa1, 'x', 0xdf, 0xff, 0xff, 0xff, 0xff},
			"x: malformed msgpack: 4294967295 map entries announced, 0 bytes left"},
		{"trailing bytes", append(append([]byte{}, valid...), 0x00, 0x00), "malformed msgpack: 2 byte(s) after the end of the message"},
		{"two messages", append(append([]byte{}, valid...), valid...), ""},
		{"duplicate key", []byte{0x82, 0xa1, 'v', 0x01, 0xa1, 'v', 0x01}, "v: duplicate key"},
		{"too deep", deep, "x" + strings.Repeat("[0]", 31) + ": nested deeper than 32 levels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := msgs.DecodeInferRequest(tc.in)
			require.Error(t, err)
			var fe *msgs.FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, msgs.CodeBadRequest, fe.Code)
			if tc.want != "" {
				require.Equal(t, tc.want, err.Error())
			} else {
				require.Contains(t, err.Error(), "malformed msgpack")
			}
		})
	}
}

// Every decoder insists on the version.
func TestDecodersNeedVersion(t *testing.T) {
	decoders := map[string]func([]byte) error{
		"frame":   func(b []byte) error { _, err := msgs.DecodeFrame(b); return err },
		"request": func(b []byte) error { _, err := msgs.DecodeInferRequest(b); return err },
		"plan":    func(b []byte) error { _, err := msgs.DecodePlan(b); return err },
		"error":   func(b []byte) error { _, err := msgs.DecodeError(b); return err },
		"status":  func(b []byte) error { _, err := msgs.DecodeStatus(b); return err },
		"reply":   func(b []byte) error { _, _, err := msgs.DecodeReply(b); return err },
	}
	for name, decode := range decoders {
		t.Run(name, func(t *testing.T) {
			requireFieldError(t, decode([]byte{0x80}), "v: required", msgs.CodeBadRequest)
			requireFieldError(t, decode(encode(t, map[string]any{"v": 3})),
				"v: unsupported protocol version 3 (want 1)", msgs.CodeUnsupported)
			requireFieldError(t, decode([]byte{0x90}), "message must be a map, got array", msgs.CodeBadRequest)
		})
	}
}

// Unknown keys, at any level and of any type, are skipped.
func TestUnknownKeysIgnored(t *testing.T) {
	want := sampleRequest()
	m := generic(t, mustMarshal(t, want))
	m["priority"] = "high"
	m["extensions"] = map[string]any{"a": []any{1, "x", nil, map[string]any{"b": 2.5}}}
	m["when"] = time.Unix(1, 0) // an ext value
	m["frames"].([]any)[0].(map[string]any)["exposure_us"] = 800
	m["ego_history"].([]any)[0].(map[string]any)["covariance"] = []any{0.1, 0.2}
	got, err := msgs.DecodeInferRequest(encode(t, m))
	require.NoError(t, err)
	require.Equal(t, versioned(want), *got)

	// Keys that are not strings are never protocol keys.
	b := encode(t, map[any]any{"v": 1, 7: "seven", "id": "r", "use_latest": true, "ego_history": []any{}})
	got, err = msgs.DecodeInferRequest(b)
	require.NoError(t, err)
	require.Equal(t, msgs.InferRequest{V: 1, ID: "r", UseLatest: true}, *got)
}

// Optional keys sent as nil count as absent.
func TestNilOptionalIsAbsent(t *testing.T) {
	b := encode(t, map[string]any{"v": 1, "id": "r", "frames": nil, "use_latest": true, "ego_history": []any{},
		"prompt": nil, "max_reasoning_tokens": nil, "deadline_ms": nil})
	got, err := msgs.DecodeInferRequest(b)
	require.NoError(t, err)
	require.Equal(t, msgs.InferRequest{V: 1, ID: "r", UseLatest: true}, *got)
}

// Integers may come in any msgpack width and numbers as floats or integers,
// as other languages' encoders send them.
func TestNumberEncodings(t *testing.T) {
	b := encode(t, map[string]any{
		"v": uint8(1), "id": "r", "use_latest": true, "deadline_ms": uint16(300), "max_reasoning_tokens": int32(40),
		"ego_history": []any{
			map[string]any{"stamp_ns": uint64(t0), "xyz": []any{float32(1.5), int8(-2), uint32(3)},
				"rot": []any{1, 0, 0, 0, 1.0, 0, 0, 0, float32(1)}},
			map[string]any{"stamp_ns": int64(-5), "xyz": []any{0, 0, 0}, "rot": []any{1, 0, 0, 0, 1, 0, 0, 0, 1}},
		},
	})
	got, err := msgs.DecodeInferRequest(b)
	require.NoError(t, err)
	require.Equal(t, msgs.InferRequest{V: 1, ID: "r", UseLatest: true, DeadlineMs: 300, MaxReasoningTokens: 40,
		EgoHistory: []msgs.EgoPose{
			{StampNs: t0, XYZ: [3]float64{1.5, -2, 3}, Rot: identity},
			{StampNs: -5, Rot: identity},
		}}, *got)

	f, err := msgs.DecodeFrame(encode(t, map[string]any{"v": int64(1), "camera": "c", "stamp_ns": uint32(7),
		"seq": int8(3), "encoding": "mono8", "width": uint16(2), "height": int16(2), "step": uint8(4),
		"data": make([]byte, 8)}))
	require.NoError(t, err)
	require.Equal(t, msgs.Frame{V: 1, Camera: "c", StampNs: 7, Seq: 3, Encoding: msgs.EncodingMono8,
		Width: 2, Height: 2, Step: 4, Data: make([]byte, 8)}, *f)
}

func TestDecodeFrameBad(t *testing.T) {
	base := func() map[string]any { return generic(t, mustMarshal(t, rawFrame("front_wide_120fov", t0, 4, 2))) }
	m := base()
	delete(m, "v")
	_, err := msgs.DecodeFrame(encode(t, m)) // a published frame needs its version
	requireFieldError(t, err, "v: required", msgs.CodeBadRequest)

	m = base()
	m["width"] = "4"
	_, err = msgs.DecodeFrame(encode(t, m))
	requireFieldError(t, err, "width: want integer, got string", msgs.CodeBadRequest)

	m = base()
	m["data"] = make([]byte, 5)
	_, err = msgs.DecodeFrame(encode(t, m))
	requireFieldError(t, err, "data: got 5 bytes, want 24 (width 4 × height 2 × 3 bytes a pixel for rgb8)", msgs.CodeBadRequest)
}

func TestDecodePlanBad(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"trajectory missing", del("trajectory"), "trajectory: required"},
		{"trajectory array", set("trajectory", []any{}), "trajectory: want map, got array"},
		{"dt missing", func(m map[string]any) { delete(m["trajectory"].(map[string]any), "dt") }, "trajectory.dt: required"},
		{"waypoint short", func(m map[string]any) { m["trajectory"].(map[string]any)["xyz"].([]any)[3] = []any{1, 2} },
			"trajectory.xyz[3]: want 3 numbers, got 2"},
		{"rot count", func(m map[string]any) {
			tr := m["trajectory"].(map[string]any)
			tr["rot"] = tr["rot"].([]any)[:63]
		}, "trajectory.rot: got 63 rotations for 64 waypoints"},
		{"action long", func(m map[string]any) { m["actions"].([]any)[0] = []any{1, 2, 3} }, "actions[0]: want 2 numbers, got 3"},
		{"action count", func(m map[string]any) { m["actions"] = m["actions"].([]any)[1:] }, "actions: got 63 actions for 64 waypoints"},
		{"action NaN", func(m map[string]any) { m["actions"].([]any)[9] = []any{0, math.NaN()} }, "actions[9][1]: not finite"},
		{"dt zero", func(m map[string]any) { m["trajectory"].(map[string]any)["dt"] = 0 }, "trajectory.dt: must be positive and finite, got 0"},
		{"timing missing", func(m map[string]any) { delete(m["timing_ms"].(map[string]any), "total") }, "timing_ms.total: required"},
		{"timing negative", func(m map[string]any) { m["timing_ms"].(map[string]any)["vision"] = -1 },
			"timing_ms.vision: must be finite and non-negative, got -1"},
		{"budget negative", set("budget_bytes", -1), "budget_bytes: want non-negative integer, got -1"},
		{"reasoning missing", del("reasoning"), "reasoning: required"},
		{"id empty", set("id", ""), "id: must not be empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := generic(t, mustMarshal(t, samplePlan()))
			tc.edit(m)
			_, err := msgs.DecodePlan(encode(t, m))
			requireFieldError(t, err, tc.want, msgs.CodeBadRequest)
		})
	}
}

func TestDecodeErrorBad(t *testing.T) {
	_, err := msgs.DecodeError(encode(t, map[string]any{"v": 1, "id": "r"}))
	requireFieldError(t, err, "error: required", msgs.CodeBadRequest)
	_, err = msgs.DecodeError(encode(t, map[string]any{"v": 1, "id": "r", "error": map[string]any{"code": 4, "message": ""}}))
	requireFieldError(t, err, "error.code: want string, got integer", msgs.CodeBadRequest)
	_, err = msgs.DecodeError(encode(t, map[string]any{"v": 1, "id": "r", "error": map[string]any{"code": "", "message": ""}}))
	requireFieldError(t, err, "error.code: must not be empty", msgs.CodeBadRequest)
}

func TestDecodeStatusBad(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"node missing", del("node"), "node: required"},
		{"node empty", set("node", ""), "node: must not be empty"},
		{"queue_depth negative", set("queue_depth", -1), "queue_depth: must not be negative, got -1"},
		{"gpu string", set("gpu", "h200"), "gpu: want map, got string"},
		{"throttle reason integer", func(m map[string]any) { m["gpu"].(map[string]any)["throttle_reasons"] = []any{"a", 3} },
			"gpu.throttle_reasons[1]: want string, got integer"},
		{"temperature float", func(m map[string]any) { m["gpu"].(map[string]any)["temperature_c"] = 41.5 },
			"gpu.temperature_c: want integer, got float"},
		{"counter negative", func(m map[string]any) { m["counters"].(map[string]any)["plans"] = -1 },
			"counters.plans: want non-negative integer, got -1"},
		{"plan summary bytes string", func(m map[string]any) { m["plan"].(map[string]any)["host_bytes"] = "1G" },
			"plan.host_bytes: want integer, got string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := generic(t, mustMarshal(t, sampleStatus()))
			tc.edit(m)
			_, err := msgs.DecodeStatus(encode(t, m))
			requireFieldError(t, err, tc.want, msgs.CodeBadRequest)
		})
	}
}

// Odd keys are quoted in error paths, and long ones cut short.
func TestOddKeysInPaths(t *testing.T) {
	long := strings.Repeat("k", 100)
	b := []byte{0x82, 0xa1, 'v', 0x01, 0xa6, 's', 'p', ' ', 'a', 'c', 'e', 0x81, 0xd9, 100}
	b = append(b, long...)
	b = append(b, 0xa3, 'x') // a string of 3 bytes with 1 left
	_, err := msgs.DecodeInferRequest(b)
	requireFieldError(t, err, `["sp ace"]["`+strings.Repeat("k", 64)+`..."]: malformed msgpack: 3 bytes announced, 1 bytes left`,
		msgs.CodeBadRequest)

	// A value under a key that is not a string.
	_, err = msgs.DecodeInferRequest([]byte{0x82, 0xa1, 'v', 0x01, 0x05, 0x92, 0x01})
	requireFieldError(t, err, "[<non-string key>]: malformed msgpack: 2 array elements announced, 1 bytes left",
		msgs.CodeBadRequest)
}
