package node

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // image.DecodeConfig reads JPEG headers
	_ "image/png"  // and PNG headers
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"vlanode/msgs"
)

// httpInferRequest is the body of POST /v1/infer: the request of NVIDIA's
// Alpamayo NIM (1.0.0 API reference) and the options of the NATS protocol's
// InferRequest (docs/http.md). Pointers tell a field left out from a zero.
type httpInferRequest struct {
	ID                 string            `json:"id"`                    // echoed; default "http-N"
	Model              *string           `json:"model"`                 // when given, the served model's id
	Mode               string            `json:"mode"`                  // trajectory (default) or both; answer is not served
	Images             []string          `json:"images"`                // base64 or data:image/...;base64, URIs, camera-major, oldest first
	CameraOrder        []string          `json:"camera_order"`          // default: the model's cameras
	NumFramesPerCamera *int              `json:"num_frames_per_camera"` // default: the model's
	Egomotion          []json.RawMessage `json:"egomotion"`             // one row a pose, oldest first, the last at t0
	MaxTokens          *int              `json:"max_tokens"`            // NIM's name of max_reasoning_tokens
	MaxReasoningTokens *int              `json:"max_reasoning_tokens"`  // the protocol's name
	Prompt             string            `json:"prompt"`
	DeadlineMs         *int              `json:"deadline_ms"`
	NumTrajSamples     *int              `json:"num_traj_samples"` // 1 to msgs.MaxTrajSamples
	Question           *string           `json:"question"`         // not served
	Stream             *bool             `json:"stream"`           // false only

	// Accepted and not applied; each is named in the answer's warnings.
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
	TopK        *int64   `json:"top_k"`
	Seed        *int64   `json:"seed"`
	NavText     *string  `json:"nav_text"`
}

// httpError is a refusal of an HTTP request: its status and the protocol's
// Error.
type httpError struct {
	status int
	e      *msgs.Error
}

func (h *httpError) Error() string { return string(h.e.Err.Code) + ": " + h.e.Err.Message }

// unprocessable is a 422 naming a field, as NVIDIA's service answers a
// request that does not validate.
func unprocessable(id, field, format string, a ...any) *httpError {
	return &httpError{status: 422, e: msgs.NewError(id, msgs.CodeBadRequest, field+": "+fmt.Sprintf(format, a...))}
}

// httpBuilt is a validated HTTP request in the protocol's form.
type httpBuilt struct {
	req      *msgs.InferRequest
	perm     []int // perm[k]: the images index of req.Frames[k]
	warnings []string
}

// shortCamera returns the short name of a camera (cross_left for
// cross_left_120fov), as NVIDIA's service also accepts them.
func shortCamera(c string) string {
	if i := strings.LastIndexByte(c, '_'); i > 0 && strings.HasSuffix(c, "fov") {
		return c[:i]
	}
	return c
}

