package cpu

import (
	"testing"

	"vlanode/backend/handoff/handofftest"
)

// TestExchange runs 200 hand-offs, each between two Adds, with a
// goroutine as the CPU engine: Receive waits on the host here.
func TestExchange(t *testing.T) {
	b := newBackend(t, WithThreads(2))
	for _, n := range []int{1, 1000} {
		handofftest.Run(t, b, handofftest.Chain{N: n, Tickets: 200})
	}
}

func TestExchangeErrors(t *testing.T) {
	handofftest.Errors(t, newBackend(t, WithThreads(1)))
}
