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