// buildHTTPRequest checks body against the model and turns it into an
// InferRequest received at t0 (the stamps of its frames and poses).
func buildHTTPRequest(body *httpInferRequest, info EngineInfo, model string, maxPayload int64, t0 time.Time) (*httpBuilt, *httpError) {
	id := body.ID
	switch {
	case body.Model != nil && *body.Model != "" && *body.Model != model:
		return nil, unprocessable(id, "model", "%q is not served here; this node serves %q (GET /v1/models)", *body.Model, model)
	case body.Mode != "" && body.Mode != "trajectory" && body.Mode != "both":
		if body.Mode == "answer" {
			return nil, unprocessable(id, "mode", "answer (a text answer without a trajectory) is not served: the model answers with a trajectory and its reasoning; use trajectory or both")
		}
		return nil, unprocessable(id, "mode", "%q: want trajectory or both", body.Mode)
	case body.Question != nil && *body.Question != "":
		return nil, unprocessable(id, "question", "questions (VQA) are not served: the model answers with a trajectory and its reasoning")
	case body.NumTrajSamples != nil && (*body.NumTrajSamples < 1 || *body.NumTrajSamples > msgs.MaxTrajSamples):
		return nil, unprocessable(id, "num_traj_samples", "%d: want 1 to %d trajectory samples", *body.NumTrajSamples, msgs.MaxTrajSamples)
	case body.Stream != nil && *body.Stream:
		return nil, unprocessable(id, "stream", "streaming answers are not served")
	case body.MaxTokens != nil && body.MaxReasoningTokens != nil && *body.MaxTokens != *body.MaxReasoningTokens:
		return nil, unprocessable(id, "max_tokens", "%d differs from max_reasoning_tokens %d; give one of them", *body.MaxTokens, *body.MaxReasoningTokens)
	}
	order, herr := cameraOrder(id, body.CameraOrder, info.Cameras)
	if herr != nil {
		return nil, herr
	}
	frames := info.FramesPerCamera
	if body.NumFramesPerCamera != nil && *body.NumFramesPerCamera != frames {
		return nil, unprocessable(id, "num_frames_per_camera", "%d: the model takes %d frames of each camera", *body.NumFramesPerCamera, frames)
	}
	if want := len(order) * frames; len(body.Images) != want {
		return nil, unprocessable(id, "images", "got %d images, want %d (%d cameras × %d frames, camera-major, oldest first, in camera_order)",
			len(body.Images), want, len(order), frames)
	}
	if p := info.EgoPoses; p > 0 && len(body.Egomotion) != p {
		return nil, unprocessable(id, "egomotion", "got %d rows, want %d (oldest first, the last at t0, in the ego frame at t0)", len(body.Egomotion), p)
	}
	b := &httpBuilt{req: &msgs.InferRequest{V: msgs.Version, ID: id, Prompt: body.Prompt}}
	if err := b.options(body); err != nil {
		return nil, err
	}
	stamp := t0.UnixNano()
	// order[c] is the camera_order index of the model's camera c.
	var total int64
	for c, at := range order {
		for k := range frames {
			i := at*frames + k
			f, herr := httpFrame(id, i, body.Images[i])
			if herr != nil {
				return nil, herr
			}
			total += int64(len(f.Data))
			f.Camera = info.Cameras[c]
			f.StampNs = stamp - int64(frames-1-k)*int64(info.FramePeriod)
			b.req.Frames = append(b.req.Frames, *f)
			b.perm = append(b.perm, i)
		}
	}
	if total > maxPayload {
		return nil, &httpError{status: 413, e: msgs.NewError(id, msgs.CodeBadRequest, fmt.Sprintf(
			"images: %d bytes of images exceed the node's limit of %d bytes (--max-payload)", total, maxPayload))}
	}
	period := info.EgoPeriod
	if period == 0 {
		period = info.FramePeriod
	}
	for i, raw := range body.Egomotion {
		p, err := egoRow(raw)
		if err != nil {
			return nil, unprocessable(id, fmt.Sprintf("egomotion[%d]", i), "%v", err)
		}
		p.StampNs = stamp - int64(len(body.Egomotion)-1-i)*int64(period)
		b.req.EgoHistory = append(b.req.EgoHistory, p)
	}
	if err := b.req.Validate(); err != nil {
		e := msgs.ErrorReply(id, err)
		e.Err.Message = b.httpField(e.Err.Message)
		return nil, &httpError{status: 422, e: e}
	}
	return b, nil
}

// options reads the trajectory options and collects the warnings.
func (b *httpBuilt) options(body *httpInferRequest) *httpError {
	id := body.ID
	if body.MaxTokens != nil {
		b.req.MaxReasoningTokens = *body.MaxTokens
	}
	if body.MaxReasoningTokens != nil {
		b.req.MaxReasoningTokens = *body.MaxReasoningTokens
	}
	if body.NumTrajSamples != nil {
		b.req.NumTrajSamples = *body.NumTrajSamples
	}
	if b.req.MaxReasoningTokens < 0 {
		return unprocessable(id, "max_tokens", "%d: want ≥ 0 (0: the model's default)", b.req.MaxReasoningTokens)
	}
	if body.DeadlineMs != nil {
		if *body.DeadlineMs < 0 {
			return unprocessable(id, "deadline_ms", "%d: want ≥ 0 (0: none)", *body.DeadlineMs)
		}
		b.req.DeadlineMs = *body.DeadlineMs
	}
	for _, w := range []struct {
		set  bool
		name string
	}{{body.Temperature != nil, "temperature"}, {body.TopP != nil, "top_p"}, {body.TopK != nil, "top_k"}} {
		if w.set {
			b.warnings = append(b.warnings, w.name+": not applied; the reasoning is sampled at the model's temperature 0.6 and top-p 0.98")
		}
	}
	if body.Seed != nil {
		b.warnings = append(b.warnings, "seed: not applied; the node seeds sampling with the request's time")
	}
	if body.NavText != nil && *body.NavText != "" {
		b.warnings = append(b.warnings, "nav_text: not applied; Alpamayo-R1 takes no navigation text")
	}
	return nil
}

// cameraOrder maps the model's cameras to their place in camera_order:
// out[c] is the camera_order index of the model's camera c. Without
// camera_order the images are in the model's order.
func cameraOrder(id string, names []string, cameras []string) ([]int, *httpError) {
	out := make([]int, len(cameras))
	if names == nil {
		for c := range out {
			out[c] = c
		}
		return out, nil
	}
	var accepted []string
	for _, c := range cameras {
		accepted = append(accepted, fmt.Sprintf("%s (%s)", c, shortCamera(c)))
	}
	if len(names) != len(cameras) {
		return nil, unprocessable(id, "camera_order", "got %d cameras, want the model's %d: %s", len(names), len(cameras), strings.Join(accepted, ", "))
	}
	seen := make([]bool, len(cameras))
	for i, name := range names {
		c := slices.IndexFunc(cameras, func(c string) bool { return c == name || shortCamera(c) == name })
		switch {
		case c < 0:
			return nil, unprocessable(id, fmt.Sprintf("camera_order[%d]", i), "unknown camera %q; the model takes %s", name, strings.Join(accepted, ", "))
		case seen[c]:
			return nil, unprocessable(id, fmt.Sprintf("camera_order[%d]", i), "camera %q given twice", name)
		}
		seen[c], out[c] = true, i
	}
	return out, nil
}

