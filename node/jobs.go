package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"vlanode/msgs"
)

// Jobs: at-least-once inference for offline evaluation, over JetStream.
//
// A client publishes an InferRequest (with its frames) on JobsSubject,
// with the request's id as the Nats-Msg-Id, and JetStream stores it in the
// work-queue stream JobsStream. Every node serving jobs pulls from one
// durable consumer, JobsConsumer, one job at a time and only when it has
// room; it stores the answer (a Plan or an Error) in ResultsStream under
// ResultSubject(id) and only then acknowledges the job. A node that stops
// (or is killed) before that leaves the job unacknowledged, and JetStream
// hands it to a node again once AckWait passes without the node's heartbeat;
// a node that finds a result already stored for a job acknowledges it
// without running it again; the results stream keeps one message per
// subject and refuses a second. So a job is answered exactly once, across
// node crashes and server restarts (the streams are on disk). Live robots
// keep to request-reply: a job waits behind live requests, never the
// reverse.

// The subjects, streams and consumer of the jobs path.
const (
	JobsSubject    = "vla.jobs"     // clients publish jobs here
	JobsStream     = "VLA_JOBS"     // the work queue
	JobsConsumer   = "vlanode"      // the durable consumer every node pulls from
	ResultsStream  = "VLA_RESULTS"  // one answer per job id
	ResultsPrefix  = "vla.results." // a job's answer is stored and published on ResultsPrefix + id
	resultsSubject = ResultsPrefix + ">"
)

// Defaults of JobsConfig.
const (
	DefaultJobAckWait    = 30 * time.Second
	DefaultJobResultTTL  = 24 * time.Hour
	DefaultJobDeliveries = 5
)

// jobsRetry is the wait between attempts to reach JetStream while it is
// away (a server restart).
const jobsRetry = 250 * time.Millisecond

// ResultSubject returns the subject of job id's answer.
func ResultSubject(id string) string { return ResultsPrefix + id }

// CheckJobID checks that id can name a job: one or more subject tokens
// separated by '.', without wildcards or whitespace.
func CheckJobID(id string) error {
	if id == "" {
		return errors.New("job id is empty")
	}
	for _, tok := range strings.Split(id, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return fmt.Errorf("job id %q is not a subject suffix (tokens separated by '.', no '*', '>' or whitespace)", id)
		}
	}
	return nil
}

// JobsConfig configures the jobs path (WithJobs).
type JobsConfig struct {
	// AckWait is how long a job may go without word from the node that
	// runs it before JetStream gives it to another; the node sends a
	// heartbeat every third of it. 0: DefaultJobAckWait.
	AckWait time.Duration
	// ResultTTL is how long answers are kept. 0: DefaultJobResultTTL.
	ResultTTL time.Duration
	// MaxDeliveries is how many times a job is handed out before it is
	// answered internal without running (a job that stops every node that
	// takes it). 0: DefaultJobDeliveries.
	MaxDeliveries int
}

func (c JobsConfig) withDefaults() JobsConfig {
	if c.AckWait == 0 {
		c.AckWait = DefaultJobAckWait
	}
	if c.ResultTTL == 0 {
		c.ResultTTL = DefaultJobResultTTL
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultJobDeliveries
	}
	return c
}

// WithJobs makes the node take jobs from the JetStream work queue
// JobsStream, creating the streams and the consumer when missing.
func WithJobs(c JobsConfig) Option {
	return func(o *Options) error {
		if c.AckWait < 0 || c.ResultTTL < 0 || c.MaxDeliveries < 0 {
			return errors.New("jobs: negative ack wait, result TTL or deliveries")
		}
		if c.AckWait != 0 && c.AckWait < 100*time.Millisecond {
			return fmt.Errorf("jobs: ack wait %v, want ≥ 100ms", c.AckWait)
		}
		c = c.withDefaults()
		o.Jobs = &c
		return nil
	}
}

// Job outcomes, the label of vlanode_jobs_total.
const (
	jobAnswered     = "answered"     // its answer was stored
	jobDuplicate    = "duplicate"    // an answer was stored already: acknowledged without running
	jobHandedBack   = "handed_back"  // given back to the queue (the node was full or stopping)
	jobUnanswerable = "unanswerable" // no usable id: dropped
)

var jobOutcomes = []string{jobAnswered, jobDuplicate, jobHandedBack, jobUnanswerable}

