// Package handofftest checks a backend.HostExchange on any backend (the
// cpu one in CI, cuda on the GPU machine): a goroutine serving as the CPU
// engine for many tickets in a row, interleaved with the backend's ops,
// with every value compared bit for bit against the same arithmetic done
// on the host, and the errors the rules of backend.HostExchange promise.
package handofftest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/tensor"
)

// Step is the engine's computation of the chain: in = out·½ + t, each
// product and sum rounded to float32 (the halving is exact, so no fused
// multiply-add can change a bit).
func Step(t backend.Ticket, out, in []float32) {
	for i, v := range out {
		in[i] = float32(v*0.5) + float32(t)
	}
}

// Engine serves x as a CPU engine does, for tickets first to last in
// order: Wait, fn on Out()[:outN] and In()[:inN], Post. seen, when not
// nil, gets Out()[0] of each ticket, in order. It returns the first error.
func Engine(ctx context.Context, x backend.Exchange, first, last backend.Ticket, outN, inN int, fn func(t backend.Ticket, out, in []float32), seen *[]float32) error {
	for t := first; t <= last; t++ {
		if err := x.Wait(ctx, t); err != nil {
			return err
		}
		out := x.Out()[:outN]
		if seen != nil {
			*seen = append(*seen, out[0])
		}
		fn(t, out, x.In()[:inN])
		if err := x.Post(t); err != nil {
			return err
		}
	}
	return nil
}

// Chain is a run of hand-offs: Tickets steps on a vector of N values.
type Chain struct {
	N, Tickets int
	// Ahead queues every step before the engine starts: the queueing
	// goroutine must not wait for the engine (Path DeviceWaits). Without
	// it the engine serves while the steps are queued.
	Ahead bool
	// Guard bounds how long queueing may take when Ahead (a deadlock
	// guard, not a measurement); 0 means 30 seconds.
	Guard time.Duration
}

// Run runs the chain on be and checks it. Step i (ticket i) is
//
//	x = x + y; t = Send(x); x = x + y; Receive(x, t, add = i odd)
//
// with the engine computing Step: Out must hold x as it was at the Send
// (the Add queued after it must not show), and x must end as the host's
// computation of the same sums, bit for bit.
func Run(t *testing.T, be backend.Backend, c Chain) {
	t.Helper()
	hx, ok := be.(backend.HostExchange)
	require.True(t, ok, "%s has no host exchange", be.Name())
	r := rand.New(rand.NewPCG(uint64(c.N), uint64(c.Tickets)))
	x0, y0 := make([]float32, c.N), make([]float32, c.N)
	for i := range x0 {
		x0[i] = float32(r.NormFloat64())
		y0[i] = float32(r.NormFloat64() * 0.25)
	}
	x, y := tensorOf(t, be, x0), tensorOf(t, be, y0)

	// The host's computation, and the values Out must show for each ticket.
	want := append([]float32(nil), x0...)
	wantSeen := make([]float32, c.Tickets)
	in := make([]float32, c.N)
	for i := 1; i <= c.Tickets; i++ {
		for j := range want {
			want[j] += y0[j]
		}
		wantSeen[i-1] = want[0]
		Step(backend.Ticket(i), want, in)
		for j := range want {
			want[j] += y0[j]
			if i%2 == 1 {
				want[j] += in[j]
			} else {
				want[j] = in[j]
			}
		}
	}

	ex, err := hx.NewExchange(c.N, c.N)
	require.NoError(t, err)
	queue := func() error {
		for i := 1; i <= c.Tickets; i++ {
			if err := be.Add(x, x, y); err != nil {
				return err
			}
			tk, err := ex.Send(x)
			if err != nil {
				return err
			}
			if tk != backend.Ticket(i) {
				return fmt.Errorf("step %d got ticket %d", i, tk)
			}
			if err := be.Add(x, x, y); err != nil {
				return err
			}
			if err := ex.Receive(x, tk, i%2 == 1); err != nil {
				return err
			}
		}
		return nil
	}
	var seen []float32
	engineDone := make(chan error, 1)
	engine := func() {
		engineDone <- Engine(context.Background(), ex, 1, backend.Ticket(c.Tickets), c.N, c.N, Step, &seen)
	}
	if c.Ahead {
		guard := c.Guard
		if guard == 0 {
			guard = 30 * time.Second
		}
		queued := make(chan error, 1)
		go func() { queued <- queue() }()
		select {
		case err := <-queued:
			require.NoError(t, err)
		case <-time.After(guard):
			t.Errorf("queueing %d hand-offs ahead of the engine did not return within %v: the queueing goroutine waited for the engine (or for room in the device's queue)", c.Tickets, guard)
			go engine() // let the queue drain so that the test can end
			require.NoError(t, <-queued)
			require.NoError(t, <-engineDone)
			require.NoError(t, ex.Close())
			return
		}
		go engine()
	} else {
		go engine()
		require.NoError(t, queue())
	}
	require.NoError(t, <-engineDone)
	require.NoError(t, be.Sync())
	got, err := be.Download(x)
	require.NoError(t, err)
	require.NoError(t, ex.Close())
	require.Equal(t, wantSeen, seen, "Out of each ticket, in order")
	for j := range want {
		if got[j] != want[j] {
			t.Fatalf("x[%d] = %v after %d hand-offs, want %v (bit for bit)", j, got[j], c.Tickets, want[j])
		}
	}
}

