package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"vlanode/msgs"
)

// onInfer handles a request on vla.infer or vla.<node>.infer (endpoint
// ep). It runs on the endpoint's subscription goroutine, so it only
// decodes, checks and queues; the worker runs the engine.
func (n *Node) onInfer(ep *endpoint, m *nats.Msg) {
	received := n.now()
	data := m.Data
	n.m.requests.Inc("")
	if m.Reply == "" {
		n.m.unanswerable.Inc("")
		n.log.Debug("infer message without a reply subject ignored", "subject", m.Subject)
		return
	}
	reply := natsReply{n: n, subject: m.Reply, ep: ep, received: received}
	if n.closing.Load() {
		n.m.shed.Inc(shedShutdown)
		n.sendError(reply, msgs.NewError(msgs.RequestID(data), msgs.CodeOverloaded,
			fmt.Sprintf("node %s is shutting down; retry on another node", n.opts.Name)))
		return
	}
	if int64(len(data)) > n.maxPayload {
		n.sendError(reply, msgs.NewError(msgs.RequestID(data), msgs.CodeBadRequest, fmt.Sprintf(
			"payload of %d bytes exceeds the node's limit of %d bytes (--max-payload); send jpeg or png frames, or raise the limit",
			len(data), n.maxPayload)))
		return
	}
	req, err := msgs.DecodeInferRequest(data)
	if err != nil {
		n.sendError(reply, msgs.ErrorReply(msgs.RequestID(data), err))
		return
	}
	if e := n.checkRequest(req); e != nil {
		n.sendError(reply, e)
		return
	}
	j := &job{req: req, to: reply, received: received}
	if req.DeadlineMs > 0 {
		j.deadline = received.Add(time.Duration(req.DeadlineMs) * time.Millisecond)
	}
	now := n.now()
	j.unmarshal = now.Sub(received)
	n.m.stage("unmarshal", j.unmarshal)
	if !j.deadline.IsZero() && !now.Before(j.deadline) {
		n.shed(j, shedDeadline, fmt.Sprintf("deadline of %d ms passed before the request could be queued (decoding took %v)",
			req.DeadlineMs, j.unmarshal.Round(time.Microsecond)))
		return
	}
	if req.UseLatest {
		// Queue it after every frame that reached the node before it has
		// been ingested: the barrier runs once each subscription has
		// handled the messages delivered ahead of it.
		if err := n.nc.Barrier(func() { n.admit(j) }); err == nil {
			return
		}
	}
	n.admit(j)
}

// checkRequest checks a decoded request against the model: the number and
// order of frames and cameras, and the number of ego poses.
func (n *Node) checkRequest(req *msgs.InferRequest) *msgs.Error {
	bad := func(format string, a ...any) *msgs.Error {
		return msgs.NewError(req.ID, msgs.CodeBadRequest, fmt.Sprintf(format, a...))
	}
	info := n.info
	if p := info.EgoPoses; p > 0 && len(req.EgoHistory) != p {
		return bad("ego_history: got %d poses, want %d (the model's, oldest first, the last at t0)", len(req.EgoHistory), p)
	}
	cameras := info.Cameras
	if req.CameraOrder != nil {
		cameras = req.CameraOrder
		for i, c := range req.CameraOrder {
			if !slices.Contains(info.supported(), c) {
				return bad("camera_order[%d]: unknown camera %q; the model takes %s", i, c, strings.Join(info.supported(), ", "))
			}
			if req.UseLatest && !slices.Contains(info.Cameras, c) {
				return bad("camera_order[%d]: camera %q is not one of the node's cameras (%s), which use_latest draws from", i, c, strings.Join(info.Cameras, ", "))
			}
		}
	}
	if req.UseLatest {
		return nil
	}
	order := fmt.Sprintf("%d frames of each camera, oldest first, cameras in the order %s", info.FramesPerCamera, strings.Join(cameras, ", "))
	if want := len(cameras) * info.FramesPerCamera; len(req.Frames) != want {
		return bad("frames: got %d frames, want %d (%s)", len(req.Frames), want, order)
	}
	for i, f := range req.Frames {
		want := cameras[i/info.FramesPerCamera]
		if f.Camera == want {
			if k := i % info.FramesPerCamera; k > 0 && f.StampNs <= req.Frames[i-1].StampNs {
				return bad("frames[%d].stamp_ns: %d is not after frames[%d].stamp_ns %d (%s)", i, f.StampNs, i-1, req.Frames[i-1].StampNs, order)
			}
			continue
		}
		if !slices.Contains(cameras, f.Camera) {
			if req.CameraOrder != nil {
				return bad("frames[%d].camera: camera %q is not in camera_order (%s)", i, f.Camera, strings.Join(cameras, ", "))
			}
			return bad("frames[%d].camera: unknown camera %q; the model takes %s", i, f.Camera, strings.Join(cameras, ", "))
		}
		return bad("frames[%d].camera: got %q, want %q (%s)", i, f.Camera, want, order)
	}
	return nil
}

// admit queues j and answers whatever the queue refuses.
func (n *Node) admit(j *job) {
	j.admitted = n.now()
	if !j.deadline.IsZero() {
		j.timer = time.AfterFunc(j.deadline.Sub(j.admitted), func() { n.expire(j) })
	}
	for _, r := range n.sched.admit(j) {
		switch r.reason {
		case shedSuperseded:
			n.shed(r.j, shedSuperseded, fmt.Sprintf("superseded by a newer use_latest request (%q): latest wins", r.by.req.ID))
		case shedQueueFull:
			n.shed(r.j, shedQueueFull, fmt.Sprintf("%d requests already waiting (queue bound %d); retry later", n.opts.QueueBound, n.opts.QueueBound))
		default:
			n.shed(r.j, r.reason, fmt.Sprintf("node %s is shutting down; retry on another node", n.opts.Name))
		}
	}
	n.m.queueDepth.Set(float64(n.sched.depth()))
}

// expire answers a waiting job whose deadline passed.
func (n *Node) expire(j *job) {
	if n.sched.remove(j) {
		n.m.queueDepth.Set(float64(n.sched.depth()))
		n.shed(j, shedDeadline, fmt.Sprintf("deadline of %d ms passed while waiting in the queue", j.req.DeadlineMs))
	}
}
