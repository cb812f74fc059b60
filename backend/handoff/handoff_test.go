package handoff

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
)

// send and receive run one queueing call through the book.
func send(t *testing.T, k *Book, n int) backend.Ticket {
	t.Helper()
	tk, err := k.BeginSend(n)
	require.NoError(t, err)
	k.EndSend(tk, true)
	return tk
}

func receive(t *testing.T, k *Book, n int, tk backend.Ticket) {
	t.Helper()
	require.NoError(t, k.BeginReceive(n, tk))
	k.EndReceive(tk, true)
}

func TestNewSizes(t *testing.T) {
	for _, c := range [][2]int{{0, 1}, {1, 0}, {-1, 4}} {
		_, err := New("x", c[0], c[1])
		assert.ErrorContains(t, err, "need at least 1 each", "%v", c)
	}
	k, err := New("x", 3, 5)
	require.NoError(t, err)
	assert.Equal(t, 3, k.Out())
	assert.Equal(t, 5, k.In())
}

// TestRules checks each rule of backend.HostExchange on a book: every
// refused call names the problem and changes nothing.
func TestRules(t *testing.T) {
	ctx := context.Background()
	k, err := New("x", 4, 2)
	require.NoError(t, err)

	_, err = k.BeginSend(5)
	assert.ErrorContains(t, err, "send of 5 values: Out holds 1 to 4")
	_, err = k.BeginSend(0)
	assert.ErrorContains(t, err, "Out holds 1 to 4")
	assert.ErrorContains(t, k.BeginReceive(1, 1), "receive of ticket 1: the last ticket sent is 0")
	assert.ErrorContains(t, k.Post(1, nil), "post of ticket 1 before its values landed")

	t1 := send(t, k, 4)
	assert.Equal(t, backend.Ticket(1), t1)
	_, err = k.BeginSend(1)
	assert.ErrorContains(t, err, "send of ticket 2 before ticket 1 is received")
	assert.ErrorContains(t, k.Post(1, nil), "before its values landed", "sent is not landed")
	assert.ErrorContains(t, k.Wait(ctx, 2), "wait for ticket 2: the next ticket to post is 1")

	k.Landed(1, nil)
	require.NoError(t, k.Wait(ctx, 1))
	require.NoError(t, k.Wait(ctx, 1), "waiting again is harmless")
	assert.ErrorContains(t, k.Post(2, nil), "post of ticket 2: the next ticket to post is 1")

	assert.ErrorContains(t, k.BeginReceive(3, 1), "receive of 3 values: In holds 1 to 2")
	receive(t, k, 2, 1)
	assert.ErrorContains(t, k.BeginReceive(2, 1), "ticket 1 received twice")

	published := 0
	require.NoError(t, k.Post(1, func() { published++ }))
	assert.Equal(t, 1, published)
	assert.ErrorContains(t, k.Post(1, nil), "post of ticket 1: the next ticket to post is 2")
	assert.ErrorContains(t, k.Wait(ctx, 1), "wait for ticket 1: the next ticket to post is 2", "Out may hold a later ticket")

	t2 := send(t, k, 1)
	assert.Equal(t, backend.Ticket(2), t2)
	assert.ErrorContains(t, k.BeginReceive(1, 1), "ticket 1 received twice")
	assert.ErrorContains(t, k.BeginReceive(1, 3), "receive of ticket 3: the last ticket sent is 2")

	assert.Equal(t, State{Sent: 2, Received: 1, Landed: 1, Posted: 1}, k.State())
}

// TestQueueingCallsOverlap: a second Begin before the first's End is
// refused (Send and Receive come from one goroutine), and an aborted call
// leaves the tickets as they were.
func TestQueueingCallsOverlap(t *testing.T) {
	k, err := New("x", 1, 1)
	require.NoError(t, err)
	t1, err := k.BeginSend(1)
	require.NoError(t, err)
	_, err = k.BeginSend(1)
	assert.ErrorContains(t, err, "while another Send or Receive is being queued")
	k.EndSend(t1, false)
	assert.Equal(t, State{}, k.State(), "an aborted send leaves no ticket")
	t1 = send(t, k, 1)
	require.NoError(t, k.BeginReceive(1, t1))
	assert.ErrorContains(t, k.BeginReceive(1, t1), "while another Send or Receive is being queued")
	k.EndReceive(t1, false)
	assert.Equal(t, backend.Ticket(0), k.State().Received)
	receive(t, k, 1, t1)
}

// TestWaitBlocks: Wait blocks until the ticket is sent and landed, and
// ends with its context or the close.
func TestWaitBlocks(t *testing.T) {
	k, err := New("x", 1, 1)
	require.NoError(t, err)
	done := make(chan error)
	go func() { done <- k.Wait(context.Background(), 1) }()
	t1 := send(t, k, 1)
	k.Landed(t1, nil)
	require.NoError(t, <-done)

	receive(t, k, 1, t1)
	require.NoError(t, k.Post(t1, nil))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- k.Wait(ctx, 2) }()
	cancel()
	err = <-done
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "wait for ticket 2")

	go func() { done <- k.Wait(context.Background(), 2) }()
	s, first := k.Close()
	assert.True(t, first)
	assert.ErrorIs(t, <-done, backend.ErrExchangeClosed)
	assert.Equal(t, State{Sent: 1, Received: 1, Landed: 1, Posted: 1, Closed: true}, s)
	_, first = k.Close()
	assert.False(t, first, "closing twice")
	_, err = k.BeginSend(1)
	assert.ErrorIs(t, err, backend.ErrExchangeClosed)
	assert.ErrorIs(t, k.Post(2, nil), backend.ErrExchangeClosed)
}

// TestLandingError: a failed landing is returned by every later Wait.
func TestLandingError(t *testing.T) {
	k, err := New("x", 1, 1)
	require.NoError(t, err)
	t1 := send(t, k, 1)
	boom := errors.New("device fault")
	k.Landed(t1, boom)
	err = k.Wait(context.Background(), t1)
	assert.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "x: waiting for ticket 1: device fault")
	assert.False(t, k.HasLanded(t1))
}

// TestWaitPosted: a host-side Receive blocks until its Post, or the close.
func TestWaitPosted(t *testing.T) {
	k, err := New("x", 1, 1)
	require.NoError(t, err)
	t1 := send(t, k, 1)
	k.Landed(t1, nil)
	require.NoError(t, k.BeginReceive(1, t1))
	done := make(chan error)
	go func() { done <- k.WaitPosted(t1) }()
	require.NoError(t, k.Post(t1, nil))
	require.NoError(t, <-done)
	k.EndReceive(t1, true)

	t2 := send(t, k, 1)
	require.NoError(t, k.BeginReceive(1, t2))
	go func() { done <- k.WaitPosted(t2) }()
	s, _ := k.Close()
	assert.ErrorIs(t, <-done, backend.ErrExchangeClosed)
	k.EndReceive(t2, false)
	assert.NoError(t, s.Unposted("x"), "the receive never queued")
}

func TestUnposted(t *testing.T) {
	assert.NoError(t, State{Sent: 3, Received: 3, Posted: 3}.Unposted("x"))
	assert.EqualError(t, State{Sent: 5, Received: 5, Posted: 2}.Unposted("cuda: exchange"),
		"cuda: exchange: closed with tickets 3 to 5 received but never posted: their destinations got whatever In held")
}
