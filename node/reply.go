package node

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"vlanode/msgs"
)

// Every accepted request (a job) is answered exactly once, through answer;
// requests refused before they became jobs are answered with sendError. A
// job from the jobs queue (job.stored) has its answer stored instead
// (jobs.go), or is handed back to the queue when it was shed for load.

// answerTo is where a request's one answer goes: a NATS reply subject
// (natsReply) or an HTTP response (httpReply).
type answerTo interface {
	// plan delivers a plan; data is its msgpack encoding.
	plan(p *msgs.Plan, data []byte) error
	// fail delivers an Error.
	fail(e *msgs.Error) error
}

// natsReply answers on a NATS reply subject. With an endpoint, the answer
// is counted in that endpoint's micro stats, timed from received.
type natsReply struct {
	n        *Node
	subject  string
	ep       *endpoint // nil: a frame published as a request
	received time.Time
}

func (r natsReply) plan(_ *msgs.Plan, data []byte) error {
	err := r.n.nc.Publish(r.subject, data)
	r.count("")
	return err
}

// fail sends e with the micro protocol's error headers: Nats-Service-Error
// is "code: message" and Nats-Service-Error-Code the HTTP status the HTTP
// API gives the same error (httpStatus).
func (r natsReply) fail(e *msgs.Error) error {
	data, err := msgs.Marshal(e)
	if err != nil {
		return err
	}
	desc := headerValue(string(e.Err.Code) + ": " + e.Err.Message)
	m := &nats.Msg{Subject: r.subject, Data: data, Header: nats.Header{}}
	m.Header.Set(micro.ErrorHeader, desc)
	m.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(httpStatus(e.Err.Code)))
	err = r.n.nc.PublishMsg(m)
	r.count(desc)
	return err
}

func (r natsReply) count(errText string) {
	if r.ep != nil {
		r.ep.answered(r.n.now().Sub(r.received), errText)
	}
}

// maxHeaderValue bounds the error text put in a header; the reply's body
// carries all of it.
const maxHeaderValue = 1024

// headerValue makes s one header line.
func headerValue(s string) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) > maxHeaderValue {
		s = s[:maxHeaderValue] + "…"
	}
	return s
}

// answer claims j's one reply. It reports false when j was answered already.
func (n *Node) answer(j *job) bool {
	if !j.answered.CompareAndSwap(false, true) {
		return false
	}
	if j.timer != nil {
		j.timer.Stop()
	}
	return true
}

// shed answers j with the error a shed request earns and counts it.
func (n *Node) shed(j *job, reason, msg string) {
	code := msgs.CodeOverloaded
	if reason == shedDeadline {
		code = msgs.CodeDeadlineExceeded
	}
	if !n.answer(j) {
		return
	}
	n.m.shed.Inc(reason)
	if j.stored != nil {
		n.shedStored(j, code, msg)
		return
	}
	n.send(j.to, msgs.NewError(j.req.ID, code, msg))
	n.m.stage("total", n.now().Sub(j.received))
}

// sendJobError answers j with e.
func (n *Node) sendJobError(j *job, e *msgs.Error) {
	if !n.answer(j) {
		return
	}
	if j.stored != nil {
		n.answerStored(j, e)
		return
	}
	n.send(j.to, e)
	n.m.stage("total", n.now().Sub(j.received))
}

// sendPlan answers j with p and publishes p on vla.<node>.plans.
func (n *Node) sendPlan(j *job, p *msgs.Plan) {
	if !n.answer(j) {
		return
	}
	start := n.now()
	data, err := msgs.Marshal(p)
	if err != nil {
		e := msgs.NewError(j.req.ID, msgs.CodeInternal, "encoding the plan: "+err.Error())
		if j.stored != nil {
			n.answerStored(j, e)
			return
		}
		n.send(j.to, e)
		return
	}
	// Counted before it goes out, as errors are: a client that has its
	// plan finds it in the metrics.
	n.m.plans.Inc("")
	n.m.modelStages(p.TimingMs)
	n.m.vramPeak.SetMax(float64(p.VRAMPeakBytes))
	if j.stored != nil {
		n.storeAnswer(j, data)
	} else if err := j.to.plan(p, data); err != nil {
		n.log.Error("sending a plan failed", "request", j.req.ID, "err", err)
	}
	if err := n.nc.Publish(PlansSubject(n.opts.Name), data); err != nil {
		n.log.Error("publishing a plan failed", "request", j.req.ID, "err", err)
	}
	end := n.now()
	n.m.stage("reply", end.Sub(start))
	n.m.stage("total", end.Sub(j.received))
}

// sendError answers a request that never became a job.
func (n *Node) sendError(to answerTo, e *msgs.Error) {
	n.send(to, e)
}

// send delivers an Error reply and counts it by code.
func (n *Node) send(to answerTo, e *msgs.Error) {
	n.m.errors.Inc(string(e.Err.Code))
	if err := to.fail(e); err != nil {
		n.log.Error("sending an error reply failed", "request", e.ID, "code", e.Err.Code, "err", err)
		return
	}
	n.log.Debug("answered with an error", "request", e.ID, "code", e.Err.Code, "message", e.Err.Message)
}

// seconds returns d in seconds, the unit of the stage histograms.
func seconds(d time.Duration) float64 { return d.Seconds() }
