package msgs

import "fmt"

// Decoding: parse the msgpack into generic values, keeping only the keys
// the message's shape names (shape.go), then read each field by name with
// the converters of fields.go, so that every error names its field. Decoders that receive (DecodeFrame, DecodeInferRequest) also
// validate; so do the client decoders, so that a caller never sees a
// message that breaks the contract.

// DecodeFrame decodes and validates a Frame published on
// vla.<node>.frames.<camera>. Every error is a *FieldError.
func DecodeFrame(b []byte) (*Frame, error) {
	return decode(b, frameShape, frameFrom)
}

// DecodeInferRequest decodes and validates an InferRequest. Every error is
// a *FieldError; ErrorReply turns it into the reply.
func DecodeInferRequest(b []byte) (*InferRequest, error) {
	return decode(b, requestShape, inferRequestFrom)
}

// DecodePlan decodes and validates a Plan, as published on vla.<node>.plans.
func DecodePlan(b []byte) (*Plan, error) {
	return decode(b, planShape, planFrom)
}

// DecodeError decodes and validates an Error reply.
func DecodeError(b []byte) (*Error, error) {
	return decode(b, errorShape, errorFrom)
}

// DecodeStatus decodes and validates a Status, as published on
// vla.<node>.status.
func DecodeStatus(b []byte) (*Status, error) {
	return decode(b, statusShape, statusFrom)
}

// DecodeReply decodes the reply to an InferRequest: an Error when the
// message has the key "error", a Plan otherwise. Exactly one of the three
// results is non-nil.
func DecodeReply(b []byte) (*Plan, *Error, error) {
	return decodeReply(b, replyShape, planFrom)
}

// decodeReply parses b as the union s asks and extracts an Error when it
// has the key "error", a T with from otherwise. Exactly one of the three
// results is non-nil.
func decodeReply[T any, PT interface {
	*T
	validator
}](b []byte, s *shape, from func(object) T) (PT, *Error, error) {
	m, err := parse(b, s)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := m["error"]; ok {
		e, err := extract(m, errorFrom)
		return nil, e, err
	}
	r, err := extract[T, PT](m, from)
	return r, nil, err
}

// RequestID returns the "id" of a message if it can be read as a string,
// and "" otherwise, so that an Error reply to a request that failed to
// decode can still carry the request's id.
func RequestID(b []byte) string {
	m, err := parse(b, idShape)
	if err != nil {
		return ""
	}
	id, _ := m["id"].(string)
	return id
}

// validator is a message that can check its own semantics.
type validator interface{ Validate() error }

// decode parses b as s asks and extracts and validates a message with from.
func decode[T any, PT interface {
	*T
	validator
}](b []byte, s *shape, from func(object) T) (PT, error) {
	m, err := parse(b, s)
	if err != nil {
		return nil, err
	}
	return extract[T, PT](m, from)
}

