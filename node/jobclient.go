package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"vlanode/msgs"
)

// JobClient submits jobs to the jobs queue (jobs.go) and waits for their
// answers. Its jobs' ids start with its prefix and a '.': it reads the
// answers under ResultsPrefix + prefix + ".>" with an ordered consumer,
// which follows the results stream across server restarts.
type JobClient struct {
	js     jetstream.JetStream
	prefix string
	cc     jetstream.ConsumeContext

	mu      sync.Mutex
	waiting map[string]chan []byte // by job id; buffered 1
}

// NewJobClient returns a client for the jobs whose ids start with prefix +
// "." (prefix: one or more subject tokens). The jobs stream must exist: a
// node serving jobs creates it.
func NewJobClient(ctx context.Context, nc *nats.Conn, prefix string) (*JobClient, error) {
	if err := CheckJobID(prefix); err != nil {
		return nil, fmt.Errorf("job client: prefix: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("job client: %w", err)
	}
	c := &JobClient{js: js, prefix: prefix, waiting: map[string]chan []byte{}}
	cons, err := js.OrderedConsumer(ctx, ResultsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{ResultsPrefix + prefix + ".>"},
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("job client: no stream %s: no node serves jobs on this server (vlanode serve --jobs)", ResultsStream)
		}
		return nil, fmt.Errorf("job client: reading %s: %w", ResultsStream, err)
	}
	c.cc, err = cons.Consume(c.deliver)
	if err != nil {
		return nil, fmt.Errorf("job client: reading %s: %w", ResultsStream, err)
	}
	return c, nil
}

// ID returns the job id of name for this client: prefix.name.
func (c *JobClient) ID(name string) string { return c.prefix + "." + name }

// deliver hands an answer to its waiter; answers nobody waits for (another
// run's, or a second copy) are dropped.
func (c *JobClient) deliver(m jetstream.Msg) {
	id := strings.TrimPrefix(m.Subject(), ResultsPrefix)
	c.mu.Lock()
	ch := c.waiting[id]
	c.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m.Data():
		default:
		}
	}
}

// Submit stores req as a job, retrying until JetStream has acknowledged it
// or ctx ends (a job sent twice is one job: its id is its message id). Its
// id must be c.ID(something).
func (c *JobClient) Submit(ctx context.Context, req *msgs.InferRequest) error {
	if !strings.HasPrefix(req.ID, c.prefix+".") {
		return fmt.Errorf("job client: id %q does not start with %q", req.ID, c.prefix+".")
	}
	if err := CheckJobID(req.ID); err != nil {
		return fmt.Errorf("job client: %w", err)
	}
	data, err := msgs.Marshal(req)
	if err != nil {
		return fmt.Errorf("job client: %w", err)
	}
	c.mu.Lock()
	if c.waiting[req.ID] == nil {
		c.waiting[req.ID] = make(chan []byte, 1)
	}
	c.mu.Unlock()
	for {
		_, err := c.js.Publish(ctx, JobsSubject, data, jetstream.WithMsgID(req.ID))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, nats.ErrMaxPayload) {
			return fmt.Errorf("job client: submitting %s: %w", req.ID, err)
		}
		sleepCtx(ctx, jobsRetry) // the server is away: try again
	}
}

// Wait returns the answer to job id, a Plan or an Error, once it is
// stored, or ctx's error.
func (c *JobClient) Wait(ctx context.Context, id string) (*msgs.Plan, *msgs.Error, error) {
	c.mu.Lock()
	ch := c.waiting[id]
	c.mu.Unlock()
	if ch == nil {
		return nil, nil, fmt.Errorf("job client: job %s was not submitted here", id)
	}
	select {
	case data := <-ch:
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
		return msgs.DecodeReply(data)
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("job client: waiting for %s: %w", id, ctx.Err())
	}
}

// Close stops reading answers.
func (c *JobClient) Close() {
	c.cc.Stop()
}
