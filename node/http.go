package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"vlanode/msgs"
	"vlanode/version"
)

// The HTTP API (docs/http.md) has the shape of NVIDIA's Alpamayo NIM:
// POST /v1/infer takes base64 camera images and an ego-motion history as
// JSON and answers with a plan. Its requests join the NATS requests in the
// one queue, with the same shedding, deadlines and budget; health, model,
// version and metrics endpoints come with it.

// httpReply answers a request that came over HTTP: the handler waiting on
// POST /v1/infer receives the answer on ch.
type httpReply struct{ ch chan httpAnswer }

// httpAnswer is a plan or an Error.
type httpAnswer struct {
	plan *msgs.Plan
	err  *msgs.Error
}

func newHTTPReply() httpReply { return httpReply{ch: make(chan httpAnswer, 1)} }

func (r httpReply) plan(p *msgs.Plan, _ []byte) error { return r.deliver(httpAnswer{plan: p}) }

func (r httpReply) fail(e *msgs.Error) error { return r.deliver(httpAnswer{err: e}) }

// deliver hands the one answer over; ch holds one, so it never blocks.
func (r httpReply) deliver(a httpAnswer) error {
	select {
	case r.ch <- a:
		return nil
	default:
		return errors.New("http: a second answer to one request")
	}
}

// httpStatus is the HTTP status of an Error code. bad_request is 400; the
// HTTP API answers 422 instead where a request's field is at fault, as
// NVIDIA's service does.
func httpStatus(c msgs.Code) int {
	switch c {
	case msgs.CodeBadRequest:
		return http.StatusBadRequest
	case msgs.CodeUnsupported:
		return http.StatusUnprocessableEntity
	case msgs.CodeOverloaded:
		return http.StatusServiceUnavailable
	case msgs.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// httpReadHeaderTimeout bounds how long a client may take to send headers,
// httpReadTimeout headers and body: a body is read within a minute or
// the request fails (a slow client cannot hold a body slot for longer).
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpReadTimeout       = time.Minute
)

// httpBodySlots is how many POST /v1/infer bodies are read and decoded at
// once; more requests wait, their bodies unread, until a slot frees or
// their client leaves. It bounds the memory the HTTP API adds whatever
// the number of connections (docs/node.md, "Memory").
const httpBodySlots = 2

// startHTTP serves the HTTP API when an address was given.
func (n *Node) startHTTP() error {
	if n.opts.HTTPAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", n.opts.HTTPAddr)
	if err != nil {
		return fmt.Errorf("node: HTTP API: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/infer", n.handleInfer)
	mux.HandleFunc("GET /v1/health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "live"})
	})
	mux.HandleFunc("GET /v1/health/ready", n.handleReady)
	mux.HandleFunc("GET /v1/models", n.handleModels)
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, httpVersion{Info: version.Read(), Protocol: msgs.Version})
	})
	mux.Handle("GET /metrics", n.m.reg)
	n.httpLn = ln
	n.httpBodies = make(chan struct{}, httpBodySlots)
	n.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: httpReadHeaderTimeout, ReadTimeout: httpReadTimeout}
	go func() {
		if err := n.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP API stopped", "err", err)
		}
	}()
	n.log.Info("HTTP API", "url", "http://"+ln.Addr().String())
	return nil
}

// HTTPAddr returns the address the HTTP API is served on, or "".
func (n *Node) HTTPAddr() string {
	if n.httpLn == nil {
		return ""
	}
	return n.httpLn.Addr().String()
}

// httpBodyLimit is the largest POST /v1/infer body: the node's request
// limit in base64, and room for the rest of the request.
func (n *Node) httpBodyLimit() int64 { return n.maxPayload/3*4 + 1<<20 }

// handleInfer answers POST /v1/infer.
func (n *Node) handleInfer(w http.ResponseWriter, r *http.Request) {
	received := n.now()
	n.m.requests.Inc("")
	if n.closing.Load() {
		n.m.shed.Inc(shedShutdown)
		n.httpFail(w, http.StatusServiceUnavailable, msgs.NewError("", msgs.CodeOverloaded,
			fmt.Sprintf("node %s is shutting down; retry on another node", n.opts.Name)))
		return
	}
	b, ok := n.readInfer(w, r, received)
	if !ok {
		return
	}
	if e := n.checkRequest(b.req); e != nil {
		e.Err.Message = b.httpField(e.Err.Message)
		n.httpFail(w, http.StatusUnprocessableEntity, e)
		return
	}
	reply := newHTTPReply()
	j := &job{req: b.req, to: reply, received: received}
	if b.req.DeadlineMs > 0 {
		j.deadline = received.Add(time.Duration(b.req.DeadlineMs) * time.Millisecond)
	}
	j.unmarshal = n.now().Sub(received)
	n.m.stage("unmarshal", j.unmarshal)
	n.admit(j)
	select {
	case a := <-reply.ch:
		if a.err != nil {
			a.err.Err.Message = b.httpField(a.err.Err.Message)
			status := httpStatus(a.err.Err.Code)
			if status == http.StatusBadRequest && fieldOf(a.err.Err.Message) != "" {
				status = http.StatusUnprocessableEntity
			}
			writeError(w, status, a.err) // counted when the job was answered
			return
		}
		writeJSON(w, http.StatusOK, NewPlanJSON(a.plan, b.warnings))
	case <-r.Context().Done():
		// The client left. A request still waiting leaves the queue;
		// one that runs finishes, and its answer is dropped.
		if n.sched.remove(j) && n.answer(j) {
			n.m.queueDepth.Set(float64(n.sched.depth()))
			n.m.unanswerable.Inc("")
		}
		n.log.Debug("HTTP client left before the answer", "request", b.req.ID)
	}
}

