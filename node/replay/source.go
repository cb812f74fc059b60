// Package replay plays a recorded clip into a node: frames on its frame
// subjects and InferRequests on its infer subject, in real time or as fast
// as the node answers, and summarizes the answers.
//
// # Sources
//
// A clip folder (OpenFolder), laid out as
//
//	CLIP/
//	  <camera>/<stamp_ns>.jpg   one file a frame, named by its capture time in ns
//	  <camera>/<stamp_ns>.png   (.jpeg, .png too; width and height come from the file)
//	  <camera>/<stamp_ns>.mp4   or a video (.avi, .mkv, … too), named by its first frame's capture time
//	  ego.csv                   optional: the ego vehicle's poses, in any fixed world frame
//
// where ego.csv has the header
//
//	stamp_ns,x,y,z,r00,r01,r02,r10,r11,r12,r20,r21,r22
//
// (position in metres, rotation row-major, vehicle frame to world). The
// folder's requests are made by the player every Every frame periods of the
// model, from the first time each camera has a full window of frames; each
// carries the model's number of ego poses, EgoPeriod apart and the last at
// the request's time, taken as the latest pose at or before each slot and
// expressed in the ego frame at that time (docs/protocol.md).
//
// A JetStream stream made by vlanode record (OpenStream): its frames and
// its requests (with their ego history) in recorded order and timing.
//
// A video's frame i is stamped stamp_ns + i / FPS (the file's header; see
// vision/video), decoded as it is played and published as a JPEG of
// quality 95. A single video file (OpenVideo) is the clip of a model that
// takes one camera, with the ego.csv beside it. A build without OpenCV (tag
// nogocv) refuses videos, naming the reason.
//
// # Many clips
//
// PlayMany plays many clips into one node for offline evaluation, several
// at once, each as fast as the node answers with its frames in every
// request, and merges their summaries (with plans per second); a clip that
// fails is recorded and the others go on.
package replay

import (
	"context"

	"vlanode/msgs"
)

// Kind says what an event carries.
type Kind int

// The kinds of events.
const (
	KindFrame   Kind = iota // a frame to publish
	KindRequest             // a request to send
)

// Event is one step of a clip.
type Event struct {
	Kind Kind
	// At is the event's time on the clip's clock, ns: the player keeps the
	// clip's pacing by it.
	At      int64
	Frame   *msgs.Frame        // KindFrame
	Request *msgs.InferRequest // KindRequest: ego history, prompt, token limit
}

// Source yields a clip's events in time order.
type Source interface {
	// Next returns the next event, or io.EOF after the last.
	Next(ctx context.Context) (Event, error)
	// Len returns the number of events, or -1 when unknown.
	Len() int
	Close() error
}
