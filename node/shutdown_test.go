package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestGracefulShutdown(t *testing.T) {
	srv := runServer(t)
	e := gated()
	n := startNode(t, srv, e)
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")

	a := sendAsync(t, nc, subject, goodRequest("A", 1e9))
	e.awaitStart(t, "A")
	b := sendAsync(t, nc, subject, goodRequest("B", 1e9))
	eventually(t, func() bool { return n.sched.depth() == 1 }, "B queued")

	done := make(chan error, 1)
	go func() { done <- n.Shutdown(context.Background()) }()

	// The waiting request is answered at once, so that it can go elsewhere.
	p, er := b.one(t)
	wantError(t, p, er, msgs.CodeOverloaded, "node gpu-a is shutting down")

	// No new requests are taken: the endpoints are gone.
	eventually(t, func() bool {
		_, err := nc.Request(subject, marshal(t, goodRequest("late", 1e9)), waitFor)
		return errors.Is(err, nats.ErrNoResponders)
	}, "no responders on "+subject)
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}

	// The one in flight finishes and is answered; then Shutdown returns.
	e.release()
	p, er = a.one(t)
	require.Nil(t, er)
	assert.Equal(t, "A", p.ID)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Shutdown did not return")
	}
	a.none(t, nc)
	b.none(t, nc)
	assert.Equal(t, []string{"A"}, e.callIDs())
	assert.True(t, n.nc.IsClosed())
	assert.NoError(t, n.Shutdown(context.Background()), "a second Shutdown is harmless")
}

func TestShutdownGraceOver(t *testing.T) {
	srv := runServer(t)
	e := gated()
	n := startNode(t, srv, e)
	nc := connect(t, srv.ClientURL())
	a := sendAsync(t, nc, InferSubject("gpu-a"), goodRequest("A", 1e9))
	e.awaitStart(t, "A")

	// The grace period is already over: the inference is cancelled, and its
	// request still gets its one reply.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := n.Shutdown(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	p, er := a.one(t)
	wantError(t, p, er, msgs.CodeInternal, "the node shut down before the plan was ready")
	a.none(t, nc)
}

func TestRunStopsOnContext(t *testing.T) {
	srv := runServer(t)
	n := startNode(t, srv, &testEngine{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, waitFor) }()
	nc := connect(t, srv.ClientURL())
	mustPlan(t, nc, InferSubject("gpu-a"), goodRequest("A", 1e9))
	cancel() // what SIGTERM does in vlanode serve
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Run did not return")
	}
	assert.True(t, n.nc.IsClosed())
}

// ctxEngine runs until its context ends and then returns what fail says
// (an engine whose decoder noticed the cancellation, or one that found a
// corrupt frame as the node stopped). With fail nil it ignores its context
// and returns only when stuck closes.
type ctxEngine struct {
	testEngine
	started chan struct{}
	fail    func(ctx context.Context) error
	stuck   chan struct{}
}

func (e *ctxEngine) Infer(ctx context.Context, obs *Observation) (*msgs.Plan, error) {
	close(e.started)
	if e.fail == nil {
		<-e.stuck
		return nil, errors.New("released")
	}
	<-ctx.Done()
	return nil, e.fail(ctx)
}

// Issue 34 item 6: a bad-input error during shutdown was reported as
// internal. It keeps its code; only the cancellation itself is internal.
func TestShutdownKeepsErrorCode(t *testing.T) {
	srv := runServer(t)
	e := &ctxEngine{started: make(chan struct{}), fail: func(context.Context) error {
		return BadFrame(1, errors.New("decoding png: truncated"))
	}}
	n := startNode(t, srv, e)
	nc := connect(t, srv.ClientURL())
	a := sendAsync(t, nc, InferSubject("gpu-a"), goodRequest("A", 1e9))
	<-e.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, n.Shutdown(ctx), context.Canceled)
	p, er := a.one(t)
	wantError(t, p, er, msgs.CodeBadRequest, "frames[1]: decoding png: truncated")
}

// An engine that ignores its context cannot hold the node: once the grace
// period is over and the cancelled inference has not returned within
// abandonAfter, its request is answered and Shutdown returns.
func TestShutdownLeavesStuckEngine(t *testing.T) {
	srv := runServer(t)
	e := &ctxEngine{started: make(chan struct{}), stuck: make(chan struct{})}
	defer close(e.stuck)
	n := startNode(t, srv, e)
	nc := connect(t, srv.ClientURL())
	a := sendAsync(t, nc, InferSubject("gpu-a"), goodRequest("A", 1e9))
	<-e.started
	run, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(run, 50*time.Millisecond) }()
	stop() // SIGTERM
	p, er := a.one(t)
	wantError(t, p, er, msgs.CodeInternal, "the node shut down before the plan was ready")
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrInferenceAbandoned)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(waitFor):
		t.Fatal("Run did not return with the engine stuck")
	}
	a.none(t, nc)
}