// readInfer reads and decodes a POST /v1/infer body into the protocol's
// request, in one of the httpBodySlots: it waits for a slot (the body
// unread) and gives it back once the body's JSON and its base64 frames are
// no longer needed, before the request joins the queue. It answers the
// client itself when it fails (ok false).
func (n *Node) readInfer(w http.ResponseWriter, r *http.Request, received time.Time) (b *httpBuilt, ok bool) {
	select {
	case n.httpBodies <- struct{}{}:
	case <-r.Context().Done():
		n.log.Debug("HTTP client left while waiting to send its body")
		return nil, false
	}
	defer func() { <-n.httpBodies }()
	raw, err := readBody(w, r, n.httpBodyLimit())
	var body httpInferRequest
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	raw = nil // the strings hold what is needed of it
	if err != nil {
		status, e := n.bodyError(err)
		n.httpFail(w, status, e)
		return nil, false
	}
	if body.ID == "" {
		body.ID = "http-" + strconv.FormatUint(n.httpSeq.Add(1), 10)
	}
	b, herr := buildHTTPRequest(&body, n.info, n.info.Model, n.maxPayload, received)
	if herr != nil {
		n.httpFail(w, herr.status, herr.e)
		return nil, false
	}
	return b, true
}

// readBody reads a request's body of at most limit bytes into one buffer
// of its announced length (a body of unknown length grows as it comes), so
// that reading it costs its size once; a longer body is an
// *http.MaxBytesError, one shorter than announced io.ErrUnexpectedEOF.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	switch cl := r.ContentLength; {
	case cl > limit:
		return nil, &http.MaxBytesError{Limit: limit}
	case cl >= 0:
		raw := make([]byte, cl)
		if _, err := io.ReadFull(rd, raw); err != nil {
			return nil, err
		}
		return raw, nil
	}
	return io.ReadAll(rd)
}

// bodyError turns a body that cannot be read as a request into its answer.
func (n *Node) bodyError(err error) (int, *msgs.Error) {
	var tooBig *http.MaxBytesError
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, msgs.NewError("", msgs.CodeBadRequest, fmt.Sprintf(
			"body: larger than %d bytes (the node's --max-payload of %d bytes in base64); send smaller JPEG frames, or raise the limit",
			tooBig.Limit, n.maxPayload))
	case errors.As(err, &typ) && typ.Field != "":
		return http.StatusUnprocessableEntity, msgs.NewError("", msgs.CodeBadRequest, fmt.Sprintf("%s: want %s, got %s", typ.Field, jsonType(typ.Type.Kind().String()), typ.Value))
	case errors.As(err, &syn):
		return http.StatusBadRequest, msgs.NewError("", msgs.CodeBadRequest, fmt.Sprintf("body: not JSON (at byte %d: %v)", syn.Offset, err))
	}
	return http.StatusBadRequest, msgs.NewError("", msgs.CodeBadRequest, "body: "+err.Error())
}

// jsonType names a Go kind as JSON does.
func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "number"
	case kind == "slice", kind == "array":
		return "array"
	case kind == "struct", kind == "map":
		return "object"
	case kind == "bool":
		return "boolean"
	}
	return kind
}

// httpErrorBody is the JSON of an HTTP error answer: the protocol's Error,
// with the field the message names.
type httpErrorBody struct {
	ID    string `json:"id"`
	Error struct {
		Code    msgs.Code `json:"code"`
		Message string    `json:"message"`
		Field   string    `json:"field,omitempty"`
	} `json:"error"`
}

// httpFail counts an error answer by code and writes it.
func (n *Node) httpFail(w http.ResponseWriter, status int, e *msgs.Error) {
	n.m.errors.Inc(string(e.Err.Code))
	writeError(w, status, e)
	n.log.Debug("answered with an error", "request", e.ID, "code", e.Err.Code, "status", status, "message", e.Err.Message)
}

