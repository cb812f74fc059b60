package replay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
	"vlanode/node"
	"vlanode/node/record"
)

const waitFor = 10 * time.Second

var testInfo = node.EngineInfo{
	Model: "replay-test", Cameras: []string{"front", "rear"}, FramesPerCamera: 2,
	FramePeriod: 100 * time.Millisecond, EgoPoses: 3, EgoPeriod: 100 * time.Millisecond,
}

// echoEngine answers with a plan whose reasoning lists its frames' stamps.
type echoEngine struct{}

func (echoEngine) Info() node.EngineInfo { return testInfo }

func (echoEngine) Infer(_ context.Context, obs *node.Observation) (*msgs.Plan, error) {
	var b strings.Builder
	for _, f := range obs.Frames {
		fmt.Fprintf(&b, "%s@%d ", f.Camera, f.StampNs)
	}
	return &msgs.Plan{Reasoning: b.String(), TimingMs: msgs.Timing{Preprocess: 1, Vision: 2}}, nil
}

// writeClip writes a folder clip: frames every 100 ms from stamp 1 s, the
// rear camera 5 ms later, and ego poses every 50 ms driving along world y
// (yaw 90°) at 10 m/s.
func writeClip(t *testing.T, frames int) string {
	return writeClipSized(t, frames, 8, 6)
}

// writeClipSized is writeClip with w×h images of noise (which PNG does not
// compress).
func writeClipSized(t *testing.T, frames, w, h int) string {
	t.Helper()
	dir := t.TempDir()
	var img bytes.Buffer
	g := image.NewGray(image.Rect(0, 0, w, h))
	rand.Read(g.Pix)
	require.NoError(t, png.Encode(&img, g))
	for ci, cam := range testInfo.Cameras {
		require.NoError(t, os.Mkdir(filepath.Join(dir, cam), 0o755))
		for k := range frames {
			stamp := int64(1e9) + int64(k)*1e8 + int64(ci)*5e6
			require.NoError(t, os.WriteFile(filepath.Join(dir, cam, fmt.Sprintf("%d.png", stamp)), img.Bytes(), 0o644))
		}
	}
	var ego strings.Builder
	ego.WriteString("stamp_ns,x,y,z,r00,r01,r02,r10,r11,r12,r20,r21,r22\n")
	for k := range 2 * (frames + 5) {
		stamp := int64(0.7e9) + int64(k)*5e7
		y := 10 * float64(stamp) / 1e9
		fmt.Fprintf(&ego, "%d,0,%g,0,0,-1,0,1,0,0,0,0,1\n", stamp, y)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, EgoFile), []byte(ego.String()), 0o644))
	return dir
}

func TestFolderLayout(t *testing.T) {
	dir := writeClip(t, 5)
	f, err := OpenFolder(dir, FolderConfig{Info: testInfo})
	require.NoError(t, err)
	// 10 frames; ticks at 1.105 s (the first full window) … 1.405 s: 4.
	assert.Equal(t, 14, f.Len())
	var kinds []string
	var reqs []*msgs.InferRequest
	for {
		e, err := f.Next(context.Background())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch e.Kind {
		case KindFrame:
			kinds = append(kinds, e.Frame.Camera[:1])
			assert.Equal(t, 8, e.Frame.Width)
			assert.Equal(t, 6, e.Frame.Height)
			assert.Equal(t, msgs.EncodingPNG, e.Frame.Encoding)
		case KindRequest:
			kinds = append(kinds, "R")
			reqs = append(reqs, e.Request)
		}
	}
	assert.Equal(t, "f r f r R f r R f r R f r R", strings.Join(kinds, " "))
	require.Len(t, reqs, 4)
	h := reqs[0].EgoHistory
	require.Len(t, h, 3)
	// At t = 1.105 s the poses are those at 1.0, 0.95 … : the latest at or
	// before 0.905, 1.005 and 1.105 s, i.e. 0.9, 1.0 and 1.1 s.
	assert.Equal(t, []int64{0.9e9, 1.0e9, 1.1e9}, []int64{h[0].StampNs, h[1].StampNs, h[2].StampNs})
	// In the ego frame at t0 the vehicle drove forward (+x): 1 m a 0.1 s.
	assert.InDeltaSlice(t, []float64{-2, 0, 0}, h[0].XYZ[:], 1e-9)
	assert.InDeltaSlice(t, []float64{-1, 0, 0}, h[1].XYZ[:], 1e-9)
	assert.InDeltaSlice(t, []float64{0, 0, 0}, h[2].XYZ[:], 1e-9)
	assert.InDeltaSlice(t, []float64{1, 0, 0, 0, 1, 0, 0, 0, 1}, h[0].Rot[:], 1e-12)
}