// httpFrame decodes images[i]: base64, or a data URI, of a JPEG or PNG.
func httpFrame(id string, i int, s string) (*msgs.Frame, *httpError) {
	field := fmt.Sprintf("images[%d]", i)
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		mime, payload, ok := strings.Cut(rest, ",")
		if !ok || !strings.HasSuffix(mime, ";base64") {
			return nil, unprocessable(id, field, "a data URI must be data:image/...;base64,<data>")
		}
		s = payload
	}
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if data, err = base64.RawStdEncoding.DecodeString(s); err != nil {
			return nil, unprocessable(id, field, "not base64: %v", err)
		}
	}
	if len(data) == 0 {
		return nil, unprocessable(id, field, "empty image")
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, unprocessable(id, field, "not a JPEG or PNG image (%v)", err)
	}
	enc := msgs.Encoding(format)
	if enc != msgs.EncodingJPEG && enc != msgs.EncodingPNG {
		return nil, unprocessable(id, field, "%s images are not supported; send JPEG or PNG", format)
	}
	return &msgs.Frame{V: msgs.Version, Seq: uint64(i), Encoding: enc, Width: cfg.Width, Height: cfg.Height, Data: data}, nil
}

// errEgoRow says which forms an egomotion row may take.
var errEgoRow = errors.New(`want {"xyz": [x, y, z], "rot": [9 numbers, row-major]} ("rot" may be 3 rows of 3) or [x, y, z, r00, r01, r02, r10, r11, r12, r20, r21, r22]`)

// egoRow reads one egomotion row: the protocol's EgoPose form, or 12
// numbers (position, then the rotation row-major).
func egoRow(raw json.RawMessage) (msgs.EgoPose, error) {
	var p msgs.EgoPose
	var flat []float64
	if err := json.Unmarshal(raw, &flat); err == nil {
		if len(flat) != 12 {
			return p, fmt.Errorf("got %d numbers: %w", len(flat), errEgoRow)
		}
		copy(p.XYZ[:], flat[:3])
		copy(p.Rot[:], flat[3:])
		return p, nil
	}
	var obj struct {
		XYZ []float64       `json:"xyz"`
		Rot json.RawMessage `json:"rot"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.XYZ == nil || obj.Rot == nil {
		return p, errEgoRow
	}
	if len(obj.XYZ) != 3 {
		return p, fmt.Errorf("xyz: got %d numbers, want 3", len(obj.XYZ))
	}
	copy(p.XYZ[:], obj.XYZ)
	var rot []float64
	if err := json.Unmarshal(obj.Rot, &rot); err != nil {
		var rows [][]float64
		if err := json.Unmarshal(obj.Rot, &rows); err != nil || len(rows) != 3 {
			return p, errEgoRow
		}
		for _, r := range rows {
			if len(r) != 3 {
				return p, errEgoRow
			}
			rot = append(rot, r...)
		}
	}
	if len(rot) != 9 {
		return p, fmt.Errorf("rot: got %d numbers, want 9 (row-major)", len(rot))
	}
	copy(p.Rot[:], rot)
	return p, nil
}

// protocolField matches a message's leading path into the protocol's
// frames or ego history.
var protocolField = regexp.MustCompile(`^(frames|ego_history)\[(\d+)\]`)

// httpField rewrites a message about the protocol's fields (frames[k],
// ego_history[k]) into the HTTP request's (images[i], egomotion[k]).
func (b *httpBuilt) httpField(msg string) string {
	m := protocolField.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	k, _ := strconv.Atoi(msg[m[4]:m[5]])
	name := "egomotion"
	if msg[m[2]:m[3]] == "frames" {
		name = "images"
		if k < len(b.perm) {
			k = b.perm[k]
		}
	}
	return fmt.Sprintf("%s[%d]%s", name, k, msg[m[1]:])
}

// fieldPath matches the field path an error message starts with.
var fieldPath = regexp.MustCompile(`^[a-z_]+(\[\d+\])*(\.[a-z_]+(\[\d+\])*)*: `)

// fieldOf returns the field an error message names ("images[3]" of
// "images[3]: not base64"), or "" ("body: not JSON" names none).
func fieldOf(msg string) string {
	if m := fieldPath.FindString(msg); m != "" && m != "body: " {
		return strings.TrimSuffix(m, ": ")
	}
	return ""
}
