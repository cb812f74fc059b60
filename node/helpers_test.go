package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// waitFor bounds every wait on a condition in these tests.
const waitFor = 10 * time.Second

// testCameras, testFrames and testPeriod describe testEngine's model.
var testCameras = []string{"left", "right"}

const (
	testFrames   = 2
	testPeriod   = 100 * time.Millisecond
	testEgoPoses = 2
	testBudget   = 8 << 30
)

// testEngine is a deterministic engine. It decodes jpeg and png frames with
// the standard library (reporting corrupt ones with BadFrame) and answers
// with a plan whose reasoning lists the stamps of the frames it saw. When
// gate is set, each inference announces itself on started and waits for a
// value on gate (or for its context).
type testEngine struct {
	gate    chan struct{}
	started chan string
	// plan, when set, replaces the computed plan (to return invalid ones).
	plan func(obs *Observation) (*msgs.Plan, error)

	mu    sync.Mutex
	calls []string // request ids, in order
}

func (e *testEngine) Info() EngineInfo {
	return EngineInfo{
		Model: "test-vla", Cameras: testCameras, FramesPerCamera: testFrames, FramePeriod: testPeriod,
		EgoPoses: testEgoPoses, BudgetBytes: testBudget,
		Plan: &msgs.PlanSummary{Mode: "test", PredictedMs: 1},
	}
}

func (e *testEngine) Infer(ctx context.Context, obs *Observation) (*msgs.Plan, error) {
	e.mu.Lock()
	e.calls = append(e.calls, obs.RequestID)
	e.mu.Unlock()
	if e.gate != nil {
		e.started <- obs.RequestID
		select {
		case <-e.gate:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting at the gate: %w", ctx.Err())
		}
	}
	for i, f := range obs.Frames {
		var err error
		switch f.Encoding {
		case msgs.EncodingJPEG:
			_, err = jpeg.Decode(bytes.NewReader(f.Data))
		case msgs.EncodingPNG:
			_, err = png.Decode(bytes.NewReader(f.Data))
		}
		if err != nil {
			return nil, BadFrame(i, fmt.Errorf("decoding %s: %w", f.Encoding, err))
		}
	}
	if e.plan != nil {
		return e.plan(obs)
	}
	stamps := make([]string, len(obs.Frames))
	for i, f := range obs.Frames {
		stamps[i] = fmt.Sprint(f.StampNs)
	}
	const n = 4
	p := &msgs.Plan{
		Trajectory:    msgs.Trajectory{DT: 0.1},
		Reasoning:     strings.Join(stamps, " "),
		TimingMs:      msgs.Timing{Preprocess: 1, Vision: 2, Prefill: 3, Decode: 4, Diffusion: 5},
		VRAMPeakBytes: 1 << 30,
	}
	for i := range n {
		p.Trajectory.XYZ = append(p.Trajectory.XYZ, [3]float64{float64(i + 1), 0, 0})
		p.Trajectory.Rot = append(p.Trajectory.Rot, [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1})
		p.Actions = append(p.Actions, [2]float64{0.5, 0})
	}
	return p, nil
}

func (e *testEngine) callIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

// gated returns a test engine that holds each inference until released.
func gated() *testEngine {
	return &testEngine{gate: make(chan struct{}), started: make(chan string, 16)}
}

// awaitStart waits until the engine started the inference of request id.
func (e *testEngine) awaitStart(t *testing.T, id string) {
	t.Helper()
	select {
	case got := <-e.started:
		require.Equal(t, id, got, "inference started")
	case <-time.After(waitFor):
		t.Fatalf("inference of %s did not start", id)
	}
}

// release lets one held inference finish.
func (e *testEngine) release() { e.gate <- struct{}{} }

// runServer starts an in-process NATS server on a free port with JetStream
// in a temporary directory.
func runServer(t testing.TB, edit ...func(*server.Options)) *server.Server {
	t.Helper()
	s, _ := runServerOpts(t, edit...)
	return s
}

// runServerOpts is runServer that also returns a copy of the options.
func runServerOpts(t testing.TB, edit ...func(*server.Options)) (*server.Server, *server.Options) {
	t.Helper()
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	for _, f := range edit {
		f(&opts)
	}
	s := natstest.RunServer(&opts)
	t.Cleanup(s.Shutdown)
	cp := opts
	return s, &cp
}

