package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestRequestReply(t *testing.T) {
	srv := runServer(t)
	n := startNode(t, srv, &testEngine{})
	nc := connect(t, srv.ClientURL())
	plans, err := nc.SubscribeSync(PlansSubject("gpu-a"))
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	t0 := time.Now().UnixNano()
	for _, subject := range []string{InferSubject("gpu-a"), AnyInferSubject} {
		p := mustPlan(t, nc, subject, goodRequest("req-"+subject, t0))
		assert.Equal(t, "req-"+subject, p.ID)
		assert.Equal(t, "gpu-a", p.Node)
		assert.Equal(t, "test-vla", p.Model)
		assert.Equal(t, t0, p.StampNs, "stamp_ns is t0, the newest frame")
		assert.Equal(t, uint64(testBudget), p.BudgetBytes)
		assert.Equal(t, uint64(1<<30), p.VRAMPeakBytes)
		assert.Positive(t, p.TimingMs.Total)
		assert.Equal(t, 3.0, p.TimingMs.Prefill, "the engine's stage timings are kept")
		assert.Len(t, p.Trajectory.XYZ, 4)
		want := fmt.Sprintf("%d %d %d %d", t0-int64(testPeriod), t0, t0-int64(testPeriod), t0)
		assert.Equal(t, want, p.Reasoning, "the engine saw the request's frames, camera-major")

		m, err := plans.NextMsg(waitFor)
		require.NoError(t, err)
		pub, err := msgs.DecodePlan(m.Data)
		require.NoError(t, err)
		assert.Equal(t, p, pub, "the plan is published on vla.<node>.plans")
	}
	assert.Equal(t, uint64(2), counter(n, "plans"))
	assert.Equal(t, uint64(2), counter(n, "requests"))
}

func TestQueueGroupAcrossTwoNodes(t *testing.T) {
	srv := runServer(t)
	startNode(t, srv, &testEngine{}, WithName("gpu-a"))
	startNode(t, srv, &testEngine{}, WithName("gpu-b"))
	nc := connect(t, srv.ClientURL())

	// The queue group hands each request to one node, at random: within 64
	// requests both answer (a 2^-63 chance otherwise), and each request gets
	// one reply.
	seen := map[string]int{}
	for i := 0; i < 64 && len(seen) < 2; i++ {
		r := sendAsync(t, nc, AnyInferSubject, goodRequest(fmt.Sprint("q", i), 1e9))
		p, e := r.one(t)
		require.Nil(t, e)
		seen[p.Node]++
		r.none(t, nc)
	}
	assert.Len(t, seen, 2, "both nodes served vla.infer: %v", seen)

	// vla.<node>.infer reaches that node only.
	for _, name := range []string{"gpu-a", "gpu-b"} {
		for i := range 4 {
			p := mustPlan(t, nc, InferSubject(name), goodRequest(fmt.Sprint(name, i), 1e9))
			assert.Equal(t, name, p.Node)
		}
	}
}

// publishFrames publishes frames on their cameras' subjects of node.
func publishFrames(t *testing.T, nc *nats.Conn, node string, frames ...msgs.Frame) {
	t.Helper()
	for _, f := range frames {
		require.NoError(t, nc.Publish(FramesSubject(node, f.Camera), marshal(t, &f)))
	}
}

func TestUseLatest(t *testing.T) {
	srv := runServer(t)
	n := startNode(t, srv, &testEngine{})
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")

	// Nothing published yet.
	p, e := request(t, nc, subject, latestRequest("early"))
	wantError(t, p, e, msgs.CodeUnsupported, "use_latest: no synchronized frames", "camera left has no frame")

	// The publisher's frames come before its request on one connection: the
	// node must have stored them all when it assembles the observation.
	base := time.Now().UnixNano()
	ms := int64(time.Millisecond)
	for k := range 5 {
		publishFrames(t, nc, "gpu-a", rawFrame("left", base+int64(k)*100*ms), rawFrame("right", base+int64(k)*100*ms+3*ms))
	}
	p = mustPlan(t, nc, subject, latestRequest("latest"))
	want := fmt.Sprintf("%d %d %d %d", base+300*ms, base+400*ms, base+303*ms, base+403*ms)
	assert.Equal(t, want, p.Reasoning, "the two newest synchronized frames of each camera")
	assert.Equal(t, base+403*ms, p.StampNs, "t0 is the newest frame used")
	assert.Equal(t, uint64(10), counter(n, "frames_received"))

	// A camera that falls behind by more than the tolerance breaks the sync.
	publishFrames(t, nc, "gpu-a", rawFrame("left", base+500*ms), rawFrame("left", base+600*ms), rawFrame("left", base+700*ms))
	p = mustPlan(t, nc, subject, latestRequest("still"))
	assert.Equal(t, want, p.Reasoning, "t0 follows the slowest camera")
	publishFrames(t, nc, "gpu-a", rawFrame("right", base+603*ms))
	p, e = request(t, nc, subject, latestRequest("gap"))
	wantError(t, p, e, msgs.CodeUnsupported, "camera right has no frame within ±50ms of t0−100ms")
}

