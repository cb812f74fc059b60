package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"vlanode/msgs"
)

// Engine runs one inference at a time. The node calls Infer from a single
// goroutine, never concurrently; Info may be called from any goroutine.
type Engine interface {
	// Info describes the model: what an observation holds and the budget.
	Info() EngineInfo
	// Infer computes a plan for obs. ctx carries the request's deadline and
	// is cancelled when the node stops hard; an engine should return
	// promptly with ctx.Err() (wrapped or not) then. Frames it cannot decode
	// are reported with BadFrame (or any error wrapping ErrBadInput); a
	// request the model cannot serve with an error wrapping ErrUnsupported;
	// anything else is an internal error.
	//
	// The returned plan holds Trajectory, Actions, Reasoning, the model's
	// stage timings (TimingMs without Total) and VRAMPeakBytes. The node
	// fills V, ID, Node, StampNs (t0, unless the engine set it), Model and
	// BudgetBytes (from Info, unless the engine set them) and
	// TimingMs.Total, and validates the plan before sending it.
	Infer(ctx context.Context, obs *Observation) (*msgs.Plan, error)
}

// BatchEngine is an Engine that runs several observations together, each
// streamed unit of its model brought in once for all of them. The node
// gathers waiting requests into a batch (Options.MaxBatch, BatchWait) and
// calls InferBatch from its one worker goroutine.
type BatchEngine interface {
	Engine
	// InferBatch answers every observation: results[i] is obs[i]'s plan
	// or error, as Infer would return them for obs[i] alone (the same
	// plan: the engine states any tolerance). A batch larger than the
	// engine can hold at once (its VRAM budget) is run in parts; one
	// observation's error fails only its own result. ctx is the batch's:
	// it ends at the latest deadline among the requests.
	InferBatch(ctx context.Context, obs []*Observation) []Result
}

// Result is one observation's answer from InferBatch: a plan or an error.
type Result struct {
	Plan *msgs.Plan
	Err  error
}

// EngineInfo describes what an engine's model takes. The node reads it
// once at start for cameras, frames and poses (they must not change), and
// again for each status message for the budget and plan summary.
type EngineInfo struct {
	Model   string   // model name, e.g. "alpamayo-r1-10b"
	Cameras []string // camera names in the model's order: the camera-major order of Observation.Frames without camera_order, and the cameras use_latest draws from
	// SupportedCameras are every camera a request's camera_order may
	// name (a request sends any of them, in any order); empty: Cameras.
	SupportedCameras []string
	FramesPerCamera  int           // frames of each camera in one observation
	FramePeriod      time.Duration // time between a camera's frames in an observation (100 ms for Alpamayo-R1)
	EgoPoses         int           // poses InferRequest.ego_history must hold; 0: any number
	EgoPeriod        time.Duration // time between ego poses, for clients (replay); 0: FramePeriod
	BudgetBytes      uint64        // VRAM budget in bytes; 0 means unlimited
	Plan             *msgs.PlanSummary
}

// validate checks the fields the node relies on.
func (i EngineInfo) validate() error {
	switch {
	case i.Model == "":
		return errors.New("engine info: empty model name")
	case len(i.Cameras) == 0:
		return errors.New("engine info: no cameras")
	case i.FramesPerCamera < 1:
		return fmt.Errorf("engine info: %d frames per camera, want ≥ 1", i.FramesPerCamera)
	case i.FramePeriod <= 0:
		return fmt.Errorf("engine info: frame period %v, want > 0", i.FramePeriod)
	case i.EgoPoses < 0 || i.EgoPeriod < 0:
		return errors.New("engine info: negative ego poses or period")
	}
	for _, c := range i.Cameras {
		if err := checkToken("camera", c); err != nil {
			return fmt.Errorf("engine info: %w", err)
		}
	}
	for _, c := range i.Cameras {
		if len(i.SupportedCameras) > 0 && !slices.Contains(i.SupportedCameras, c) {
			return fmt.Errorf("engine info: camera %q is not among the supported cameras %v", c, i.SupportedCameras)
		}
	}
	return nil
}

// supported is the cameras a camera_order may name.
func (i EngineInfo) supported() []string {
	if len(i.SupportedCameras) > 0 {
		return i.SupportedCameras
	}
	return i.Cameras
}

// frames returns the number of frames in one observation.
func (i EngineInfo) frames() int { return len(i.Cameras) * i.FramesPerCamera }

