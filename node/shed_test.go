package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestShedding(t *testing.T) {
	srv := runServer(t)
	e := gated()
	n := startNode(t, srv, e, WithQueueBound(3))
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")
	ms := int64(time.Millisecond)
	base := time.Now().UnixNano()
	publishFrames(t, nc, "gpu-a", rawFrame("left", base), rawFrame("left", base+100*ms), rawFrame("right", base), rawFrame("right", base+100*ms))
	depth := func(d int) {
		t.Helper()
		eventually(t, func() bool { return n.sched.depth() == d }, "queue depth")
	}

	a := sendAsync(t, nc, subject, goodRequest("A", 1e9))
	e.awaitStart(t, "A")
	b := sendAsync(t, nc, subject, goodRequest("B", 1e9))
	depth(1)
	l1 := sendAsync(t, nc, subject, latestRequest("L1"))
	depth(2)

	// Latest wins: L2 takes L1's place in line; L1 is answered now.
	l2 := sendAsync(t, nc, subject, latestRequest("L2"))
	p, er := l1.one(t)
	wantError(t, p, er, msgs.CodeOverloaded, `superseded by a newer use_latest request ("L2")`)
	assert.Equal(t, "L1", er.ID)
	depth(2)

	// A deadline that passes while waiting is answered when it passes.
	x := sendAsync(t, nc, subject, &msgs.InferRequest{ID: "X", Frames: goodFrames(1e9), EgoHistory: ego(testEgoPoses, 1e9), DeadlineMs: 100})
	p, er = x.one(t)
	wantError(t, p, er, msgs.CodeDeadlineExceeded, "deadline of 100 ms passed while waiting in the queue")
	depth(2)

	// Past the bound: overloaded at once.
	c := sendAsync(t, nc, subject, goodRequest("C", 1e9))
	depth(3)
	d := sendAsync(t, nc, subject, goodRequest("D", 1e9))
	p, er = d.one(t)
	wantError(t, p, er, msgs.CodeOverloaded, "3 requests already waiting (queue bound 3)")

	// The rest run in order, one at a time.
	for _, w := range []struct {
		id string
		r  *replies
	}{{"A", a}, {"B", b}, {"L2", l2}, {"C", c}} {
		if w.id != "A" {
			e.awaitStart(t, w.id)
		}
		e.release()
		p, er := w.r.one(t)
		require.Nil(t, er, "%s: %+v", w.id, er)
		assert.Equal(t, w.id, p.ID)
	}
	assert.Equal(t, []string{"A", "B", "L2", "C"}, e.callIDs())
	for _, r := range []*replies{a, b, l1, l2, x, c, d} {
		r.none(t, nc)
	}
	assert.Equal(t, uint64(1), counter(n, "shed_superseded"))
	assert.Equal(t, uint64(1), counter(n, "shed_queue_full"))
	assert.Equal(t, uint64(1), counter(n, "shed_deadline"))
	assert.Equal(t, uint64(2), counter(n, "errors_overloaded"))
	assert.Equal(t, uint64(1), counter(n, "errors_deadline_exceeded"))
	assert.Equal(t, uint64(4), counter(n, "plans"))
	assert.Equal(t, uint64(7), counter(n, "requests"))
}

func TestDeadlineDuringInference(t *testing.T) {
	srv := runServer(t)
	e := gated()
	n := startNode(t, srv, e)
	nc := connect(t, srv.ClientURL())
	r := goodRequest("slow", 1e9)
	r.DeadlineMs = 200
	w := sendAsync(t, nc, InferSubject("gpu-a"), r)
	e.awaitStart(t, "slow")
	// The engine holds it; its context ends at the deadline.
	p, er := w.one(t)
	wantError(t, p, er, msgs.CodeDeadlineExceeded, "during inference", "context deadline exceeded")
	w.none(t, nc)
	assert.Equal(t, uint64(0), counter(n, "shed_deadline"), "it was run, not shed")
	assert.Equal(t, uint64(1), counter(n, "errors_deadline_exceeded"))
}
