package node

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"vlanode/msgs"
)

// rawMap encodes a map with msgpack, for requests msgs.Marshal would not
// produce.
func rawMap(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(m)
	require.NoError(t, err)
	return b
}

func TestBadInputs(t *testing.T) {
	srv := runServer(t)
	// The node takes requests up to 64 KiB, below the server's 1 MiB.
	n := startNode(t, srv, &testEngine{}, WithMaxPayload(64<<10))
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")
	t0 := int64(5e9)

	edit := func(f func(r *msgs.InferRequest)) []byte {
		r := goodRequest("bad", t0)
		f(r)
		return marshal(t, r)
	}
	cases := []struct {
		name string
		data []byte
		code msgs.Code
		msg  []string
	}{
		{"malformed msgpack", []byte{0x82, 0xa1, 'v'}, msgs.CodeBadRequest, []string{"malformed msgpack"}},
		{"not a map", []byte{0x01}, msgs.CodeBadRequest, []string{"message must be a map"}},
		{"wrong v", rawMap(t, map[string]any{"v": 2, "id": "x"}), msgs.CodeUnsupported, []string{"v: unsupported protocol version 2 (want 1)"}},
		{"missing id", rawMap(t, map[string]any{"v": 1, "use_latest": true, "ego_history": []any{}}), msgs.CodeBadRequest, []string{"id"}},
		{"mistyped field", rawMap(t, map[string]any{"v": 1, "id": "x", "use_latest": "yes", "ego_history": []any{}}), msgs.CodeBadRequest, []string{"use_latest: want"}},
		{"byte count", edit(func(r *msgs.InferRequest) { r.Frames[3].Data = r.Frames[3].Data[:3] }), msgs.CodeBadRequest,
			[]string{"frames[3].data: got 3 bytes, want 4 (width 2 × height 2 × 1 bytes a pixel for mono8)"}},
		{"step", edit(func(r *msgs.InferRequest) { r.Frames[1].Step = 3 }), msgs.CodeBadRequest,
			[]string{"frames[1].data: got 4 bytes, want 6 (step 3 × height 2)"}},
		{"unknown camera", edit(func(r *msgs.InferRequest) { r.Frames[2].Camera = "rear" }), msgs.CodeBadRequest,
			[]string{`frames[2].camera: unknown camera "rear"; the model takes left, right`}},
		{"camera order", edit(func(r *msgs.InferRequest) { r.Frames[0].Camera, r.Frames[2].Camera = "right", "left" }), msgs.CodeBadRequest,
			[]string{`frames[0].camera: got "right", want "left"`, "cameras in the order left, right"}},
		{"too many frames", edit(func(r *msgs.InferRequest) { r.Frames = append(r.Frames, r.Frames[3]) }), msgs.CodeBadRequest,
			[]string{"frames: got 5 frames, want 4"}},
		{"too few frames", edit(func(r *msgs.InferRequest) { r.Frames = r.Frames[:3] }), msgs.CodeBadRequest,
			[]string{"frames: got 3 frames, want 4"}},
		{"newest first", edit(func(r *msgs.InferRequest) { r.Frames[0], r.Frames[1] = r.Frames[1], r.Frames[0] }), msgs.CodeBadRequest,
			[]string{"frames[1].stamp_ns", "is not after frames[0].stamp_ns", "oldest first"}},
		{"both frames and use_latest", edit(func(r *msgs.InferRequest) { r.UseLatest = true }), msgs.CodeBadRequest,
			[]string{"want frames or use_latest, got both"}},
		{"NaN in ego history", edit(func(r *msgs.InferRequest) { r.EgoHistory[1].XYZ[2] = math.NaN() }), msgs.CodeBadRequest,
			[]string{"ego_history[1].xyz[2]: not finite"}},
		{"ego poses", edit(func(r *msgs.InferRequest) { r.EgoHistory = r.EgoHistory[:1] }), msgs.CodeBadRequest,
			[]string{"ego_history: got 1 poses, want 2"}},
		{"negative deadline", edit(func(r *msgs.InferRequest) { r.DeadlineMs = -1 }), msgs.CodeBadRequest,
			[]string{"deadline_ms: must not be negative"}},
		{"oversized payload", edit(func(r *msgs.InferRequest) { r.Prompt = string(make([]byte, 100<<10)) }), msgs.CodeBadRequest,
			[]string{"exceeds the node's limit of 65536 bytes (--max-payload)"}},
		{"corrupt jpeg", edit(func(r *msgs.InferRequest) {
			r.Frames[2] = msgs.Frame{Camera: "right", StampNs: r.Frames[2].StampNs, Encoding: msgs.EncodingJPEG, Width: 4, Height: 4, Data: jpegBytes(t)[:40]}
		}), msgs.CodeBadRequest, []string{"frames[2]: decoding jpeg:"}},
		{"corrupt png", edit(func(r *msgs.InferRequest) {
			r.Frames[1] = msgs.Frame{Camera: "left", StampNs: r.Frames[1].StampNs, Encoding: msgs.EncodingPNG, Width: 4, Height: 4, Data: []byte("\x89PNG garbage")}
		}), msgs.CodeBadRequest, []string{"frames[1]: decoding png:"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, e := requestRaw(t, nc, subject, c.data)
			wantError(t, p, e, c.code, c.msg...)
			if id := msgs.RequestID(c.data); id != "" {
				assert.Equal(t, id, e.ID, "the reply carries the request's id when it can be read")
			}
		})
	}
	// Valid jpeg and png frames pass, and the node still serves.
	good := edit(func(r *msgs.InferRequest) {
		r.Frames[2] = msgs.Frame{Camera: "right", StampNs: r.Frames[2].StampNs, Encoding: msgs.EncodingJPEG, Width: 4, Height: 4, Data: jpegBytes(t)}
		r.Frames[1] = msgs.Frame{Camera: "left", StampNs: r.Frames[1].StampNs, Encoding: msgs.EncodingPNG, Width: 4, Height: 4, Data: pngBytes(t)}
	})
	p, e := requestRaw(t, nc, subject, good)
	require.Nil(t, e)
	assert.Equal(t, "bad", p.ID)
	assert.Equal(t, float64(len(cases)), n.m.errors.Value(string(msgs.CodeBadRequest))+n.m.errors.Value(string(msgs.CodeUnsupported)))
}