func TestFolderErrors(t *testing.T) {
	dir := writeClip(t, 3)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "front", "latest.png"), nil, 0o644))
	_, err := OpenFolder(dir, FolderConfig{Info: testInfo})
	assert.ErrorContains(t, err, "front/latest.png: a frame file is named <stamp_ns>.png")

	dir = writeClip(t, 3)
	require.NoError(t, os.Remove(filepath.Join(dir, EgoFile)))
	_, err = OpenFolder(dir, FolderConfig{Info: testInfo})
	assert.ErrorContains(t, err, "has no ego.csv, and the model needs 3 ego poses")

	dir = writeClip(t, 1)
	_, err = OpenFolder(dir, FolderConfig{Info: testInfo})
	assert.ErrorContains(t, err, "1 frames of camera front, the model needs 2")

	_, err = OpenFolder(t.TempDir(), FolderConfig{Info: testInfo})
	assert.ErrorContains(t, err, "camera front")

	dir = writeClip(t, 3)
	require.NoError(t, os.WriteFile(filepath.Join(dir, EgoFile), []byte("stamp_ns,x,y,z,r00,r01,r02,r10,r11,r12,r20,r21,r22\n1,0,0,0,1,0,0,0,1,0,0,0,NaN\n"), 0o644))
	_, err = OpenFolder(dir, FolderConfig{Info: testInfo})
	assert.ErrorContains(t, err, "ego.csv:2: r22: want a finite number")
}

func TestToEgoFrame(t *testing.T) {
	yaw := func(th float64) [9]float64 {
		c, s := math.Cos(th), math.Sin(th)
		return [9]float64{c, -s, 0, s, c, 0, 0, 0, 1}
	}
	// The vehicle turned left by 90° while moving from (0,0) to (1,1).
	out := ToEgoFrame([]WorldPose{{StampNs: 1, XYZ: [3]float64{0, 0, 0}, Rot: yaw(0)}, {StampNs: 2, XYZ: [3]float64{1, 1, 5}, Rot: yaw(math.Pi / 2)}})
	assert.InDeltaSlice(t, []float64{-1, 1, -5}, out[0].XYZ[:], 1e-12)
	assert.InDelta(t, -math.Pi/2, math.Atan2(out[0].Rot[3], out[0].Rot[0]), 1e-12, "the old heading is 90° to the right")
	assert.InDeltaSlice(t, []float64{0, 0, 0}, out[1].XYZ[:], 1e-12)
	id := yaw(0)
	assert.InDeltaSlice(t, id[:], out[1].Rot[:], 1e-12)
}

func TestPercentileAndSummary(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	assert.Equal(t, 3.0, Percentile(xs, 50))
	assert.Equal(t, 5.0, Percentile(xs, 90))
	assert.Equal(t, 1.0, Percentile(xs, 0))
	assert.True(t, math.IsNaN(Percentile(nil, 50)))

	s := newSummary(Config{Speed: 1})
	s.Frames, s.Requests = 10, 3
	s.addPlan(&msgs.Plan{TimingMs: msgs.Timing{Total: 7}}, 9*time.Millisecond)
	s.fail("overloaded", `superseded by a newer use_latest request ("replay-3"): latest wins`)
	s.fail("unsupported", "use_latest: no synchronized frames: camera rear has no frame within ±50ms of t0−100ms")
	s.fail("overloaded", `superseded by a newer use_latest request ("replay-12"): latest wins`)
	var b strings.Builder
	s.Write(&b)
	out := b.String()
	assert.Contains(t, out, "replayed 10 frames and 3 requests")
	assert.Contains(t, out, "plans: 1")
	assert.Contains(t, out, "errors: 3 (overloaded 2, unsupported 1)")
	assert.Contains(t, out, `  2 × overloaded: superseded by a newer use_latest request ("replay-3"): latest wins`+"\n")
	assert.Contains(t, out, "  1 × unsupported: use_latest: no synchronized frames: camera rear")
	assert.NotContains(t, out, "requests not made", "none were skipped")
	assert.Regexp(t, `round_trip\s+1\s+9.00`, out)

	b.Reset()
	require.NoError(t, s.WriteJSON(&b))
	var js map[string]any
	require.NoError(t, json.Unmarshal([]byte(b.String()), &js))
	assert.Equal(t, 2.0, js["errors"].(map[string]any)["overloaded"])
	assert.Len(t, js["distinct_errors"], 2)
	assert.Equal(t, 9.0, js["latency_ms"].(map[string]any)["round_trip"].(map[string]any)["p50"])
}