// checkingEngine is a test engine with a FrameChecker that refuses frames
// whose data starts with "bomb".
type checkingEngine struct{ testEngine }

func (e *checkingEngine) CheckFrame(f *msgs.Frame) error {
	if bytes.HasPrefix(f.Data, []byte("bomb")) {
		return errors.New("the header says 60000×60000")
	}
	return nil
}

// A published frame the engine's FrameChecker refuses is dropped and
// counted as bad_header; it never reaches a use_latest request, which is
// planned from the good frames around it.
func TestFramesBadHeader(t *testing.T) {
	srv := runServer(t)
	n := startNode(t, srv, &checkingEngine{}, WithName("gpu-a"))
	nc := connect(t, srv.ClientURL())
	base := time.Now().UnixNano()
	ms := int64(time.Millisecond)
	poisoned := func(camera string, stamp int64) msgs.Frame {
		f := rawFrame(camera, stamp)
		f.Data = []byte("bomb")
		return f
	}
	publishFrames(t, nc, "gpu-a", rawFrame("left", base), rawFrame("right", base+3*ms),
		rawFrame("left", base+100*ms), rawFrame("right", base+103*ms),
		poisoned("left", base+200*ms), poisoned("right", base+203*ms))
	eventually(t, func() bool { return counter(n, "frames_rejected_bad_header") == 2 }, "2 frames dropped for their header")
	assert.Equal(t, uint64(2), counter(n, "frames_rejected"))
	assert.Equal(t, uint64(4), counter(n, "frames_received"))

	p := mustPlan(t, nc, InferSubject("gpu-a"), latestRequest("latest"))
	assert.Equal(t, fmt.Sprintf("%d %d %d %d", base, base+100*ms, base+3*ms, base+103*ms), p.Reasoning, "the good frames")

	// A poisoned frame sent as a request is answered with the checker's error.
	f := poisoned("left", base+300*ms)
	m, err := nc.Request(FramesSubject("gpu-a", "left"), marshal(t, &f), waitFor)
	require.NoError(t, err)
	_, e, err := msgs.DecodeReply(m.Data)
	require.NoError(t, err)
	wantError(t, nil, e, msgs.CodeBadRequest, "data: the header says 60000×60000")
	assert.Equal(t, uint64(3), counter(n, "frames_rejected_bad_header"))
}

func TestFramesRejected(t *testing.T) {
	srv := runServer(t)
	n := startNode(t, srv, &testEngine{})
	nc := connect(t, srv.ClientURL())

	bad := rawFrame("left", 1)
	bad.Data = []byte{1, 2, 3} // 3 bytes for a 2×2 mono8 frame
	publishFrames(t, nc, "gpu-a", bad)
	require.NoError(t, nc.Publish(FramesSubject("gpu-a", "right"), marshal(t, rawFrame("left", 1))))
	require.NoError(t, nc.Publish(FramesSubject("gpu-a", "rear"), marshal(t, rawFrame("rear", 1))))
	require.NoError(t, nc.Publish(FramesSubject("gpu-a", "left"), []byte{0xc1}))
	eventually(t, func() bool { return counter(n, "frames_rejected") == 4 }, "4 rejected frames")
	assert.Equal(t, 2.0, n.m.framesRejected.Value(frameBadRequest))
	assert.Equal(t, 1.0, n.m.framesRejected.Value(frameCameraMismatch))
	assert.Equal(t, 1.0, n.m.framesRejected.Value(frameUnknownCamera))

	// A frame sent as a request is answered with the problem.
	m, err := nc.Request(FramesSubject("gpu-a", "left"), marshal(t, &bad), waitFor)
	require.NoError(t, err)
	_, e, err := msgs.DecodeReply(m.Data)
	require.NoError(t, err)
	require.NotNil(t, e)
	assert.Equal(t, msgs.CodeBadRequest, e.Err.Code)
	assert.Contains(t, e.Err.Message, "data: got 3 bytes, want 4")
	assert.Equal(t, uint64(0), counter(n, "frames_received"))
}

