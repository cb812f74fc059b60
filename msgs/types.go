package msgs

// Version is the wire protocol version this package speaks. Every message
// carries it under the key "v"; the wire format changes only with a new
// version.
const Version = 1

// Encoding names how a Frame's data holds the image.
type Encoding string

// The encodings a Frame may use. jpeg and png carry a compressed file; the
// raw encodings carry rows of 8-bit pixels, top row first, Frame.Step bytes
// apart.
const (
	EncodingJPEG  Encoding = "jpeg"  // a JPEG file
	EncodingPNG   Encoding = "png"   // a PNG file
	EncodingRGB8  Encoding = "rgb8"  // raw, 3 bytes a pixel: red, green, blue
	EncodingBGR8  Encoding = "bgr8"  // raw, 3 bytes a pixel: blue, green, red
	EncodingMono8 Encoding = "mono8" // raw, 1 byte a pixel: grey
)

// Channels returns the bytes per pixel of a raw encoding, and 0 for a
// compressed or unknown encoding.
func (e Encoding) Channels() int {
	switch e {
	case EncodingRGB8, EncodingBGR8:
		return 3
	case EncodingMono8:
		return 1
	}
	return 0
}

// Known reports whether e is one of the encodings of protocol v1.
func (e Encoding) Known() bool {
	switch e {
	case EncodingJPEG, EncodingPNG, EncodingRGB8, EncodingBGR8, EncodingMono8:
		return true
	}
	return false
}

// MaxDimension is the largest width or height, in pixels, a Frame may have.
const MaxDimension = 16384

// Frame is one camera image. It is published on vla.<node>.frames.<camera>
// and is also the element of InferRequest.Frames.
type Frame struct {
	V        int      `msgpack:"v"`              // protocol version; optional inside an InferRequest
	Camera   string   `msgpack:"camera"`         // camera name, e.g. "front_wide_120fov"
	StampNs  int64    `msgpack:"stamp_ns"`       // capture time, ns since the Unix epoch
	Seq      uint64   `msgpack:"seq,omitempty"`  // per-camera sequence number; optional
	Encoding Encoding `msgpack:"encoding"`       // one of the Encoding constants
	Width    int      `msgpack:"width"`          // pixels, 1..MaxDimension
	Height   int      `msgpack:"height"`         // pixels, 1..MaxDimension
	Step     int      `msgpack:"step,omitempty"` // bytes a row for raw encodings; 0 means Width×channels; ignored for jpeg/png
	Data     []byte   `msgpack:"data"`           // the image: file bytes, or Step×Height raw bytes
}

// EgoPose is one pose of the ego vehicle, expressed in the ego frame at t0
// (the time of the newest frame): x forward, y left, z up.
type EgoPose struct {
	StampNs int64      `msgpack:"stamp_ns"` // ns since the Unix epoch
	XYZ     [3]float64 `msgpack:"xyz"`      // position, metres
	Rot     [9]float64 `msgpack:"rot"`      // 3×3 rotation matrix, row-major: Rot[3*r+c] = R[r][c]
}