// setup runs a server with JetStream and a node on it.
func setup(t *testing.T, edit ...func(*server.Options)) (*nats.Conn, *node.Node) {
	t.Helper()
	opts := natstest.DefaultTestOptions
	opts.Port, opts.JetStream, opts.StoreDir = -1, true, t.TempDir()
	for _, f := range edit {
		f(&opts)
	}
	srv := natstest.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	n, err := node.Start(ctx, echoEngine{}, node.WithName("gpu-a"), node.WithNATSURL(srv.ClientURL()), node.WithQueueBound(64),
		node.WithJobs(node.JobsConfig{}))
	require.NoError(t, err)
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, n
}

func discover(t *testing.T, nc *nats.Conn) node.EngineInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	p, err := node.Discover(ctx, nc, "gpu-a")
	require.NoError(t, err)
	return p.Info
}

func TestPlayFolder(t *testing.T) {
	nc, _ := setup(t)
	info := discover(t, nc)
	for _, c := range []struct {
		name     string
		explicit bool
		fast     bool
	}{{"use_latest fast", false, true}, {"explicit fast", true, true}, {"use_latest real time", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			src, err := OpenFolder(writeClip(t, 5), FolderConfig{Info: info})
			require.NoError(t, err)
			var progress bytes.Buffer
			sum, err := Play(context.Background(), nc, src, Config{
				Node: "gpu-a", Info: info, Explicit: c.explicit, Fast: c.fast, Speed: 4, Progress: &progress,
			})
			require.NoError(t, err)
			assert.Equal(t, 10, sum.Frames)
			assert.Contains(t, progress.String(), "14/14")
			if !c.fast {
				// In real time a request due while the previous one awaits
				// its answer is not made (--max-inflight 1).
				assert.Equal(t, 4, sum.Requests+sum.Skipped[SkipBusy], "skipped: %v", sum.Skipped)
				assert.Equal(t, sum.Requests, sum.Plans, "errors: %v", sum.Distinct)
				assert.Equal(t, 0, sum.ErrorCount())
				assert.Positive(t, sum.Plans)
				return
			}
			assert.Equal(t, 4, sum.Plans, "errors: %v", sum.Distinct)
			assert.Equal(t, 0, sum.ErrorCount())
			assert.Len(t, sum.Latency["round_trip"], 4)
			assert.Equal(t, []float64{1, 1, 1, 1}, sum.Latency["preprocess"])
		})
	}
}

// slowEngine is echoEngine taking a while for each inference.
type slowEngine struct {
	echoEngine
	d time.Duration
}

func (e slowEngine) Infer(ctx context.Context, obs *node.Observation) (*msgs.Plan, error) {
	time.Sleep(e.d)
	return e.echoEngine.Infer(ctx, obs)
}

// TestPlayFastUseLatestSlowNode: in fast mode each use_latest request finds
// its frames although the node drops frames received longer ago than an
// inference takes (the player publishes a request's frames again).
func TestPlayFastUseLatestSlowNode(t *testing.T) {
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	srv := natstest.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	n, err := node.Start(ctx, slowEngine{d: 150 * time.Millisecond}, node.WithName("gpu-a"), node.WithNATSURL(srv.ClientURL()),
		node.WithSyncWindow(0, 100*time.Millisecond, 0))
	require.NoError(t, err)
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	info := discover(t, nc)
	src, err := OpenFolder(writeClip(t, 5), FolderConfig{Info: info})
	require.NoError(t, err)
	sum, err := Play(context.Background(), nc, src, Config{Node: "gpu-a", Info: info, Fast: true})
	require.NoError(t, err)
	assert.Equal(t, 4, sum.Requests)
	assert.Equal(t, 4, sum.Plans, "errors: %v", sum.Distinct)
}