func TestCorruptLatestFrameNamesTheCamera(t *testing.T) {
	srv := runServer(t)
	startNode(t, srv, &testEngine{})
	nc := connect(t, srv.ClientURL())
	ms := int64(time.Millisecond)
	base := time.Now().UnixNano()
	corrupt := msgs.Frame{Camera: "right", StampNs: base + 100*ms, Seq: 7, Encoding: msgs.EncodingJPEG, Width: 4, Height: 4, Data: []byte("not a jpeg")}
	publishFrames(t, nc, "gpu-a", rawFrame("left", base), rawFrame("left", base+100*ms), rawFrame("right", base), corrupt)
	p, e := request(t, nc, InferSubject("gpu-a"), latestRequest("l"))
	wantError(t, p, e, msgs.CodeBadRequest, "latest frame 3 (camera right, seq 7", "decoding jpeg")
}

func TestDeadlineAlreadyPast(t *testing.T) {
	srv := runServer(t)
	// A clock that advances 1 ms at every reading: decoding a request takes
	// "1 ms", so a 1 ms deadline has passed before the request is queued.
	var tick atomic.Int64
	clock := func() time.Time { return time.Unix(0, tick.Add(int64(time.Millisecond))) }
	e := &testEngine{}
	n := startNode(t, srv, e, withClock(clock))
	nc := connect(t, srv.ClientURL())

	r := goodRequest("late", 1e9)
	r.DeadlineMs = 1
	p, er := request(t, nc, InferSubject("gpu-a"), r)
	wantError(t, p, er, msgs.CodeDeadlineExceeded, "deadline of 1 ms passed before the request could be queued")
	assert.Empty(t, e.callIDs(), "the engine never saw it")
	assert.Equal(t, uint64(1), counter(n, "shed_deadline"))
}