// startNode starts a node for engine on srv.
func startNode(t *testing.T, srv *server.Server, engine Engine, opts ...Option) *Node {
	t.Helper()
	opts = append([]Option{WithName("gpu-a"), WithNATSURL(srv.ClientURL()), WithReconnectWait(20 * time.Millisecond)}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	n, err := Start(ctx, engine, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n
}

// connect returns a client connection to url.
func connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// rawFrame returns a valid 2×2 mono8 frame.
func rawFrame(camera string, stamp int64) msgs.Frame {
	return msgs.Frame{Camera: camera, StampNs: stamp, Encoding: msgs.EncodingMono8, Width: 2, Height: 2, Data: []byte{1, 2, 3, 4}}
}

// goodFrames returns frames for every camera, camera-major, oldest first,
// the newest at t0 (ns).
func goodFrames(t0 int64) []msgs.Frame {
	var fs []msgs.Frame
	for _, c := range testCameras {
		for k := range testFrames {
			fs = append(fs, rawFrame(c, t0-int64(testFrames-1-k)*int64(testPeriod)))
		}
	}
	return fs
}

// ego returns n identity poses, the last at t0.
func ego(n int, t0 int64) []msgs.EgoPose {
	out := make([]msgs.EgoPose, n)
	for i := range out {
		out[i] = msgs.EgoPose{StampNs: t0 - int64(n-1-i)*int64(testPeriod), Rot: [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}}
	}
	return out
}

// goodRequest returns a valid request with explicit frames.
func goodRequest(id string, t0 int64) *msgs.InferRequest {
	return &msgs.InferRequest{ID: id, Frames: goodFrames(t0), EgoHistory: ego(testEgoPoses, t0)}
}

// latestRequest returns a valid use_latest request.
func latestRequest(id string) *msgs.InferRequest {
	return &msgs.InferRequest{ID: id, UseLatest: true, EgoHistory: ego(testEgoPoses, 0)}
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgs.Marshal(v)
	require.NoError(t, err)
	return b
}

// request sends raw bytes and decodes the reply.
func requestRaw(t *testing.T, nc *nats.Conn, subject string, data []byte) (*msgs.Plan, *msgs.Error) {
	t.Helper()
	m, err := nc.Request(subject, data, waitFor)
	require.NoError(t, err, "request on %s", subject)
	p, e, err := msgs.DecodeReply(m.Data)
	require.NoError(t, err, "reply must be a valid Plan or Error")
	return p, e
}

// request sends req and decodes the reply.
func request(t *testing.T, nc *nats.Conn, subject string, req *msgs.InferRequest) (*msgs.Plan, *msgs.Error) {
	t.Helper()
	return requestRaw(t, nc, subject, marshal(t, req))
}

// mustPlan sends req and requires a plan.
func mustPlan(t *testing.T, nc *nats.Conn, subject string, req *msgs.InferRequest) *msgs.Plan {
	t.Helper()
	p, e := request(t, nc, subject, req)
	require.Nil(t, e, "want a plan, got error %+v", e)
	return p
}

// asyncRequest sends req with its own inbox and returns a channel that gets
// every reply (a test checks there is exactly one).
type replies struct {
	sub *nats.Subscription
	ch  chan *nats.Msg
}

func sendAsync(t *testing.T, nc *nats.Conn, subject string, req *msgs.InferRequest) *replies {
	t.Helper()
	r := &replies{ch: make(chan *nats.Msg, 8)}
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, r.ch)
	require.NoError(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
	r.sub = sub
	require.NoError(t, nc.PublishRequest(subject, inbox, marshal(t, req)))
	require.NoError(t, nc.Flush())
	return r
}

// one waits for the reply and decodes it.
func (r *replies) one(t *testing.T) (*msgs.Plan, *msgs.Error) {
	t.Helper()
	select {
	case m := <-r.ch:
		p, e, err := msgs.DecodeReply(m.Data)
		require.NoError(t, err)
		return p, e
	case <-time.After(waitFor):
		t.Fatal("no reply")
		return nil, nil
	}
}

// none checks that no further reply arrived, after a round trip through
// the server by conn so that anything already sent has been delivered.
func (r *replies) none(t *testing.T, nc *nats.Conn) {
	t.Helper()
	require.NoError(t, nc.Flush())
	select {
	case m := <-r.ch:
		t.Fatalf("a second reply: %q", m.Data)
	default:
	}
}

// wantError requires an Error with code whose message contains each of msgParts.
func wantError(t *testing.T, p *msgs.Plan, e *msgs.Error, code msgs.Code, msgParts ...string) {
	t.Helper()
	require.Nil(t, p, "want error %s, got a plan", code)
	require.NotNil(t, e)
	require.Equal(t, code, e.Err.Code, "message: %s", e.Err.Message)
	for _, part := range msgParts {
		require.Contains(t, e.Err.Message, part)
	}
}

// eventually waits for cond, failing after waitFor.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// counter returns a Status counter of n.
func counter(n *Node, name string) uint64 { return n.m.counters(n.info.Cameras)[name] }

// jpegBytes returns a small valid JPEG.
func jpegBytes(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 4)), nil))
	return b.Bytes()
}

// pngBytes returns a small valid PNG.
func pngBytes(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 4))))
	return b.Bytes()
}

var errBoom = errors.New("boom")