// With Jobs the requests go through the jobs queue, carrying their frames;
// nothing is published on the frame subjects.
func TestPlayJobs(t *testing.T) {
	nc, _ := setup(t)
	info := discover(t, nc)
	published, err := nc.SubscribeSync(node.FramesSubject("gpu-a", ">"))
	require.NoError(t, err)
	for _, fast := range []bool{true, false} {
		jc, err := node.NewJobClient(context.Background(), nc, fmt.Sprintf("replay-test-%v", fast))
		require.NoError(t, err)
		defer jc.Close()
		src, err := OpenFolder(writeClip(t, 5), FolderConfig{Info: info})
		require.NoError(t, err)
		sum, err := Play(context.Background(), nc, src, Config{Node: "gpu-a", Info: info, Fast: fast, Speed: 4, Jobs: jc})
		require.NoError(t, err)
		assert.Equal(t, 4, sum.Requests)
		assert.Equal(t, 4, sum.Plans, "errors: %v", sum.Distinct)
		assert.Contains(t, sum.Mode, "jobs")
	}
	require.NoError(t, nc.Flush())
	n, _, err := published.Pending()
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestPlayMaxPayload(t *testing.T) {
	nc, _ := setup(t, func(o *server.Options) { o.MaxPayload = 4096 })
	info := discover(t, nc)
	src, err := OpenFolder(writeClipSized(t, 3, 40, 40), FolderConfig{Info: info})
	require.NoError(t, err)
	sum, err := Play(context.Background(), nc, src, Config{Node: "gpu-a", Info: info, Explicit: true, Fast: true})
	require.NoError(t, err)
	assert.Equal(t, 2, sum.Errors[ErrMaxPayload])
	require.Len(t, sum.Distinct, 1, "two requests, one kind of error")
	assert.Equal(t, 2, sum.Distinct[0].Count)
	assert.Contains(t, sum.Distinct[0].Example, "exceeds the server's max_payload of 4096 bytes: start the node with a larger --max-payload")
}

func TestRecordThenReplayStream(t *testing.T) {
	nc, n := setup(t)
	info := discover(t, nc)

	rctx, stop := context.WithCancel(context.Background())
	type result struct {
		c   record.Counts
		err error
	}
	done := make(chan result, 1)
	ready := make(chan struct{})
	go func() {
		c, err := record.Record(rctx, nc, record.Config{Node: "gpu-a", Stream: "clip1", Requests: true, Ready: func() { close(ready) }}, nil)
		done <- result{c, err}
	}()
	select {
	case <-ready:
	case r := <-done:
		t.Fatalf("record: %v", r.err)
	}
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	src, err := OpenFolder(writeClip(t, 5), FolderConfig{Info: info})
	require.NoError(t, err)
	sum, err := Play(context.Background(), nc, src, Config{Node: "gpu-a", Info: info, Fast: true})
	require.NoError(t, err)
	require.Equal(t, 4, sum.Plans)

	// The plans published after the last reply may still be on their way.
	st, err := js.Stream(context.Background(), "clip1")
	require.NoError(t, err)
	eventually(t, func() bool {
		i, err := st.Info(context.Background())
		return err == nil && i.State.Msgs == 18
	}, "10 frames, 4 requests and 4 plans stored")
	stop()
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, record.Counts{Frames: 10, Requests: 4, Plans: 4, Bytes: r.c.Bytes}, r.c)

	// Replay the recording: the same frames and requests.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	stream, err := OpenStream(ctx, js, "clip1")
	require.NoError(t, err)
	defer stream.Close()
	assert.Equal(t, 18, stream.Len())
	before := n.Status().Counters["plans"]
	sum, err = Play(ctx, nc, stream, Config{Node: "gpu-a", Info: info, Fast: true})
	require.NoError(t, err)
	assert.Equal(t, 10, sum.Frames)
	assert.Equal(t, 4, sum.Requests)
	assert.Equal(t, 4, sum.Plans, "%v %v", sum.Errors, sum.Distinct)
	assert.Equal(t, 4, sum.RecordedPlans)
	assert.Equal(t, before+4, n.Status().Counters["plans"])
}

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
