package cpu

import (
	"context"

	"vlanode/backend"
	"vlanode/backend/handoff"
)

// exchange is backend.Exchange on the cpu backend, whose ops run as they
// are called: Send copies at once (its ticket has landed when it
// returns), and Receive blocks until its ticket is posted, then copies
// (Path is HostWaits). Out and In are Go memory.
type exchange struct {
	b       *Backend
	book    *handoff.Book
	out, in []float32 // Out [out], In [in]
}

var _ backend.HostExchange = (*Backend)(nil)

// NewExchange makes an exchange of out values to the host and in values
// back (backend.HostExchange).
func (b *Backend) NewExchange(out, in int) (backend.Exchange, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	book, err := handoff.New("cpu: exchange", out, in)
	if err != nil {
		return nil, err
	}
	return &exchange{b: b, book: book, out: make([]float32, out), in: make([]float32, in)}, nil
}

// Send copies src into Out.
func (x *exchange) Send(src backend.Tensor) (backend.Ticket, error) {
	if x.b.closed.Load() {
		return 0, ErrClosed
	}
	s, err := f32Of("exchange send", "src", src)
	if err != nil {
		return 0, err
	}
	t, err := x.book.BeginSend(len(s.f32))
	if err != nil {
		return 0, err
	}
	copy(x.out, s.f32)
	x.book.EndSend(t, true)
	x.book.Landed(t, nil)
	return t, nil
}

// Wait returns once ticket t has been sent (its copy is done then).
func (x *exchange) Wait(ctx context.Context, t backend.Ticket) error {
	return x.book.Wait(ctx, t)
}

// Out is the buffer Send copies into.
func (x *exchange) Out() []float32 { return x.out }

// In is the buffer the engine writes into.
func (x *exchange) In() []float32 { return x.in }

// Post wakes the Receive of ticket t.
func (x *exchange) Post(t backend.Ticket) error { return x.book.Post(t, nil) }

// Receive blocks until ticket t is posted, then sets or adds In into dst.
func (x *exchange) Receive(dst backend.Tensor, t backend.Ticket, add bool) error {
	if x.b.closed.Load() {
		return ErrClosed
	}
	d, err := dstOf("exchange receive", "dst", dst)
	if err != nil {
		return err
	}
	if err := x.book.BeginReceive(len(d.f32), t); err != nil {
		return err
	}
	if err := x.book.WaitPosted(t); err != nil {
		x.book.EndReceive(t, false)
		return err
	}
	in := x.in[:len(d.f32)]
	if add {
		for i, v := range in {
			d.f32[i] += v
		}
	} else {
		copy(d.f32, in)
	}
	x.book.EndReceive(t, true)
	return nil
}

// Path is HostWaits: the cpu backend has no queue to wait in.
func (x *exchange) Path() backend.ExchangePath { return backend.HostWaits }

// Close wakes blocked calls; a cpu Receive never completes without its
// Post, so nothing is reported.
func (x *exchange) Close() error {
	x.book.Close()
	return nil
}