func TestEngineFailures(t *testing.T) {
	srv := runServer(t)
	e := &testEngine{}
	startNode(t, srv, e)
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")

	cases := []struct {
		name string
		plan func(*Observation) (*msgs.Plan, error)
		code msgs.Code
		msg  string
	}{
		{"error", func(*Observation) (*msgs.Plan, error) { return nil, errBoom }, msgs.CodeInternal, "engine: boom"},
		{"panic", func(*Observation) (*msgs.Plan, error) { panic("kaboom") }, msgs.CodeInternal, "engine panicked: kaboom"},
		{"nil plan", func(*Observation) (*msgs.Plan, error) { return nil, nil }, msgs.CodeInternal, "neither a plan nor an error"},
		{"invalid plan", func(*Observation) (*msgs.Plan, error) {
			return &msgs.Plan{Trajectory: msgs.Trajectory{DT: 0.1, XYZ: [][3]float64{{0, 0, 0}}}}, nil
		}, msgs.CodeInternal, "invalid plan: trajectory.rot: got 0 rotations for 1 waypoints"},
		{"unsupported", func(*Observation) (*msgs.Plan, error) {
			return nil, fmt.Errorf("prompt too long for the model: %w", ErrUnsupported)
		}, msgs.CodeUnsupported, "prompt too long"},
		{"bad input", func(*Observation) (*msgs.Plan, error) {
			return nil, fmt.Errorf("prompt: not UTF-8: %w", ErrBadInput)
		}, msgs.CodeBadRequest, "prompt: not UTF-8"},
		{"deadline", func(*Observation) (*msgs.Plan, error) { return nil, context.DeadlineExceeded }, msgs.CodeDeadlineExceeded, "during inference"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.plan = c.plan // the node is idle between requests
			p, er := request(t, nc, subject, goodRequest(c.name, 1e9))
			wantError(t, p, er, c.code, c.msg)
		})
	}
	e.plan = nil
	mustPlan(t, nc, subject, goodRequest("after", 1e9))
}

// TestCameraOrder checks camera_order: frames sent in another order or a
// subset are accepted and reach the engine with their order, use_latest
// picks the named cameras, and an unknown camera is a bad_request naming
// the field.
func TestCameraOrder(t *testing.T) {
	srv := runServer(t)
	eng := &testEngine{}
	eng.plan = func(obs *Observation) (*msgs.Plan, error) {
		var stamps []string
		for _, f := range obs.Frames {
			stamps = append(stamps, f.Camera+"@"+fmt.Sprint(f.StampNs))
		}
		return &msgs.Plan{Trajectory: msgs.Trajectory{DT: 0.1},
			Reasoning: strings.Join(obs.CameraOrder, ",") + " " + strings.Join(stamps, " ") + " " + obs.NavText}, nil
	}
	startNode(t, srv, eng)
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")

	const t0 = int64(1_000_000_000)
	swapped := goodRequest("swapped", t0)
	swapped.Frames = append(append([]msgs.Frame(nil), swapped.Frames[testFrames:]...), swapped.Frames[:testFrames]...)
	swapped.CameraOrder = []string{"right", "left"}
	swapped.NavText = "Turn left in 30m"
	p := mustPlan(t, nc, subject, swapped)
	assert.True(t, strings.HasPrefix(p.Reasoning, "right,left right@"), p.Reasoning)
	assert.True(t, strings.HasSuffix(p.Reasoning, " Turn left in 30m"), p.Reasoning)

	one := goodRequest("one", t0)
	one.Frames = one.Frames[testFrames:]
	one.CameraOrder = []string{"right"}
	p = mustPlan(t, nc, subject, one)
	assert.True(t, strings.HasPrefix(p.Reasoning, "right right@"), p.Reasoning)

	p = mustPlan(t, nc, subject, goodRequest("default", t0))
	assert.True(t, strings.HasPrefix(p.Reasoning, "left,right left@"), "without camera_order: the model's cameras")

	base := time.Now().UnixNano()
	ms := int64(time.Millisecond)
	for k := range 3 {
		publishFrames(t, nc, "gpu-a", rawFrame("left", base+int64(k)*100*ms), rawFrame("right", base+int64(k)*100*ms+3*ms))
	}
	latest := latestRequest("latest")
	latest.CameraOrder = []string{"right"}
	p = mustPlan(t, nc, subject, latest)
	assert.Equal(t, fmt.Sprintf("right right@%d right@%d ", base+103*ms, base+203*ms), p.Reasoning)

	for _, c := range []struct {
		name string
		edit func(*msgs.InferRequest)
		want string
	}{
		{"unknown camera", func(r *msgs.InferRequest) { r.CameraOrder = []string{"left", "roof"} }, `camera_order[1]: unknown camera "roof"; the model takes left, right`},
		{"frames of the other order", func(r *msgs.InferRequest) { r.CameraOrder = []string{"right", "left"} }, `frames[0].camera: got "left", want "right"`},
		{"too few frames", func(r *msgs.InferRequest) {
			r.CameraOrder = []string{"left", "right"}
			r.Frames = r.Frames[:testFrames]
		}, "frames: got 2 frames, want 4"},
		{"a camera not named", func(r *msgs.InferRequest) { r.CameraOrder = []string{"left"}; r.Frames = r.Frames[testFrames:] }, `frames[0].camera: camera "right" is not in camera_order (left)`},
	} {
		r := goodRequest(c.name, t0)
		c.edit(r)
		p, e := request(t, nc, subject, r)
		wantError(t, p, e, msgs.CodeBadRequest, c.want)
	}
}