// Observation is one input to Engine.Infer.
type Observation struct {
	RequestID string
	// Frames holds len(Cameras)×FramesPerCamera frames, camera-major, oldest
	// first, still encoded (jpeg, png or raw); the engine decodes them. They
	// are shared with the node: the engine must not modify them.
	Frames []msgs.Frame
	// Latest is true when the frames came from the node's own frame subjects
	// (use_latest) rather than from the request.
	Latest bool
	// T0 is the capture time of the newest frame, ns since the Unix epoch.
	T0                 int64
	EgoHistory         []msgs.EgoPose // oldest first, the last at t0, in the ego frame at t0
	Prompt             string         // extra text, may be empty
	MaxReasoningTokens int            // 0: the model's default
	// CameraOrder names the cameras of Frames in their camera-major
	// order: the request's camera_order, or EngineInfo.Cameras.
	CameraOrder []string
	// The request's optional inputs and sampling (msgs.InferRequest):
	// empty strings and nil pointers when absent.
	NavText     string
	Question    string
	Temperature *float64
	TopP        *float64
	Seed        *uint64
	// NumTrajSamples is the request's number of trajectory samples
	// (msgs.InferRequest.NumTrajSamples): 0 or 1 for one; the plan then
	// holds the other ones in Samples.
	NumTrajSamples int
}

// ErrBadInput marks an engine error caused by the request's content (for
// example a corrupt JPEG): the node answers bad_request with its text.
var ErrBadInput = errors.New("bad input")

// ErrUnsupported marks an engine error for a valid request that the model
// cannot serve: the node answers unsupported with its text.
var ErrUnsupported = errors.New("unsupported")

// FrameChecker is an Engine that can check a frame without decoding it (a
// JPEG's or PNG's header against the frame's declared size, say). The node
// checks every frame published on its frame subjects with it before keeping
// the frame, and drops one that fails (counted as bad_header), so that a
// frame no request could use never reaches a use_latest request. CheckFrame
// is called on the frames subscription's goroutine, concurrently with
// Infer, for every frame: it must be cheap and must not decode.
type FrameChecker interface {
	CheckFrame(f *msgs.Frame) error
}

// FrameError reports that Observation.Frames[Index] could not be used.
// It matches ErrBadInput with errors.Is.
type FrameError struct {
	Index int
	Err   error
}

// BadFrame returns a *FrameError for frame index of the observation.
func BadFrame(index int, err error) error { return &FrameError{Index: index, Err: err} }

func (e *FrameError) Error() string { return fmt.Sprintf("frame %d: %v", e.Index, e.Err) }

// Unwrap returns the underlying error.
func (e *FrameError) Unwrap() error { return e.Err }

// Is makes a FrameError match ErrBadInput.
func (e *FrameError) Is(target error) bool { return target == ErrBadInput }

// engineErrorReply maps an engine error to the Error reply for request id.
// For a frame error, the message names the frame as the client knows it:
// its path in the request, or the camera and sequence number of a latest
// frame.
func engineErrorReply(id string, err error, obs *Observation) *msgs.Error {
	if fe, ok := errors.AsType[*FrameError](err); ok && fe.Index >= 0 && fe.Index < len(obs.Frames) {
		f := obs.Frames[fe.Index]
		where := fmt.Sprintf("frames[%d]", fe.Index)
		if obs.Latest {
			where = fmt.Sprintf("latest frame %d (camera %s, seq %d, stamp_ns %d)", fe.Index, f.Camera, f.Seq, f.StampNs)
		}
		return msgs.NewError(id, msgs.CodeBadRequest, where+": "+fe.Err.Error())
	}
	switch {
	case errors.Is(err, ErrBadInput):
		return msgs.NewError(id, msgs.CodeBadRequest, err.Error())
	case errors.Is(err, ErrUnsupported):
		return msgs.NewError(id, msgs.CodeUnsupported, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return msgs.NewError(id, msgs.CodeDeadlineExceeded, "deadline passed during inference: "+err.Error())
	}
	return msgs.ErrorReply(id, fmt.Errorf("engine: %w", err))
}

// checkToken checks that s can be one NATS subject token.
func checkToken(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s name is empty", what)
	}
	if strings.ContainsAny(s, ".*> \t\r\n") {
		return fmt.Errorf("%s name %q is not a single NATS subject token (no '.', '*', '>' or whitespace)", what, s)
	}
	return nil
}
