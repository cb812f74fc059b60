package node

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"vlanode/msgs"
	"vlanode/node/ingest"
)

// work runs the queue's jobs one at a time until the scheduler closes.
func (n *Node) work() {
	defer close(n.workerDone)
	for {
		j := n.sched.next()
		if j == nil {
			return
		}
		n.m.queueDepth.Set(float64(n.sched.depth()))
		if j.timer != nil {
			j.timer.Stop()
		}
		n.gate.RLock() // a budget change waits for this inference, and it for a change
		n.running.Store(j)
		n.run(j)
		n.running.Store(nil)
		n.gate.RUnlock()
	}
}

// run answers one job: with a plan, or with the error that prevented it.
func (n *Node) run(j *job) {
	start := n.now()
	n.m.stage("queue", start.Sub(j.admitted))
	if !j.deadline.IsZero() && !start.Before(j.deadline) {
		n.shed(j, shedDeadline, fmt.Sprintf("deadline of %d ms passed while waiting in the queue", j.req.DeadlineMs))
		return
	}
	obs, e := n.observation(j)
	if e != nil {
		n.sendJobError(j, e)
		return
	}
	ctx, cancel := n.hardCtx, context.CancelFunc(func() {})
	if !j.deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, j.deadline)
	}
	n.m.inflight.Set(1)
	engineStart := n.now()
	n.m.stage("assemble", engineStart.Sub(start))
	plan, err := n.infer(ctx, obs)
	cancel()
	n.m.inflight.Set(0)
	end := n.now()
	n.m.stage("engine", end.Sub(engineStart))
	switch {
	case err != nil && n.hardCtx.Err() != nil && !errors.Is(err, ErrBadInput) && !errors.Is(err, ErrUnsupported):
		n.stopped(j, err)
		return
	case err != nil:
		n.sendJobError(j, engineErrorReply(j.req.ID, err, obs))
		return
	case !j.deadline.IsZero() && end.After(j.deadline):
		n.sendJobError(j, msgs.NewError(j.req.ID, msgs.CodeDeadlineExceeded, fmt.Sprintf(
			"deadline of %d ms passed before the plan was ready (%.1f ms after receipt)", j.req.DeadlineMs, ms(end.Sub(j.received)))))
		return
	}
	n.complete(plan, j, obs)
	if err := plan.Validate(); err != nil {
		n.sendJobError(j, msgs.NewError(j.req.ID, msgs.CodeInternal, "engine returned an invalid plan: "+err.Error()))
		return
	}
	n.sendPlan(j, plan)
}

// stopped answers a job whose inference the node's shutdown cancelled: a
// request with internal, a job from the queue by handing it back.
func (n *Node) stopped(j *job, err error) {
	if j.stored != nil {
		if n.answer(j) {
			n.handBack(j)
		}
		return
	}
	n.sendJobError(j, msgs.NewError(j.req.ID, msgs.CodeInternal, "the node shut down before the plan was ready: "+err.Error()))
}

// observation builds the engine's input: the request's frames, or the
// latest synchronized ones.
func (n *Node) observation(j *job) (*Observation, *msgs.Error) {
	r := j.req
	obs := &Observation{
		RequestID: r.ID, EgoHistory: r.EgoHistory, Prompt: r.Prompt,
		MaxReasoningTokens: r.MaxReasoningTokens, Frames: r.Frames,
		CameraOrder: r.CameraOrder, NavText: r.NavText, Question: r.Question,
		Temperature: r.Temperature, TopP: r.TopP, Seed: r.Seed,
	}
	if obs.CameraOrder == nil {
		obs.CameraOrder = n.info.Cameras
	}
	if r.UseLatest {
		frames, t0, err := n.store.Latest(n.now())
		if err != nil {
			if _, ok := err.(*ingest.NotSynchronizedError); ok {
				return nil, msgs.NewError(r.ID, msgs.CodeUnsupported, "use_latest: "+err.Error())
			}
			return nil, msgs.NewError(r.ID, msgs.CodeInternal, "use_latest: "+err.Error())
		}
		if r.CameraOrder != nil {
			frames = n.selectCameras(frames, r.CameraOrder)
		}
		obs.Frames, obs.T0, obs.Latest = frames, t0, true
		return obs, nil
	}
	for _, f := range r.Frames {
		obs.T0 = max(obs.T0, f.StampNs)
	}
	return obs, nil
}

// selectCameras picks the cameras of order, in that order, from the
// latest frames (EngineInfo.Cameras camera-major; checkRequest made sure
// each is one of them).
func (n *Node) selectCameras(frames []msgs.Frame, order []string) []msgs.Frame {
	k := n.info.FramesPerCamera
	out := make([]msgs.Frame, 0, len(order)*k)
	for _, c := range order {
		i := slices.Index(n.info.Cameras, c)
		out = append(out, frames[i*k:(i+1)*k]...)
	}
	return out
}

// infer calls the engine, turning a panic into an error so that the node
// keeps serving.
func (n *Node) infer(ctx context.Context, obs *Observation) (plan *msgs.Plan, err error) {
	defer func() {
		if p := recover(); p != nil {
			n.log.Error("engine panicked", "request", obs.RequestID, "panic", p, "stack", string(debug.Stack()))
			plan, err = nil, fmt.Errorf("engine panicked: %v", p)
		}
	}()
	plan, err = n.engine.Infer(ctx, obs)
	if err == nil && plan == nil {
		err = fmt.Errorf("engine returned neither a plan nor an error")
	}
	return plan, err
}

// complete fills in the fields of a plan that are the node's business.
func (n *Node) complete(p *msgs.Plan, j *job, obs *Observation) {
	p.V = msgs.Version
	p.ID = j.req.ID
	p.Node = n.opts.Name
	if p.Model == "" {
		p.Model = n.info.Model
	}
	if p.StampNs == 0 {
		p.StampNs = obs.T0
	}
	if p.BudgetBytes == 0 {
		p.BudgetBytes = n.budget.Load() // the inference's: a change waits for it
	}
	p.TimingMs.Total = ms(n.now().Sub(j.received))
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
