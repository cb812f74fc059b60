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

// work runs the queue's jobs until the scheduler closes: one at a time, or
// with a BatchEngine in batches of the jobs waiting (Options.MaxBatch).
func (n *Node) work() {
	defer close(n.workerDone)
	batcher, _ := n.engine.(BatchEngine)
	for {
		j := n.sched.next()
		if j == nil {
			return
		}
		jobs := []*job{j}
		if batcher != nil && n.opts.MaxBatch > 1 {
			jobs = append(jobs, n.sched.gather(n.opts.MaxBatch-1, n.opts.BatchWait)...)
		}
		n.m.queueDepth.Set(float64(n.sched.depth()))
		for _, j := range jobs {
			if j.timer != nil {
				j.timer.Stop()
			}
		}
		n.gate.RLock() // a budget change waits for this inference (or batch), and it for a change
		n.running.Store(&jobs)
		if len(jobs) == 1 {
			n.run(j)
		} else {
			n.runBatch(batcher, jobs)
		}
		n.running.Store(nil)
		n.gate.RUnlock()
	}
}

// run answers one job: with a plan, or with the error that prevented it.
func (n *Node) run(j *job) {
	obs, ok := n.prepare(j)
	if !ok {
		return
	}
	ctx, cancel := n.jobContext([]*job{j})
	n.m.inflight.Set(1)
	engineStart := n.now()
	plan, err := n.infer(ctx, obs)
	cancel()
	n.m.inflight.Set(0)
	n.finish(j, obs, plan, err, engineStart)
}

// runBatch answers the jobs of a batch through the engine's InferBatch.
func (n *Node) runBatch(be BatchEngine, jobs []*job) {
	var ready []*job
	var obs []*Observation
	for _, j := range jobs {
		if o, ok := n.prepare(j); ok {
			ready, obs = append(ready, j), append(obs, o)
		}
	}
	if len(ready) == 0 {
		return
	}
	ctx, cancel := n.jobContext(ready)
	n.m.inflight.Set(float64(len(ready)))
	if len(ready) > 1 {
		n.m.batches.Inc("")
		n.m.batched.Add("", float64(len(ready)))
	}
	engineStart := n.now()
	results := n.inferBatch(ctx, be, obs)
	cancel()
	n.m.inflight.Set(0)
	for i, j := range ready {
		n.finish(j, obs[i], results[i].Plan, results[i].Err, engineStart)
	}
}

// prepare checks a job taken from the queue and builds its observation;
// false means it was answered already (its deadline passed, or its frames
// could not be had).
func (n *Node) prepare(j *job) (*Observation, bool) {
	start := n.now()
	n.m.stage("queue", start.Sub(j.admitted))
	if !j.deadline.IsZero() && !start.Before(j.deadline) {
		n.shed(j, shedDeadline, fmt.Sprintf("deadline of %d ms passed while waiting in the queue", j.req.DeadlineMs))
		return nil, false
	}
	obs, e := n.observation(j)
	if e != nil {
		n.sendJobError(j, e)
		return nil, false
	}
	n.m.stage("assemble", n.now().Sub(start))
	return obs, true
}

// jobContext is the context the engine runs jobs under: the node's hard
// context, ending at the latest of the jobs' deadlines (none when one has
// none). A job whose own deadline passes first is answered
// deadline_exceeded when its plan comes (finish).
func (n *Node) jobContext(jobs []*job) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, j := range jobs {
		if j.deadline.IsZero() {
			return n.hardCtx, func() {}
		}
		if j.deadline.After(last) {
			last = j.deadline
		}
	}
	return context.WithDeadline(n.hardCtx, last)
}

// finish answers a job with the engine's plan or error.
func (n *Node) finish(j *job, obs *Observation, plan *msgs.Plan, err error, engineStart time.Time) {
	end := n.now()
	n.m.stage("engine", end.Sub(engineStart))
	if err == nil && plan == nil {
		err = fmt.Errorf("engine returned neither a plan nor an error")
	}
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
		NumTrajSamples: r.NumTrajSamples,
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

// inferBatch calls the engine's InferBatch, turning a panic into an error
// of every observation, and a missing answer into an error of its own.
func (n *Node) inferBatch(ctx context.Context, be BatchEngine, obs []*Observation) (results []Result) {
	defer func() {
		if p := recover(); p != nil {
			n.log.Error("engine panicked", "batch", len(obs), "panic", p, "stack", string(debug.Stack()))
			results = make([]Result, len(obs))
			for i := range results {
				results[i].Err = fmt.Errorf("engine panicked: %v", p)
			}
		}
	}()
	results = be.InferBatch(ctx, obs)
	if len(results) != len(obs) {
		err := fmt.Errorf("engine answered %d of a batch of %d", len(results), len(obs))
		results = make([]Result, len(obs))
		for i := range results {
			results[i].Err = err
		}
	}
	return results
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