// InferRequest asks a node for a Plan. It is sent as a NATS request on
// vla.infer (served by the queue group vla-nodes) or vla.<node>.infer; the
// reply is a Plan or an Error.
type InferRequest struct {
	V                  int       `msgpack:"v"`
	ID                 string    `msgpack:"id"`                             // chosen by the caller, echoed in the reply; non-empty
	Frames             []Frame   `msgpack:"frames,omitempty"`               // camera-major, oldest first; or UseLatest
	UseLatest          bool      `msgpack:"use_latest,omitempty"`           // use the node's latest synchronized frames instead of Frames
	EgoHistory         []EgoPose `msgpack:"ego_history"`                    // oldest first, the last at t0
	Prompt             string    `msgpack:"prompt,omitempty"`               // optional; Alpamayo nodes refuse it as unsupported (see NavText, Question)
	MaxReasoningTokens int       `msgpack:"max_reasoning_tokens,omitempty"` // optional; 0 means the model's default
	DeadlineMs         int       `msgpack:"deadline_ms,omitempty"`          // optional; 0 means no deadline

	// Optional keys added within version 1; absent, a node behaves as it
	// did before them.

	// CameraOrder names the cameras of Frames, in their camera-major
	// order, or selects the node's latest cameras with UseLatest: any set
	// of cameras the model supports. Absent: the model's default cameras
	// in its order.
	CameraOrder []string `msgpack:"camera_order,omitempty"`
	// NavText is a navigation instruction, e.g. "Turn left in 30m"
	// (Alpamayo 1.5).
	NavText string `msgpack:"nav_text,omitempty"`
	// Question asks about the scene instead of planning (Alpamayo 1.5's
	// VQA): the Plan carries Answer and no trajectory. Not empty when
	// sent.
	Question string `msgpack:"question,omitempty"`
	// Temperature of the reasoning's sampling, >= 0; 0 decodes greedily.
	// Absent: the node's default.
	Temperature *float64 `msgpack:"temperature,omitempty"`
	// TopP is nucleus sampling's probability mass, in (0, 1]. Absent: the
	// model's default.
	TopP *float64 `msgpack:"top_p,omitempty"`
	// Seed seeds the reasoning's sampling and the trajectory's noise.
	// Absent: the node picks one (the observation's t0).
	Seed *uint64 `msgpack:"seed,omitempty"`
	// NumTrajSamples is the number of trajectory samples, 1 to
	// MaxTrajSamples (NVIDIA's num_traj_samples): the first in the Plan's
	// trajectory and actions, the others in its Samples. 0 (absent)
	// means 1.
	NumTrajSamples int `msgpack:"num_traj_samples,omitempty"`
}

// MaxTrajSamples is the most trajectory samples a request may ask for.
const MaxTrajSamples = 16

// TrajSample is one trajectory sample after the first (Plan.Samples).
type TrajSample struct {
	Trajectory Trajectory   `msgpack:"trajectory"`
	Actions    [][2]float64 `msgpack:"actions"`
}

// Trajectory is a planned path in the ego frame at t0 (x forward, y left,
// z up). Waypoint i is the pose at t0 + (i+1)·DT.
type Trajectory struct {
	DT  float64      `msgpack:"dt"`  // seconds between waypoints
	XYZ [][3]float64 `msgpack:"xyz"` // positions, metres
	Rot [][9]float64 `msgpack:"rot"` // rotations, row-major 3×3, one for each waypoint
}

// Timing holds the wall time of each stage of one inference, in milliseconds.
type Timing struct {
	Preprocess float64 `msgpack:"preprocess"` // frame decoding and preprocessing
	Vision     float64 `msgpack:"vision"`     // vision encoder and patch merger
	Prefill    float64 `msgpack:"prefill"`    // language-model prefill
	Decode     float64 `msgpack:"decode"`     // reasoning-token decoding
	Diffusion  float64 `msgpack:"diffusion"`  // action expert, all flow-matching steps
	Total      float64 `msgpack:"total"`      // from receipt of the request to the plan
}

// Plan is a node's answer to an InferRequest. It is the reply to the
// request and is also published on vla.<node>.plans.
type Plan struct {
	V             int          `msgpack:"v"`
	ID            string       `msgpack:"id"`       // the request's id
	Node          string       `msgpack:"node"`     // the node's name
	Model         string       `msgpack:"model"`    // the model's name
	StampNs       int64        `msgpack:"stamp_ns"` // t0: capture time of the newest frame used, ns since the Unix epoch
	Trajectory    Trajectory   `msgpack:"trajectory"`
	Actions       [][2]float64 `msgpack:"actions"`   // (acceleration m/s², curvature 1/m), one for each waypoint
	Reasoning     string       `msgpack:"reasoning"` // the model's reasoning text; may be empty
	TimingMs      Timing       `msgpack:"timing_ms"`
	BudgetBytes   uint64       `msgpack:"budget_bytes"`    // the node's VRAM budget; 0 means unlimited
	VRAMPeakBytes uint64       `msgpack:"vram_peak_bytes"` // peak device memory in use during this inference; 0 on the CPU backend
	// Answer is the answer to the request's Question (optional key; sent
	// only then, with an empty trajectory).
	Answer string `msgpack:"answer,omitempty"`
	// Samples are trajectory samples 1 to K−1 of a request's
	// num_traj_samples K (optional key; sent only when K > 1): sample 0
	// is Trajectory and Actions.
	Samples []TrajSample `msgpack:"samples,omitempty"`
}

