package node

import (
	"time"

	"vlanode/msgs"
)

// Every accepted request (a job) is answered exactly once, through answer;
// requests refused before they became jobs are answered with sendError. A
// job from the jobs queue (job.stored) has its answer stored instead
// (jobs.go), or is handed back to the queue when it was shed for load.

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
	n.send(j.reply, msgs.NewError(j.req.ID, code, msg))
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
	n.send(j.reply, e)
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
		n.send(j.reply, e)
		return
	}
	if j.stored != nil {
		n.storeAnswer(j, data)
	} else if err := n.nc.Publish(j.reply, data); err != nil {
		n.log.Error("sending a plan failed", "request", j.req.ID, "err", err)
	}
	if err := n.nc.Publish(PlansSubject(n.opts.Name), data); err != nil {
		n.log.Error("publishing a plan failed", "request", j.req.ID, "err", err)
	}
	end := n.now()
	n.m.plans.Inc("")
	n.m.stage("reply", end.Sub(start))
	n.m.stage("total", end.Sub(j.received))
	n.m.modelStages(p.TimingMs)
	n.m.vramPeak.SetMax(float64(p.VRAMPeakBytes))
}

// sendError answers a request that never became a job.
func (n *Node) sendError(reply string, e *msgs.Error) {
	n.send(reply, e)
}

// send encodes and publishes an Error reply and counts it by code.
func (n *Node) send(reply string, e *msgs.Error) {
	n.m.errors.Inc(string(e.Err.Code))
	data, err := msgs.Marshal(e)
	if err == nil {
		err = n.nc.Publish(reply, data)
	}
	if err != nil {
		n.log.Error("sending an error reply failed", "request", e.ID, "code", e.Err.Code, "err", err)
		return
	}
	n.log.Debug("answered with an error", "request", e.ID, "code", e.Err.Code, "message", e.Err.Message)
}

// seconds returns d in seconds, the unit of the stage histograms.
func seconds(d time.Duration) float64 { return d.Seconds() }
