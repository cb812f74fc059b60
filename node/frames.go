package node

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"vlanode/msgs"
	"vlanode/node/ingest"
)

// Reasons a published frame is dropped, the label of
// vlanode_frames_rejected_total.
const (
	frameBadRequest     = "bad_request"     // not a valid Frame
	frameCameraMismatch = "camera_mismatch" // its camera is not the subject's last token
	frameUnknownCamera  = "unknown_camera"  // the model does not take that camera
	frameAhead          = "ahead"           // stamped beyond the skew ahead of the newest frame
	frameOutOfSequence  = "out_of_sequence" // its seq disagrees with its stamp's place
	frameTooLarge       = "too_large"       // more data than a camera keeps
	frameBadHeader      = "bad_header"      // the engine's FrameChecker refused its data
)

// frameReasons lists the reasons, in the order metrics and Status show them.
var frameReasons = []string{frameBadRequest, frameCameraMismatch, frameUnknownCamera, frameAhead, frameOutOfSequence, frameTooLarge, frameBadHeader}

// onFrame keeps a frame published on vla.<node>.frames.<camera> for
// use_latest requests. A bad frame is counted and logged (at warn level the
// first time for each reason) and, when it was sent as a request, answered
// with an Error.
func (n *Node) onFrame(m *nats.Msg) {
	now := n.now()
	camera := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	f, err := msgs.DecodeFrame(m.Data)
	if err != nil {
		n.rejectFrame(m, frameBadRequest, msgs.ErrorReply("", err))
		return
	}
	if f.Camera != camera {
		n.rejectFrame(m, frameCameraMismatch, msgs.NewError("", msgs.CodeBadRequest,
			fmt.Sprintf("camera: %q does not match the subject's camera %q", f.Camera, camera)))
		return
	}
	if c, ok := n.engine.(FrameChecker); ok {
		if err := c.CheckFrame(f); err != nil {
			n.rejectFrame(m, frameBadHeader, msgs.NewError("", msgs.CodeBadRequest, "data: "+err.Error()))
			return
		}
	}
	if err := n.store.Add(f, now); err != nil {
		reason, where := frameUnknownCamera, "camera: "
		switch {
		case errors.Is(err, ingest.ErrAhead):
			reason, where = frameAhead, "stamp_ns: "
		case errors.Is(err, ingest.ErrOutOfSequence):
			reason, where = frameOutOfSequence, "seq: "
		case errors.Is(err, ingest.ErrTooLarge):
			reason, where = frameTooLarge, "data: "
		}
		n.rejectFrame(m, reason, msgs.NewError("", msgs.CodeBadRequest, where+err.Error()))
		return
	}
	n.m.framesReceived.Inc(camera)
}

func (n *Node) rejectFrame(m *nats.Msg, reason string, e *msgs.Error) {
	n.m.framesRejected.Inc(reason)
	level := "debug"
	if _, seen := n.warned.LoadOrStore(reason, true); !seen {
		level = "warn"
	}
	args := []any{"subject", m.Subject, "reason", reason, "error", e.Err.Message}
	if level == "warn" {
		n.log.Warn("frame dropped (further drops for this reason are logged at debug level)", args...)
	} else {
		n.log.Debug("frame dropped", args...)
	}
	if m.Reply != "" {
		n.sendError(natsReply{n: n, subject: m.Reply}, e)
	}
}
