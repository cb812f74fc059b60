package node

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"vlanode/msgs"
)

// benchEngine has the shape of Alpamayo-R1 (4 cameras × 4 frames at 10 Hz,
// 16 ego poses, 64 waypoints) and does no work: what a benchmark measures
// is the node.
type benchEngine struct{ plan *msgs.Plan }

var benchCameras = []string{"cross_left_120fov", "front_wide_120fov", "cross_right_120fov", "front_tele_30fov"}

func newBenchEngine() *benchEngine {
	p := &msgs.Plan{Trajectory: msgs.Trajectory{DT: 0.1}, Reasoning: "Keep lane; the light ahead is green."}
	for i := range 64 {
		p.Trajectory.XYZ = append(p.Trajectory.XYZ, [3]float64{float64(i), 0, 0})
		p.Trajectory.Rot = append(p.Trajectory.Rot, [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1})
		p.Actions = append(p.Actions, [2]float64{0.1, 0})
	}
	return &benchEngine{plan: p}
}

func (e *benchEngine) Info() EngineInfo {
	return EngineInfo{Model: "bench", Cameras: benchCameras, FramesPerCamera: 4, FramePeriod: 100 * time.Millisecond, EgoPoses: 16}
}

func (e *benchEngine) Infer(context.Context, *Observation) (*msgs.Plan, error) {
	p := *e.plan
	return &p, nil
}

// benchFrames returns 16 frames of size bytes each ("jpeg" data that the
// engine does not decode), stamped up to t0.
func benchFrames(size int, t0 int64) []msgs.Frame {
	data := make([]byte, size)
	rand.Read(data)
	var fs []msgs.Frame
	for _, c := range benchCameras {
		for k := range 4 {
			fs = append(fs, msgs.Frame{Camera: c, StampNs: t0 - int64(3-k)*int64(100*time.Millisecond),
				Encoding: msgs.EncodingJPEG, Width: 1920, Height: 1080, Data: data})
		}
	}
	return fs
}

// BenchmarkNodeOverhead measures the node's own cost per request with an
// engine that does nothing: one request at a time, round trip through an
// in-process NATS server. ns/op is the client's round trip; the per-stage
// figures are the node's averages (vlanode_stage_seconds): unmarshal
// (decode and check the request), queue (admission to the worker, including
// the frame barrier for use_latest), assemble (the latest synchronized
// frames), engine (the call), reply (encode and publish the plan), total
// (receipt to reply sent).
func BenchmarkNodeOverhead(b *testing.B) {
	for _, c := range []struct {
		name   string
		size   int
		latest bool
	}{
		{"explicit/16x1KiB", 1 << 10, false},
		{"explicit/16x200KiB", 200 << 10, false},
		{"use_latest/16x200KiB", 200 << 10, true},
	} {
		b.Run(c.name, func(b *testing.B) { benchOverhead(b, c.size, c.latest) })
	}
}

func benchOverhead(b *testing.B, size int, latest bool) {
	srv := runServer(b, func(o *server.Options) { o.MaxPayload = 8 << 20 })
	ctx := context.Background()
	// Frames are published once, so they must not go stale during the run.
	n, err := Start(ctx, newBenchEngine(), WithName("bench"), WithNATSURL(srv.ClientURL()), WithSyncWindow(0, time.Hour, 0))
	if err != nil {
		b.Fatal(err)
	}
	defer n.Shutdown(ctx)
	nc := connect(b, srv.ClientURL())
	t0 := time.Now().UnixNano()
	req := &msgs.InferRequest{ID: "bench", EgoHistory: make([]msgs.EgoPose, 16)}
	for i := range req.EgoHistory {
		req.EgoHistory[i].Rot = [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}
	}
	if latest {
		req.UseLatest = true
		for _, f := range benchFrames(size, t0) {
			if err := nc.Publish(FramesSubject("bench", f.Camera), marshal(b, &f)); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		req.Frames = benchFrames(size, t0)
	}
	data := marshal(b, req)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		m, err := nc.Request(InferSubject("bench"), data, waitFor)
		if err != nil {
			b.Fatal(err)
		}
		if _, e, err := msgs.DecodeReply(m.Data); err != nil || e != nil {
			b.Fatalf("reply: %v %+v", err, e)
		}
	}
	b.StopTimer()
	for _, stage := range []string{"unmarshal", "queue", "assemble", "engine", "reply", "total"} {
		count, sum := n.m.stages.Snapshot(stage)
		if count > 0 {
			b.ReportMetric(sum/float64(count)*1e6, stage+"-µs/op")
		}
	}
	b.ReportMetric(float64(len(data))/1024, "request-KiB")
}
