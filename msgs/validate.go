package msgs

import (
	"math"
	"strings"
)

// Validation of what the types cannot say. Every error is a *FieldError
// with code bad_request whose Path names the field.

// encodingList is the encodings of protocol v1, for error messages.
var encodingList = strings.Join([]string{
	string(EncodingJPEG), string(EncodingPNG), string(EncodingRGB8), string(EncodingBGR8), string(EncodingMono8),
}, ", ")

// Validate checks a Frame: a camera name, a known encoding, dimensions in
// 1..MaxDimension, non-empty data, and for raw encodings a step of at least
// Width×channels and exactly Step×Height bytes of data.
func (f *Frame) Validate() error { return f.validate("") }

// validate checks f, whose fields are at path prefix.
func (f *Frame) validate(prefix string) error {
	at := func(key string) string { return joinKey(prefix, key) }
	switch {
	case f.Camera == "":
		return badRequest(at("camera"), "must not be empty")
	case !f.Encoding.Known():
		return badRequest(at("encoding"), "unknown encoding %q, want one of %s", f.Encoding, encodingList)
	case f.Width < 1 || f.Width > MaxDimension:
		return badRequest(at("width"), "%d out of range 1..%d", f.Width, MaxDimension)
	case f.Height < 1 || f.Height > MaxDimension:
		return badRequest(at("height"), "%d out of range 1..%d", f.Height, MaxDimension)
	case f.Step < 0:
		return badRequest(at("step"), "must not be negative, got %d", f.Step)
	case len(f.Data) == 0:
		return badRequest(at("data"), "must not be empty")
	}
	ch := f.Encoding.Channels()
	if ch == 0 {
		return nil // compressed: the size is the image decoder's to check
	}
	row := f.Width * ch
	if f.Step == 0 {
		if want := row * f.Height; len(f.Data) != want {
			return badRequest(at("data"), "got %d bytes, want %d (width %d × height %d × %d bytes a pixel for %s)",
				len(f.Data), want, f.Width, f.Height, ch, f.Encoding)
		}
		return nil
	}
	if f.Step < row {
		return badRequest(at("step"), "%d is less than width × bytes a pixel = %d × %d = %d", f.Step, f.Width, ch, row)
	}
	if f.Step > math.MaxInt/f.Height {
		return badRequest(at("step"), "%d too large", f.Step)
	}
	if want := f.Step * f.Height; len(f.Data) != want {
		return badRequest(at("data"), "got %d bytes, want %d (step %d × height %d)", len(f.Data), want, f.Step, f.Height)
	}
	return nil
}

// Validate checks an InferRequest: a non-empty id, either frames or
// use_latest, valid frames, finite ego poses, and non-negative limits.
func (r *InferRequest) Validate() error {
	switch {
	case r.ID == "":
		return badRequest("id", "must not be empty")
	case len(r.Frames) > 0 && r.UseLatest:
		return badRequest("frames", "want frames or use_latest, got both")
	case len(r.Frames) == 0 && !r.UseLatest:
		return badRequest("frames", "want frames or use_latest, got neither")
	}
	for i := range r.Frames {
		if err := r.Frames[i].validate(joinIndex("frames", i)); err != nil {
			return err
		}
	}
	for i, p := range r.EgoHistory {
		at := joinIndex("ego_history", i)
		if err := finite(joinKey(at, "xyz"), p.XYZ[:]); err != nil {
			return err
		}
		if err := finite(joinKey(at, "rot"), p.Rot[:]); err != nil {
			return err
		}
	}
	switch {
	case r.MaxReasoningTokens < 0:
		return badRequest("max_reasoning_tokens", "must not be negative, got %d", r.MaxReasoningTokens)
	case r.DeadlineMs < 0:
		return badRequest("deadline_ms", "must not be negative, got %d", r.DeadlineMs)
	case r.Question != "" && strings.TrimSpace(r.Question) == "":
		return badRequest("question", "must not be blank")
	case r.Question != "" && r.NavText != "":
		return badRequest("nav_text", "is for planning; a request with a question gets an answer, not a plan")
	case r.Temperature != nil && !(*r.Temperature >= 0 && !math.IsInf(*r.Temperature, 1)):
		return badRequest("temperature", "must be finite and >= 0 (0: greedy), got %g", *r.Temperature)
	case r.TopP != nil && !(*r.TopP > 0 && *r.TopP <= 1):
		return badRequest("top_p", "must be in (0, 1], got %g", *r.TopP)
	case r.NumTrajSamples < 0 || r.NumTrajSamples > MaxTrajSamples:
		return badRequest("num_traj_samples", "must be 1 to %d, got %d", MaxTrajSamples, r.NumTrajSamples)
	case r.NumTrajSamples > 1 && r.Question != "":
		return badRequest("num_traj_samples", "is for planning; a request with a question gets an answer, not trajectories")
	}
	seen := map[string]int{}
	for i, c := range r.CameraOrder {
		at := joinIndex("camera_order", i)
		if c == "" {
			return badRequest(at, "must not be empty")
		}
		if j, ok := seen[c]; ok {
			return badRequest(at, "camera %q is also camera_order[%d]", c, j)
		}
		seen[c] = i
	}
	return nil
}

