// Package handoff keeps the tickets of a backend.Exchange: which ticket
// was sent, received, landed and posted, the checks of the rules that
// backend.HostExchange states, and the blocking that Wait (and a Receive
// that waits on the host) needs. The cpu and cuda exchanges share it; it
// touches no memory and no device, so its logic is tested on its own.
//
// A queueing call is two steps around the device work it queues:
// BeginSend / EndSend, BeginReceive / EndReceive. Book's lock is never held
// while that work is queued: queueing may block until the device drains,
// which can need a Post.
package handoff

import (
	"context"
	"fmt"
	"sync"

	"vlanode/backend"
)

// Book is the ticket state of one exchange. Its methods are safe for
// concurrent use.
type Book struct {
	name    string // for errors: "cpu: exchange", "cuda: exchange"
	out, in int    // capacities of Out and In, in values

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change of state
	sent     backend.Ticket
	received backend.Ticket
	landed   backend.Ticket
	posted   backend.Ticket
	queueing bool // a Begin without its End
	closed   bool
	err      error // sticky: a landing that failed
}

// New returns the book of an exchange of out and in values; name prefixes
// its errors.
func New(name string, out, in int) (*Book, error) {
	if out < 1 || in < 1 {
		return nil, fmt.Errorf("%s: %d values out and %d in: need at least 1 each", name, out, in)
	}
	return &Book{name: name, out: out, in: in, changed: make(chan struct{})}, nil
}

// Out is the capacity of Out, in values.
func (k *Book) Out() int { return k.out }

// In is the capacity of In, in values.
func (k *Book) In() int { return k.in }

// broadcast wakes every waiter; k.mu is held.
func (k *Book) broadcast() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// usable checks what every call needs; k.mu is held.
func (k *Book) usable(op string) error {
	if k.closed {
		return fmt.Errorf("%s: %s: %w", k.name, op, backend.ErrExchangeClosed)
	}
	return nil
}

// begin marks a queueing call in progress; k.mu is held.
func (k *Book) begin(op string) error {
	if k.queueing {
		return fmt.Errorf("%s: %s while another Send or Receive is being queued: queue them from one goroutine", k.name, op)
	}
	k.queueing = true
	return nil
}

// BeginSend checks a Send of n values and returns its ticket. EndSend
// MUST follow.
func (k *Book) BeginSend(n int) (backend.Ticket, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.usable("send"); err != nil {
		return 0, err
	}
	if n < 1 || n > k.out {
		return 0, fmt.Errorf("%s: send of %d values: Out holds 1 to %d", k.name, n, k.out)
	}
	if k.received != k.sent {
		return 0, fmt.Errorf("%s: send of ticket %d before ticket %d is received: Out would be overwritten (queue Receive first, or use another exchange)", k.name, k.sent+1, k.sent)
	}
	if err := k.begin("send"); err != nil {
		return 0, err
	}
	return k.sent + 1, nil
}

// EndSend ends BeginSend: ok says that the copy of ticket t was queued.
func (k *Book) EndSend(t backend.Ticket, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.queueing = false
	if ok {
		k.sent = t
		k.broadcast()
	}
}

// Landed records that Send(t)'s copy has landed in Out, or that waiting
// for it failed (err, then returned by every later Wait).
func (k *Book) Landed(t backend.Ticket, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil && k.err == nil {
		k.err = fmt.Errorf("%s: waiting for ticket %d: %w", k.name, t, err)
	}
	if err == nil && t > k.landed {
		k.landed = t
	}
	k.broadcast()
}

// Wait blocks until ticket t has landed, ctx ends or the exchange closes.
func (k *Book) Wait(ctx context.Context, t backend.Ticket) error {
	k.mu.Lock()
	for {
		if err := k.usable("wait"); err != nil {
			k.mu.Unlock()
			return err
		}
		if t != k.posted+1 {
			k.mu.Unlock()
			return fmt.Errorf("%s: wait for ticket %d: the next ticket to post is %d", k.name, t, k.posted+1)
		}
		if k.err != nil {
			k.mu.Unlock()
			return k.err
		}
		if k.landed >= t {
			k.mu.Unlock()
			return nil
		}
		ch := k.changed
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s: wait for ticket %d: %w", k.name, t, ctx.Err())
		}
		k.mu.Lock()
	}
}

// HasLanded says whether ticket t has landed.
func (k *Book) HasLanded(t backend.Ticket) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.landed >= t
}

// Post records that In holds ticket t's result; publish, when not nil,
// runs first under the book's lock (the store the device waits for), so
// that posts are published in order.
func (k *Book) Post(t backend.Ticket, publish func()) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.usable("post"); err != nil {
		return err
	}
	if t != k.posted+1 {
		return fmt.Errorf("%s: post of ticket %d: the next ticket to post is %d", k.name, t, k.posted+1)
	}
	if k.landed < t {
		return fmt.Errorf("%s: post of ticket %d before its values landed: Wait for it first", k.name, t)
	}
	if publish != nil {
		publish()
	}
	k.posted = t
	k.broadcast()
	return nil
}

// BeginReceive checks a Receive of n values for ticket t. EndReceive MUST
// follow.
func (k *Book) BeginReceive(n int, t backend.Ticket) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.usable("receive"); err != nil {
		return err
	}
	if n < 1 || n > k.in {
		return fmt.Errorf("%s: receive of %d values: In holds 1 to %d", k.name, n, k.in)
	}
	switch {
	case t == 0 || t > k.sent:
		return fmt.Errorf("%s: receive of ticket %d: the last ticket sent is %d", k.name, t, k.sent)
	case t <= k.received:
		return fmt.Errorf("%s: ticket %d received twice", k.name, t)
	case t != k.sent:
		return fmt.Errorf("%s: receive of ticket %d: the last ticket sent is %d", k.name, t, k.sent)
	}
	return k.begin("receive")
}

// WaitPosted blocks until ticket t is posted or the exchange closes: a
// Receive that waits on the host.
func (k *Book) WaitPosted(t backend.Ticket) error {
	k.mu.Lock()
	for {
		if err := k.usable("receive"); err != nil {
			k.mu.Unlock()
			return err
		}
		if k.posted >= t {
			k.mu.Unlock()
			return nil
		}
		ch := k.changed
		k.mu.Unlock()
		<-ch
		k.mu.Lock()
	}
}

// EndReceive ends BeginReceive: ok says that ticket t's receive was
// queued.
func (k *Book) EndReceive(t backend.Ticket, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.queueing = false
	if ok {
		k.received = t
		k.broadcast()
	}
}

// State is a book's tickets at one moment.
type State struct {
	Sent, Received, Landed, Posted backend.Ticket
	Closed                         bool
}

// State returns the tickets.
func (k *Book) State() State {
	k.mu.Lock()
	defer k.mu.Unlock()
	return State{Sent: k.sent, Received: k.received, Landed: k.landed, Posted: k.posted, Closed: k.closed}
}

// Close closes the book, waking every blocked call, and returns its last
// state; first is false when it was closed already.
func (k *Book) Close() (s State, first bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	first = !k.closed
	k.closed = true
	k.broadcast()
	return State{Sent: k.sent, Received: k.received, Landed: k.landed, Posted: k.posted, Closed: true}, first
}

// Unposted is the error for a close that released Receives whose Posts
// never came (nil when there were none).
func (s State) Unposted(name string) error {
	if s.Received <= s.Posted {
		return nil
	}
	return fmt.Errorf("%s: closed with tickets %d to %d received but never posted: their destinations got whatever In held", name, s.Posted+1, s.Received)
}
