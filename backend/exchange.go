package backend

import (
	"context"
	"errors"
	"fmt"
)

// HostExchange is a backend that hands activations to host code running on
// goroutines of its own (a CPU engine computing a shard) and takes the
// results back, in order with the ops it queues (cuda, cpu).
//
// One hand-off, ticket t, on an Exchange x:
//
//	queueing goroutine: t, _ := x.Send(src) … other ops … x.Receive(dst, t, add)
//	engine goroutine:   x.Wait(ctx, t) → read x.Out() → write x.In() → x.Post(t)
//
// Send queues a copy of src into Out; Wait returns once it has landed;
// Post says that In holds the result; Receive queues, behind a wait for
// that Post, the copy of In into dst (or its sum into dst). Neither side
// busy-waits, and the queueing goroutine does not wait for the engine
// (unless Path is HostWaits: see there). The rules, each checked (a call
// that breaks one is an error, and changes nothing):
//
//  1. Send and Receive alternate: Send(t+1) is refused until Receive(t) is
//     queued. Out is one buffer, and stream order is what keeps it safe:
//     Send(t+1)'s copy runs after Receive(t)'s wait for Post(t), so the
//     engine is done with Out(t) when Out(t+1) lands. Hand-offs that must
//     overlap take one Exchange each.
//  2. The engine reads Out and writes In only between Wait(t) returning
//     and Post(t). In is free again when Wait(t+1) returns: the device's
//     copy of In(t) is queued before Send(t+1)'s copy of Out.
//  3. Tickets are waited for and posted in order: Wait and Post take the
//     ticket after the last one posted, and Post only once its Send has
//     landed (after Wait returned).
//  4. Receive takes the ticket of the last Send, once.
//  5. None of these calls may be made inside Capturer.CaptureGraph (a
//     graph would replay one hand-off's ticket forever): it is refused.
//  6. The backend's Sync waits for the Posts of the Receives queued before
//     it: a goroutine must not Sync while it is the one that must Post.
//
// Send and Receive queue work: they are called by the goroutine that
// queues the backend's ops, like every op. Wait, Out, In and Post may be
// called from any goroutine.
type HostExchange interface {
	// NewExchange makes an exchange whose Send copies at most out float32
	// values to the host and whose Receive takes at most in values back.
	// It MUST be closed (Exchange.Close) before the backend.
	NewExchange(out, in int) (Exchange, error)
}

// Ticket numbers one hand-off of an Exchange: 1, 2, 3, … in Send order.
type Ticket uint64

// Exchange is a pair of page-locked host buffers and the ordering between
// a backend's queue and host code that HostExchange describes.
type Exchange interface {
	// Send queues a copy of src (F32, 1 to out elements) into Out and
	// returns its ticket.
	Send(src Tensor) (Ticket, error)
	// Wait blocks until Send(t) has been queued and its copy has landed in
	// Out, until ctx ends (its error is returned, wrapped) or until the
	// exchange is closed (ErrExchangeClosed). It does not hold up the
	// goroutine that queues the backend's ops, and does not spin.
	Wait(ctx context.Context, t Ticket) error
	// Out is the host buffer Send copies into (out values; a Send of n
	// elements fills Out()[:n]). Valid from Wait(t) to Post(t); it MUST
	// NOT be used after Close.
	Out() []float32
	// In is the host buffer the engine writes its result into (in
	// values). Written between Wait(t) and Post(t); it MUST NOT be used
	// after Close.
	In() []float32
	// Post says that In holds the result of ticket t (a release store that
	// the device, or a blocked Receive, observes).
	Post(t Ticket) error
	// Receive queues: wait until ticket t is posted, then dst = In()[:n],
	// or dst += In()[:n] with add set, for dst an F32 tensor of n ≤ in
	// elements.
	Receive(dst Tensor, t Ticket, add bool) error
	// Path says whether the device or the queueing goroutine waits for a
	// Post.
	Path() ExchangePath
	// Close releases the exchange once the device has passed its last use
	// (so, like Sync, it waits for the Posts of other exchanges' Receives
	// queued before that). A Receive of its own queued whose Post never
	// came is released (its dst gets whatever In held) and reported in
	// the error. Wait and Receive calls
	// blocked in other goroutines return ErrExchangeClosed; closing twice
	// is harmless.
	Close() error
}

// ErrExchangeClosed is returned (wrapped) by every call on a closed
// Exchange, and by the calls it interrupted.
var ErrExchangeClosed = errors.New("exchange closed")

// ExchangePath says who waits for an Exchange's Post.
type ExchangePath int

const (
	// DeviceWaits: Receive queues a device-side wait for the Post (cuda
	// with stream memory operations: cuStreamWaitValue32 on a flag in
	// device-mapped page-locked memory) and returns at once.
	DeviceWaits ExchangePath = iota + 1
	// HostWaits: Receive blocks the calling goroutine until the Post, then
	// queues the copy (the cpu backend, whose ops run as they are called;
	// cuda where the device cannot wait on host memory). The queueing
	// goroutine should queue the GPU's own work before a Receive.
	HostWaits
)

// String names the path.
func (p ExchangePath) String() string {
	switch p {
	case DeviceWaits:
		return "device waits"
	case HostWaits:
		return "host waits"
	}
	return fmt.Sprintf("ExchangePath(%d)", int(p))
}