// JobStreams returns the configurations of the jobs and results streams for
// a server whose max_payload is maxPayload.
func JobStreams(c JobsConfig, maxPayload int64) (jobs, results jetstream.StreamConfig) {
	c = c.withDefaults()
	jobs = jetstream.StreamConfig{
		Name: JobsStream, Description: "vlanode jobs: InferRequests with their frames, one per id",
		Subjects: []string{JobsSubject}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
		MaxMsgSize: int32(maxPayload), Duplicates: 2 * time.Minute,
	}
	results = jetstream.StreamConfig{
		Name: ResultsStream, Description: "vlanode job answers: one Plan or Error per job id",
		Subjects: []string{resultsSubject}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
		MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
		MaxAge: c.ResultTTL, Duplicates: 2 * time.Minute, AllowDirect: true,
	}
	return jobs, results
}

// jobRunner is the node's side of the jobs path.
type jobRunner struct {
	cfg     JobsConfig
	js      jetstream.JetStream
	cons    jetstream.Consumer
	results jetstream.Stream

	stop   context.CancelFunc // stops taking jobs
	done   chan struct{}      // closed when the loop has returned
	stores sync.WaitGroup     // answers being stored
}

// storedJob is the JetStream side of a job taken from the queue.
type storedJob struct {
	msg  jetstream.Msg
	done chan struct{} // closed when the job was answered, or handed back
	once sync.Once
}

func (s *storedJob) finish() { s.once.Do(func() { close(s.done) }) }

// startJobs creates the streams and the consumer and starts taking jobs.
func (n *Node) startJobs(ctx context.Context) error {
	c := *n.opts.Jobs
	js, err := jetstream.New(n.nc)
	if err != nil {
		return fmt.Errorf("node: jobs: %w", err)
	}
	jobsCfg, resultsCfg := JobStreams(c, n.maxPayload)
	if _, err := js.CreateOrUpdateStream(ctx, jobsCfg); err != nil {
		return fmt.Errorf("node: jobs: stream %s: %w", JobsStream, err)
	}
	results, err := js.CreateOrUpdateStream(ctx, resultsCfg)
	if err != nil {
		return fmt.Errorf("node: jobs: stream %s: %w", ResultsStream, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, JobsStream, jetstream.ConsumerConfig{
		Durable: JobsConsumer, Description: "vlanode nodes taking jobs",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.AckWait, MaxAckPending: -1,
	})
	if err != nil {
		return fmt.Errorf("node: jobs: consumer %s: %w", JobsConsumer, err)
	}
	lctx, stop := context.WithCancel(n.hardCtx)
	n.jobs = &jobRunner{cfg: c, js: js, cons: cons, results: results, stop: stop, done: make(chan struct{})}
	go n.takeJobs(lctx)
	return nil
}

// takeJobs pulls one job at a time until ctx ends, each once the previous
// one was answered or handed back.
func (n *Node) takeJobs(ctx context.Context) {
	r := n.jobs
	defer close(r.done)
	failing := false
	for ctx.Err() == nil {
		batch, err := r.cons.Fetch(1, jetstream.FetchContext(withTimeout(ctx, time.Second)))
		if err == nil {
			for m := range batch.Messages() {
				n.takeJob(ctx, m)
			}
			err = batch.Error()
		}
		switch {
		case err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoMessages) || ctx.Err() != nil:
			if failing {
				n.log.Info("jobs: JetStream is back")
				failing = false
			}
		default:
			if !failing {
				n.log.Warn("jobs: cannot pull from JetStream; retrying", "err", err)
				failing = true
			}
			sleepCtx(ctx, jobsRetry)
		}
	}
}