// Code classifies an Error.
type Code string

// The error codes of protocol v1.
const (
	CodeBadRequest       Code = "bad_request"       // the request is malformed or invalid
	CodeOverloaded       Code = "overloaded"        // the node cannot take more work now
	CodeDeadlineExceeded Code = "deadline_exceeded" // the deadline passed before the plan was ready
	CodeUnsupported      Code = "unsupported"       // valid, but this node or its model cannot serve it
	CodeInternal         Code = "internal"          // the node failed
)

// ErrorDetail is the body of an Error.
type ErrorDetail struct {
	Code    Code   `msgpack:"code"`
	Message string `msgpack:"message"` // for people; names the field for bad_request
}

// Error is a node's reply to an InferRequest it could not answer with a Plan.
type Error struct {
	V   int         `msgpack:"v"`
	ID  string      `msgpack:"id"` // the request's id, or "" when it could not be read
	Err ErrorDetail `msgpack:"error"`
}

// NewError returns an Error reply for request id.
func NewError(id string, code Code, msg string) *Error {
	return &Error{V: Version, ID: id, Err: ErrorDetail{Code: code, Message: msg}}
}

// PlanSummary summarizes the node's execution plan: where the model's
// weights live under the budget. Zero fields are unknown.
type PlanSummary struct {
	Mode          string  `msgpack:"mode,omitempty"`           // the planner's name for the chosen plan
	ResidentBytes uint64  `msgpack:"resident_bytes,omitempty"` // weights kept in VRAM
	StreamedBytes uint64  `msgpack:"streamed_bytes,omitempty"` // weights copied into VRAM before each use
	HostBytes     uint64  `msgpack:"host_bytes,omitempty"`     // weights used on the CPU
	FixedBytes    uint64  `msgpack:"fixed_bytes,omitempty"`    // VRAM taken before weights: KV cache, activations, buffers, workspaces
	PredictedMs   float64 `msgpack:"predicted_ms,omitempty"`   // predicted latency of one inference
}

// GPU is telemetry of the node's GPU, read through NVML. Zero fields are
// unknown.
type GPU struct {
	Name             string   `msgpack:"name,omitempty"`
	MemoryTotalBytes uint64   `msgpack:"memory_total_bytes,omitempty"`
	MemoryUsedBytes  uint64   `msgpack:"memory_used_bytes,omitempty"`
	MemoryFreeBytes  uint64   `msgpack:"memory_free_bytes,omitempty"`
	PCIeGen          int      `msgpack:"pcie_gen,omitempty"`       // current PCIe link generation
	PCIeGenMax       int      `msgpack:"pcie_gen_max,omitempty"`   // maximum PCIe link generation
	PCIeWidth        int      `msgpack:"pcie_width,omitempty"`     // current PCIe link width, lanes
	PCIeWidthMax     int      `msgpack:"pcie_width_max,omitempty"` // maximum PCIe link width, lanes
	TemperatureC     int      `msgpack:"temperature_c,omitempty"`  // degrees Celsius
	SMClockMHz       int      `msgpack:"sm_clock_mhz,omitempty"`
	MemClockMHz      int      `msgpack:"mem_clock_mhz,omitempty"`
	ThrottleReasons  []string `msgpack:"throttle_reasons,omitempty"` // active clock-throttle reasons; empty when none
}

// Status is published by a node on vla.<node>.status.
type Status struct {
	V           int          `msgpack:"v"`
	Node        string       `msgpack:"node"`
	Model       string       `msgpack:"model"`
	BudgetBytes uint64       `msgpack:"budget_bytes"` // VRAM budget; 0 means unlimited
	Plan        *PlanSummary `msgpack:"plan,omitempty"`
	GPU         *GPU         `msgpack:"gpu,omitempty"` // absent when the node has no GPU telemetry
	QueueDepth  int          `msgpack:"queue_depth"`   // requests waiting
	Counters    Counters     `msgpack:"counters,omitempty"`
}

// Counters are cumulative counts since a node started, by name.
type Counters map[string]uint64