// writeError writes an error answer.
func writeError(w http.ResponseWriter, status int, e *msgs.Error) {
	var b httpErrorBody
	b.ID = e.ID
	b.Error.Code, b.Error.Message, b.Error.Field = e.Err.Code, e.Err.Message, fieldOf(e.Err.Message)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, b)
}

// PlanJSON is a plan in JSON: the protocol's Plan, keys and units
// unchanged. The HTTP API answers with it, with the warnings about request
// fields it did not apply; `vlanode replay --json` prints it.
type PlanJSON struct {
	ID            string             `json:"id"`
	Node          string             `json:"node"`
	Model         string             `json:"model"`
	StampNs       int64              `json:"stamp_ns"`
	Trajectory    TrajectoryJSON     `json:"trajectory"`
	Actions       [][2]float64       `json:"actions"`
	Reasoning     string             `json:"reasoning"`
	TimingMs      map[string]float64 `json:"timing_ms"`
	BudgetBytes   uint64             `json:"budget_bytes"`
	VRAMPeakBytes uint64             `json:"vram_peak_bytes"`
	// Samples are trajectory samples 1 to K−1 of num_traj_samples K,
	// absent for one sample (msgs.Plan.Samples).
	Samples  []SampleJSON `json:"samples,omitempty"`
	Warnings []string     `json:"warnings"`
}

// SampleJSON is a trajectory sample after the first, in JSON.
type SampleJSON struct {
	Trajectory TrajectoryJSON `json:"trajectory"`
	Actions    [][2]float64   `json:"actions"`
}

// TrajectoryJSON is a Trajectory in JSON.
type TrajectoryJSON struct {
	DT  float64      `json:"dt"`
	XYZ [][3]float64 `json:"xyz"`
	Rot [][9]float64 `json:"rot"`
}

// NewPlanJSON returns p in JSON, with warnings.
func NewPlanJSON(p *msgs.Plan, warnings []string) PlanJSON {
	t := p.TimingMs
	if warnings == nil {
		warnings = []string{}
	}
	var samples []SampleJSON
	for _, s := range p.Samples {
		samples = append(samples, SampleJSON{Actions: s.Actions,
			Trajectory: TrajectoryJSON{DT: s.Trajectory.DT, XYZ: s.Trajectory.XYZ, Rot: s.Trajectory.Rot}})
	}
	return PlanJSON{
		Samples: samples,
		ID:      p.ID, Node: p.Node, Model: p.Model, StampNs: p.StampNs,
		Trajectory: TrajectoryJSON{DT: p.Trajectory.DT, XYZ: p.Trajectory.XYZ, Rot: p.Trajectory.Rot},
		Actions:    p.Actions, Reasoning: p.Reasoning,
		TimingMs: map[string]float64{"preprocess": t.Preprocess, "vision": t.Vision, "prefill": t.Prefill,
			"decode": t.Decode, "diffusion": t.Diffusion, "total": t.Total},
		BudgetBytes: p.BudgetBytes, VRAMPeakBytes: p.VRAMPeakBytes, Warnings: warnings,
	}
}

// handleReady answers 200 while the node takes requests, 503 once it is
// shutting down.
func (n *Node) handleReady(w http.ResponseWriter, _ *http.Request) {
	if n.closing.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "model": n.info.Model})
}

// httpModel is an entry of GET /v1/models: OpenAI's model object, with what
// a client needs to build a request.
type httpModel struct {
	ID                 string   `json:"id"`
	Object             string   `json:"object"`
	Created            int64    `json:"created"`
	OwnedBy            string   `json:"owned_by"`
	Node               string   `json:"node"`
	CameraOrder        []string `json:"camera_order"`
	NumFramesPerCamera int      `json:"num_frames_per_camera"`
	FramePeriodMs      float64  `json:"frame_period_ms"`
	EgomotionRows      int      `json:"egomotion_rows"`
	MaxPayload         int64    `json:"max_payload"`
	BudgetBytes        uint64   `json:"budget_bytes"`
}

func (n *Node) handleModels(w http.ResponseWriter, _ *http.Request) {
	i := n.info
	m := httpModel{
		ID: i.Model, Object: "model", Created: n.started.Unix(), OwnedBy: "vlanode", Node: n.opts.Name,
		CameraOrder: i.Cameras, NumFramesPerCamera: i.FramesPerCamera, FramePeriodMs: ms(i.FramePeriod),
		EgomotionRows: i.EgoPoses, MaxPayload: n.maxPayload, BudgetBytes: n.engine.Info().BudgetBytes,
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []httpModel{m}})
}

// httpVersion is GET /v1/version: the binary's version and the protocol's.
type httpVersion struct {
	version.Info
	Protocol int `json:"protocol"`
}

// writeJSON writes v as the JSON body of a response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // an error means the client left: nothing to tell it
}