// withTimeout returns a context that ends after d or with ctx; its cancel
// is left to the timer (the fetch that uses it ends by then).
func withTimeout(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	context.AfterFunc(c, cancel)
	return c
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// takeJob answers one job from the queue, or hands it back, and returns
// when it has done either (or the node stops).
func (n *Node) takeJob(ctx context.Context, m jetstream.Msg) {
	received := n.now()
	data := m.Data()
	n.m.requests.Inc("")
	req, err := msgs.DecodeInferRequest(data)
	id := ""
	if req != nil {
		id = req.ID
	} else {
		id = msgs.RequestID(data)
	}
	if err := CheckJobID(id); err != nil {
		n.m.jobs.Inc(jobUnanswerable)
		n.log.Warn("jobs: dropped a job that cannot be answered", "err", err)
		m.Term()
		return
	}
	if stored, err := n.answered(ctx, id); err != nil || stored {
		if err != nil {
			n.m.jobs.Inc(jobHandedBack)
			m.NakWithDelay(jobsRetry)
			return
		}
		n.m.jobs.Inc(jobDuplicate)
		m.Ack()
		return
	}
	s := &storedJob{msg: m, done: make(chan struct{})}
	j := &job{req: req, received: received, stored: s}
	if e := n.refuseJob(m, req, id, err); e != nil {
		j.req = &msgs.InferRequest{ID: id}
		n.answerStored(j, e)
	} else {
		if req.DeadlineMs > 0 {
			j.deadline = received.Add(time.Duration(req.DeadlineMs) * time.Millisecond)
		}
		j.unmarshal = n.now().Sub(received)
		go n.heartbeat(s)
		n.admit(j)
	}
	select {
	case <-s.done:
	case <-n.hardCtx.Done():
	}
}

// refuseJob returns the answer to a job that will not run, or nil: one
// that did not decode (err), one given out too often, one without frames,
// one that does not fit the model.
func (n *Node) refuseJob(m jetstream.Msg, req *msgs.InferRequest, id string, err error) *msgs.Error {
	if req == nil {
		return msgs.ErrorReply(id, err)
	}
	if md, err := m.Metadata(); err == nil && md.NumDelivered > uint64(n.jobs.cfg.MaxDeliveries) {
		return msgs.NewError(id, msgs.CodeInternal, fmt.Sprintf(
			"the job was given out %d times without an answer (the nodes that took it stopped); it is not run again", md.NumDelivered-1))
	}
	if req.UseLatest {
		return msgs.NewError(id, msgs.CodeBadRequest, "use_latest: a job must carry its frames (the node's latest frames are for live requests)")
	}
	return n.checkRequest(req)
}

// heartbeat tells JetStream that the job is being worked on, every third
// of the ack wait, until it is answered or handed back.
func (n *Node) heartbeat(s *storedJob) {
	t := time.NewTicker(n.jobs.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.msg.InProgress()
		case <-s.done:
			return
		case <-n.hardCtx.Done():
			return
		}
	}
}

// answered reports whether an answer to job id is stored already.
func (n *Node) answered(ctx context.Context, id string) (bool, error) {
	_, err := n.jobs.results.GetLastMsgForSubject(withTimeout(ctx, 5*time.Second), ResultSubject(id))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	}
	return false, err
}

// answerStored stores an Error as a job's answer (see storeAnswer).
func (n *Node) answerStored(j *job, e *msgs.Error) {
	n.m.errors.Inc(string(e.Err.Code))
	data, err := msgs.Marshal(e)
	if err != nil {
		n.log.Error("jobs: encoding an error answer failed", "job", j.req.ID, "err", err)
		n.handBack(j)
		return
	}
	n.storeAnswer(j, data)
}

// storeAnswer stores data as the answer of a job and then acknowledges the
// job, retrying while JetStream is away. It returns at once; the job's done
// channel closes when it is through. If the node stops first the job is
// neither answered nor acknowledged, and JetStream gives it out again.
func (n *Node) storeAnswer(j *job, data []byte) {
	r := n.jobs
	r.stores.Add(1)
	go func() {
		defer r.stores.Done()
		defer j.stored.finish()
		id := j.req.ID
		for n.hardCtx.Err() == nil {
			_, err := r.js.Publish(withTimeout(n.hardCtx, 5*time.Second), ResultSubject(id), data, jetstream.WithMsgID(id))
			if err != nil {
				// A second answer is refused: if one is stored, it is the one.
				if stored, _ := n.answered(n.hardCtx, id); !stored {
					n.log.Debug("jobs: storing an answer failed; retrying", "job", id, "err", err)
					sleepCtx(n.hardCtx, jobsRetry)
					continue
				}
			}
			n.m.jobs.Inc(jobAnswered)
			j.stored.msg.Ack()
			return
		}
	}()
}

// handBack gives a job back to the queue for this node or another.
func (n *Node) handBack(j *job) {
	n.m.jobs.Inc(jobHandedBack)
	j.stored.msg.NakWithDelay(jobsRetry)
	j.stored.finish()
}

// stopJobs stops taking jobs and waits until the loop has returned and the
// answers being stored are through, or ctx ends (then the node's hard
// context is cancelled, and what was not stored is given out again).
func (n *Node) stopJobs(ctx context.Context) error {
	r := n.jobs
	if r == nil {
		return nil
	}
	r.stop()
	all := make(chan struct{})
	go func() {
		<-r.done
		r.stores.Wait()
		close(all)
	}()
	select {
	case <-all:
		return nil
	case <-ctx.Done():
		n.hardCancel()
		<-all
		return ctx.Err()
	}
}

// shedStored answers a job from the queue that the node shed: one shed for
// load or shutdown goes back to the queue; one past its deadline is
// answered so.
func (n *Node) shedStored(j *job, code msgs.Code, msg string) {
	if code == msgs.CodeOverloaded {
		n.handBack(j)
		return
	}
	n.answerStored(j, msgs.NewError(j.req.ID, code, msg))
}