// Validate checks a Plan: a non-empty id, one rotation and one action for
// each waypoint, a positive step when there are waypoints, and finite,
// non-negative numbers where they must be.
func (p *Plan) Validate() error {
	n := len(p.Trajectory.XYZ)
	switch {
	case p.ID == "":
		return badRequest("id", "must not be empty")
	case len(p.Trajectory.Rot) != n:
		return badRequest("trajectory.rot", "got %d rotations for %d waypoints", len(p.Trajectory.Rot), n)
	case len(p.Actions) != n:
		return badRequest("actions", "got %d actions for %d waypoints", len(p.Actions), n)
	case n > 0 && !(p.Trajectory.DT > 0 && !math.IsInf(p.Trajectory.DT, 1)):
		return badRequest("trajectory.dt", "must be positive and finite, got %g", p.Trajectory.DT)
	}
	for i := range n {
		if err := finite(joinIndex("trajectory.xyz", i), p.Trajectory.XYZ[i][:]); err != nil {
			return err
		}
		if err := finite(joinIndex("trajectory.rot", i), p.Trajectory.Rot[i][:]); err != nil {
			return err
		}
		if err := finite(joinIndex("actions", i), p.Actions[i][:]); err != nil {
			return err
		}
	}
	for i := range p.Samples {
		if err := p.Samples[i].validate(joinIndex("samples", i)); err != nil {
			return err
		}
	}
	t := p.TimingMs
	for _, s := range []struct {
		key string
		ms  float64
	}{
		{"preprocess", t.Preprocess}, {"vision", t.Vision}, {"prefill", t.Prefill},
		{"decode", t.Decode}, {"diffusion", t.Diffusion}, {"total", t.Total},
	} {
		if !(s.ms >= 0 && !math.IsInf(s.ms, 1)) {
			return badRequest("timing_ms."+s.key, "must be finite and non-negative, got %g", s.ms)
		}
	}
	return nil
}

// validate checks a trajectory sample at path: one rotation and one action
// for each waypoint, a positive step when there are waypoints, finite
// numbers.
func (s *TrajSample) validate(path string) error {
	n := len(s.Trajectory.XYZ)
	tr := joinKey(path, "trajectory")
	switch {
	case len(s.Trajectory.Rot) != n:
		return badRequest(joinKey(tr, "rot"), "got %d rotations for %d waypoints", len(s.Trajectory.Rot), n)
	case len(s.Actions) != n:
		return badRequest(joinKey(path, "actions"), "got %d actions for %d waypoints", len(s.Actions), n)
	case n > 0 && !(s.Trajectory.DT > 0 && !math.IsInf(s.Trajectory.DT, 1)):
		return badRequest(joinKey(tr, "dt"), "must be positive and finite, got %g", s.Trajectory.DT)
	}
	for i := range n {
		for _, v := range []struct {
			at string
			xs []float64
		}{{joinKey(tr, "xyz"), s.Trajectory.XYZ[i][:]}, {joinKey(tr, "rot"), s.Trajectory.Rot[i][:]}, {joinKey(path, "actions"), s.Actions[i][:]}} {
			if err := finite(joinIndex(v.at, i), v.xs); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate checks an Error: it must have a code. Codes beyond the five of
// protocol v1 are let through; a client should treat them as internal.
func (e *Error) Validate() error {
	if e.Err.Code == "" {
		return badRequest("error.code", "must not be empty")
	}
	return nil
}

// Validate checks a Status: a node name and a non-negative queue depth.
func (s *Status) Validate() error {
	switch {
	case s.Node == "":
		return badRequest("node", "must not be empty")
	case s.QueueDepth < 0:
		return badRequest("queue_depth", "must not be negative, got %d", s.QueueDepth)
	}
	return nil
}

// finite checks that every number of the vector at path is finite.
func finite(path string, xs []float64) error {
	for i, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return badRequest(joinIndex(path, i), "not finite")
		}
	}
	return nil
}
