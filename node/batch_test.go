package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// batchEngine is a testEngine that also runs batches: each observation as
// Infer would, recording the batches' request ids. A gated one holds the
// first inference (alone or in a batch) until released, so that requests
// queue behind it.
type batchEngine struct {
	testEngine
	mu      sync.Mutex
	batches [][]string
	// fail, when set, answers the whole batch this way instead.
	fail func(obs []*Observation) []Result
}

func (e *batchEngine) InferBatch(ctx context.Context, obs []*Observation) []Result {
	ids := make([]string, len(obs))
	for i, o := range obs {
		ids[i] = o.RequestID
	}
	e.mu.Lock()
	e.batches = append(e.batches, ids)
	e.mu.Unlock()
	if e.fail != nil {
		return e.fail(obs)
	}
	out := make([]Result, len(obs))
	for i, o := range obs {
		out[i].Plan, out[i].Err = e.testEngine.Infer(ctx, o)
	}
	return out
}

func (e *batchEngine) batchIDs() [][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([][]string(nil), e.batches...)
}

// TestBatchGathersWaiting: requests that wait while one runs are run
// together, up to the batch bound; each gets its own plan, the one it gets
// alone; a lone request runs at once (no batch wait by default).
func TestBatchGathersWaiting(t *testing.T) {
	srv := runServer(t)
	eng := &batchEngine{testEngine: testEngine{gate: make(chan struct{}), started: make(chan string, 16)}}
	n := startNode(t, srv, eng, WithBatch(3, 0), WithQueueBound(8))
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")

	lone := sendAsync(t, nc, subject, goodRequest("lone", 1e9))
	eng.awaitStart(t, "lone")
	var waiting []*replies
	for i := range 5 {
		waiting = append(waiting, sendAsync(t, nc, subject, goodRequest(fmt.Sprintf("w%d", i), int64(i+2)*1e9)))
	}
	eventually(t, func() bool { return n.sched.depth() == 5 }, "five requests waiting")
	eng.release()
	p, e := lone.one(t)
	require.Nil(t, e)
	assert.Equal(t, "lone", p.ID)
	for i := range 5 {
		eng.awaitStart(t, fmt.Sprintf("w%d", i))
		eng.release()
	}
	for i, r := range waiting {
		p, e := r.one(t)
		require.Nil(t, e, "request %d", i)
		assert.Equal(t, fmt.Sprintf("w%d", i), p.ID)
		assert.Equal(t, fmt.Sprint(int64(i+2)*1e9-int64(testPeriod)), p.Reasoning[:len(fmt.Sprint(int64(i+2)*1e9-int64(testPeriod)))],
			"its own frames")
		r.none(t, nc)
	}
	assert.Equal(t, [][]string{{"w0", "w1", "w2"}, {"w3", "w4"}}, eng.batchIDs(), "the lone one alone, then batches of at most 3, oldest first")
	assert.Equal(t, uint64(2), counter(n, "batches"))
	assert.Equal(t, uint64(5), counter(n, "batched"))
	assert.Equal(t, uint64(6), counter(n, "plans"))
}

// TestBatchWait: with a batch wait, the worker waits for more requests
// once it has one, and runs what came.
func TestBatchWait(t *testing.T) {
	srv := runServer(t)
	eng := &batchEngine{}
	startNode(t, srv, eng, WithBatch(4, 500*time.Millisecond), WithQueueBound(8))
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")
	var rs []*replies
	for i := range 3 {
		rs = append(rs, sendAsync(t, nc, subject, goodRequest(fmt.Sprintf("r%d", i), int64(i+1)*1e9)))
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range rs {
		_, e := r.one(t)
		require.Nil(t, e)
	}
	assert.Equal(t, [][]string{{"r0", "r1", "r2"}}, eng.batchIDs())
}

// TestBatchAnswersEach: in a batch, a request whose deadline passes while
// it waits is shed, one whose observation fails gets its error, and an
// engine error of one request is its own; a panicking or short batch
// answers each of its requests internal, and the node keeps serving.
func TestBatchAnswersEach(t *testing.T) {
	srv := runServer(t)
	eng := &batchEngine{testEngine: testEngine{gate: make(chan struct{}), started: make(chan string, 16)}}
	n := startNode(t, srv, eng, WithBatch(4, 0), WithQueueBound(8))
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")

	first := sendAsync(t, nc, subject, goodRequest("first", 1e9))
	eng.awaitStart(t, "first")
	ok := sendAsync(t, nc, subject, goodRequest("ok", 2e9))
	bad := goodRequest("badframe", 3e9)
	bad.Frames[1].Encoding, bad.Frames[1].Data = msgs.EncodingPNG, []byte("\x89PNG\r\n\x1a\nbroken")
	bad.Frames[1].Width, bad.Frames[1].Height = 2, 2
	badR := sendAsync(t, nc, subject, bad)
	late := goodRequest("late", 4e9)
	late.DeadlineMs = 50
	lateR := sendAsync(t, nc, subject, late)
	eventually(t, func() bool { return n.sched.depth() == 3 }, "three waiting")
	p, e := lateR.one(t) // shed while it waits
	wantError(t, p, e, msgs.CodeDeadlineExceeded)
	eng.release()
	_, e = first.one(t)
	require.Nil(t, e)
	eng.awaitStart(t, "ok")
	eng.release()
	eng.awaitStart(t, "badframe")
	eng.release()
	p, e = ok.one(t)
	require.Nil(t, e)
	assert.Equal(t, "ok", p.ID)
	p, e = badR.one(t)
	wantError(t, p, e, msgs.CodeBadRequest, "frames[1]")
	assert.Equal(t, [][]string{{"ok", "badframe"}}, eng.batchIDs())

	// a panicking engine, one that answers too few, one that fails every
	// request: each waiting request is answered internal
	for _, fail := range []func([]*Observation) []Result{
		func([]*Observation) []Result { panic("boom") },
		func(obs []*Observation) []Result { return make([]Result, len(obs)-1) },
		func(obs []*Observation) []Result {
			out := make([]Result, len(obs))
			for i := range out {
				out[i].Err = errors.New("device lost")
			}
			return out
		},
	} {
		eng.fail = fail
		hold := sendAsync(t, nc, subject, goodRequest("hold", 1e9))
		eng.awaitStart(t, "hold")
		a := sendAsync(t, nc, subject, goodRequest("a", 2e9))
		b := sendAsync(t, nc, subject, goodRequest("b", 3e9))
		eventually(t, func() bool { return n.sched.depth() == 2 }, "two waiting")
		eng.release()
		_, e := hold.one(t)
		require.Nil(t, e, "alone, through Infer")
		for _, r := range []*replies{a, b} {
			p, e := r.one(t)
			wantError(t, p, e, msgs.CodeInternal)
			r.none(t, nc)
		}
	}
	eng.fail = nil
	hold := sendAsync(t, nc, subject, goodRequest("hold", 1e9))
	eng.awaitStart(t, "hold")
	eng.release()
	_, e = hold.one(t)
	require.Nil(t, e, "the node keeps serving")
}