// tensorOf allocates an F32 tensor holding vals, freed when t ends.
func tensorOf(t *testing.T, be backend.Backend, vals []float32) backend.Tensor {
	t.Helper()
	x, err := be.Alloc("activations", tensor.F32, len(vals))
	require.NoError(t, err)
	require.NoError(t, be.Upload(x, vals))
	t.Cleanup(func() { be.Free(x) })
	return x
}

// Errors checks the refusals every HostExchange owes: sizes, types,
// the order of tickets, a cancelled Wait, calls on a closed exchange, and
// (Path HostWaits) a blocked Receive released by Close.
func Errors(t *testing.T, be backend.Backend) {
	t.Helper()
	hx, ok := be.(backend.HostExchange)
	require.True(t, ok, "%s has no host exchange", be.Name())
	_, err := hx.NewExchange(0, 4)
	assert.Error(t, err, "no room out")
	_, err = hx.NewExchange(4, 0)
	assert.Error(t, err, "no room in")

	ex, err := hx.NewExchange(4, 2)
	require.NoError(t, err)
	defer ex.Close()
	big := tensorOf(t, be, make([]float32, 5))
	four := tensorOf(t, be, []float32{1, 2, 3, 4})
	two := tensorOf(t, be, make([]float32, 2))
	half, err := be.Weight("weights", tensor.F16, []int{4}, make([]byte, 8))
	require.NoError(t, err)
	defer be.Free(half)

	_, err = ex.Send(big)
	assert.ErrorContains(t, err, "Out holds 1 to 4", "too many values out")
	_, err = ex.Send(half)
	assert.ErrorContains(t, err, "F32", "a non-float32 src")
	assert.Error(t, ex.Receive(two, 1, false), "receive before any send")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = ex.Wait(ctx, 1)
	assert.ErrorIs(t, err, context.Canceled, "Wait for a ticket never sent ends with its context")

	t1, err := ex.Send(four)
	require.NoError(t, err)
	_, err = ex.Send(four)
	assert.ErrorContains(t, err, "before ticket 1 is received", "Send(t+1) before Receive(t)")
	assert.ErrorContains(t, ex.Receive(four, t1, false), "In holds 1 to 2", "too many values in")
	assert.ErrorContains(t, ex.Receive(half, t1, false), "F32", "a non-float32 dst")
	assert.ErrorContains(t, ex.Receive(two, t1+1, false), "the last ticket sent is 1")
	assert.ErrorContains(t, ex.Wait(context.Background(), t1+1), "the next ticket to post is 1")

	require.NoError(t, ex.Wait(context.Background(), t1))
	assert.Equal(t, []float32{1, 2, 3, 4}, ex.Out())
	copy(ex.In(), []float32{7, 8})
	posted := make(chan error, 1)
	go func() { posted <- ex.Post(t1) }()
	require.NoError(t, ex.Receive(two, t1, true))
	require.NoError(t, <-posted)
	assert.ErrorContains(t, ex.Post(t1), "the next ticket to post is 2", "posting twice")
	assert.ErrorContains(t, ex.Receive(two, t1, false), "received twice")
	require.NoError(t, be.Sync())
	v, err := be.Download(two)
	require.NoError(t, err)
	assert.Equal(t, []float32{7, 8}, v, "0 + In")

	if ex.Path() == backend.HostWaits {
		t2, err := ex.Send(four)
		require.NoError(t, err)
		blocked := make(chan error, 1)
		go func() { blocked <- ex.Receive(two, t2, false) }()
		time.Sleep(10 * time.Millisecond) // likely blocked by now; closed before it blocks, it fails the same way
		require.NoError(t, ex.Close())
		err = <-blocked
		assert.ErrorIs(t, err, backend.ErrExchangeClosed, "a Receive blocked on its Post ends with the close")
	} else {
		require.NoError(t, ex.Close())
	}
	_, err = ex.Send(four)
	assert.ErrorIs(t, err, backend.ErrExchangeClosed)
	assert.ErrorIs(t, ex.Wait(context.Background(), 2), backend.ErrExchangeClosed)
	assert.ErrorIs(t, ex.Post(2), backend.ErrExchangeClosed)
	assert.ErrorIs(t, ex.Receive(two, 2, false), backend.ErrExchangeClosed)
	assert.NoError(t, ex.Close(), "closing twice")
}