func extract[T any, PT interface {
	*T
	validator
}](m map[string]any, from func(object) T) (PT, error) {
	o := object{x: &extractor{}, m: m}
	version(o, required)
	msg := from(o)
	if o.x.err != nil {
		return nil, o.x.err
	}
	p := PT(&msg)
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// version checks the "v" of a message. It is required at the top level and
// optional on a Frame inside an InferRequest.
func version(o object, req bool) {
	v, ok := o.lookup("v", req)
	if !ok {
		return
	}
	path := joinKey(o.path, "v")
	n, err := asInt64(path, v)
	if err != nil {
		o.x.fail(err)
		return
	}
	if n != Version {
		o.x.fail(&FieldError{
			Path: path,
			Msg:  fmt.Sprintf("unsupported protocol version %d (want %d)", n, Version),
			Code: CodeUnsupported,
		})
	}
}

func frameFrom(o object) Frame {
	return Frame{
		V:        Version,
		Camera:   field(o, "camera", required, asString),
		StampNs:  field(o, "stamp_ns", required, asInt64),
		Seq:      field(o, "seq", optional, asUint64),
		Encoding: Encoding(field(o, "encoding", required, asString)),
		Width:    field(o, "width", required, asInt),
		Height:   field(o, "height", required, asInt),
		Step:     field(o, "step", optional, asInt),
		Data:     field(o, "data", required, asBin),
	}
}

func egoPoseFrom(o object) EgoPose {
	return EgoPose{
		StampNs: field(o, "stamp_ns", required, asInt64),
		XYZ:     field(o, "xyz", required, asVec3),
		Rot:     field(o, "rot", required, asMat3),
	}
}

func inferRequestFrom(o object) InferRequest {
	r := InferRequest{
		V:  Version,
		ID: field(o, "id", required, asString),
	}
	for fo := range children(o, "frames", optional) {
		version(fo, optional)
		r.Frames = append(r.Frames, frameFrom(fo))
	}
	r.UseLatest = field(o, "use_latest", optional, asBool)
	// Required, but may be empty: how many poses a model needs is the
	// model's business.
	for po := range children(o, "ego_history", required) {
		r.EgoHistory = append(r.EgoHistory, egoPoseFrom(po))
	}
	r.Prompt = field(o, "prompt", optional, asString)
	r.MaxReasoningTokens = field(o, "max_reasoning_tokens", optional, asInt)
	r.DeadlineMs = field(o, "deadline_ms", optional, asInt)
	r.CameraOrder = list(o, "camera_order", optional, asString)
	if v := o.m["camera_order"]; v != nil && r.CameraOrder == nil && o.x.err == nil {
		o.x.fail(badRequest("camera_order", "must not be empty (leave it out for the model's cameras)"))
	}
	r.NavText = field(o, "nav_text", optional, asString)
	r.Question = field(o, "question", optional, asString)
	if q, ok := o.m["question"].(string); ok && q == "" {
		o.x.fail(badRequest("question", "must not be empty"))
	}
	r.Temperature = pointer(o, "temperature", asFloat)
	r.TopP = pointer(o, "top_p", asFloat)
	r.Seed = pointer(o, "seed", asUint64)
	r.NumTrajSamples = field(o, "num_traj_samples", optional, asInt)
	return r
}

// pointer returns the optional value at key converted by conv, or nil when
// it is absent.
func pointer[T any](o object, key string, conv converter[T]) *T {
	v, ok := o.lookup(key, optional)
	if !ok {
		return nil
	}
	t, err := conv(joinKey(o.path, key), v)
	if err != nil {
		o.x.fail(err)
		return nil
	}
	return &t
}

func trajectoryFrom(o object) Trajectory {
	return Trajectory{
		DT:  field(o, "dt", required, asFloat),
		XYZ: list(o, "xyz", required, asVec3),
		Rot: list(o, "rot", required, asMat3),
	}
}

func timingFrom(o object) Timing {
	return Timing{
		Preprocess: field(o, "preprocess", required, asFloat),
		Vision:     field(o, "vision", required, asFloat),
		Prefill:    field(o, "prefill", required, asFloat),
		Decode:     field(o, "decode", required, asFloat),
		Diffusion:  field(o, "diffusion", required, asFloat),
		Total:      field(o, "total", required, asFloat),
	}
}

func planFrom(o object) Plan {
	p := Plan{
		V:       Version,
		ID:      field(o, "id", required, asString),
		Node:    field(o, "node", required, asString),
		Model:   field(o, "model", required, asString),
		StampNs: field(o, "stamp_ns", required, asInt64),
	}
	if to, ok := child(o, "trajectory", required); ok {
		p.Trajectory = trajectoryFrom(to)
	}
	p.Actions = list(o, "actions", required, asVec2)
	p.Reasoning = field(o, "reasoning", required, asString)
	if to, ok := child(o, "timing_ms", required); ok {
		p.TimingMs = timingFrom(to)
	}
	p.BudgetBytes = field(o, "budget_bytes", required, asUint64)
	p.VRAMPeakBytes = field(o, "vram_peak_bytes", required, asUint64)
	p.Answer = field(o, "answer", optional, asString)
	for so := range children(o, "samples", optional) {
		var ts TrajSample
		if to, ok := child(so, "trajectory", required); ok {
			ts.Trajectory = trajectoryFrom(to)
		}
		ts.Actions = list(so, "actions", required, asVec2)
		p.Samples = append(p.Samples, ts)
	}
	return p
}

func errorFrom(o object) Error {
	e := Error{
		V:  Version,
		ID: field(o, "id", required, asString),
	}
	if eo, ok := child(o, "error", required); ok {
		e.Err = ErrorDetail{
			Code:    Code(field(eo, "code", required, asString)),
			Message: field(eo, "message", required, asString),
		}
	}
	return e
}

func planSummaryFrom(o object) *PlanSummary {
	return &PlanSummary{
		Mode:          field(o, "mode", optional, asString),
		ResidentBytes: field(o, "resident_bytes", optional, asUint64),
		StreamedBytes: field(o, "streamed_bytes", optional, asUint64),
		HostBytes:     field(o, "host_bytes", optional, asUint64),
		FixedBytes:    field(o, "fixed_bytes", optional, asUint64),
		PredictedMs:   field(o, "predicted_ms", optional, asFloat),
	}
}

func gpuFrom(o object) *GPU {
	return &GPU{
		Name:             field(o, "name", optional, asString),
		MemoryTotalBytes: field(o, "memory_total_bytes", optional, asUint64),
		MemoryUsedBytes:  field(o, "memory_used_bytes", optional, asUint64),
		MemoryFreeBytes:  field(o, "memory_free_bytes", optional, asUint64),
		PCIeGen:          field(o, "pcie_gen", optional, asInt),
		PCIeGenMax:       field(o, "pcie_gen_max", optional, asInt),
		PCIeWidth:        field(o, "pcie_width", optional, asInt),
		PCIeWidthMax:     field(o, "pcie_width_max", optional, asInt),
		TemperatureC:     field(o, "temperature_c", optional, asInt),
		SMClockMHz:       field(o, "sm_clock_mhz", optional, asInt),
		MemClockMHz:      field(o, "mem_clock_mhz", optional, asInt),
		ThrottleReasons:  list(o, "throttle_reasons", optional, asString),
	}
}

func statusFrom(o object) Status {
	s := Status{
		V:           Version,
		Node:        field(o, "node", required, asString),
		Model:       field(o, "model", required, asString),
		BudgetBytes: field(o, "budget_bytes", required, asUint64),
	}
	if po, ok := child(o, "plan", optional); ok {
		s.Plan = planSummaryFrom(po)
	}
	if g, ok := child(o, "gpu", optional); ok {
		s.GPU = gpuFrom(g)
	}
	s.QueueDepth = field(o, "queue_depth", required, asInt)
	s.Counters = field(o, "counters", optional, asCounters)
	return s
}
