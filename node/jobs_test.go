package node

import (
	"context"
	"net"
	"testing"
	"time"

	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// testJobs is the jobs configuration of these tests: a short ack wait, so
// that a job left by a killed node comes back quickly.
var testJobs = JobsConfig{AckWait: 500 * time.Millisecond}

// jobClient returns a job client on url for ids prefix.*.
func jobClient(t *testing.T, nc *nats.Conn, prefix string) *JobClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := NewJobClient(ctx, nc, prefix)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func submit(t *testing.T, c *JobClient, req *msgs.InferRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, c.Submit(ctx, req))
}

func waitJob(t *testing.T, c *JobClient, id string) (*msgs.Plan, *msgs.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	p, e, err := c.Wait(ctx, id)
	require.NoError(t, err)
	return p, e
}

// storedAnswers returns how many answers the results stream holds for id.
func storedAnswers(t *testing.T, nc *nats.Conn, id string) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := js.Stream(ctx, ResultsStream)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(ResultSubject(id)))
	require.NoError(t, err)
	return info.State.Subjects[ResultSubject(id)]
}

// kill stops n the way SIGKILL would, as far as NATS can tell: its
// connection drops with nothing acknowledged or handed back, and then its
// goroutines are stopped.
func kill(n *Node) {
	n.nc.Close()
	n.closing.Store(true)
	n.hardCancel()
	n.sched.close() // what waits is dropped, unanswered
	<-n.workerDone
	if n.jobs != nil {
		<-n.jobs.done
		n.jobs.stores.Wait()
	}
	n.abort()
}

func TestJobAnswered(t *testing.T) {
	srv := runServer(t)
	e := &testEngine{}
	n := startNode(t, srv, e, WithJobs(testJobs))
	nc := connect(t, srv.ClientURL())
	c := jobClient(t, nc, "eval-1")

	submit(t, c, goodRequest(c.ID("a"), 1e9))
	p, er := waitJob(t, c, c.ID("a"))
	require.Nil(t, er)
	assert.Equal(t, "eval-1.a", p.ID)
	assert.Equal(t, "gpu-a", p.Node)

	// Refused jobs are answered too, and stored.
	bad := goodRequest(c.ID("b"), 1e9)
	bad.Frames = bad.Frames[:1]
	submit(t, c, bad)
	latest := latestRequest(c.ID("c"))
	submit(t, c, latest)
	p, er = waitJob(t, c, c.ID("b"))
	wantError(t, p, er, msgs.CodeBadRequest, "frames: got 1 frames, want 4")
	p, er = waitJob(t, c, c.ID("c"))
	wantError(t, p, er, msgs.CodeBadRequest, "use_latest: a job must carry its frames")

	// A job whose answer is stored is not run again, whatever its message
	// id (JetStream's own de-duplication covers the same id for 2 min).
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), JobsSubject, marshal(t, goodRequest(c.ID("a"), 1e9)), jetstream.WithMsgID("another"))
	require.NoError(t, err)
	eventually(t, func() bool { return counter(n, "jobs_duplicate") == 1 }, "the duplicate acknowledged")
	assert.Equal(t, []string{"eval-1.a"}, e.callIDs())
	for _, id := range []string{"a", "b", "c"} {
		assert.Equal(t, uint64(1), storedAnswers(t, nc, c.ID(id)), "one answer for %s", id)
	}
	assert.Equal(t, uint64(3), counter(n, "jobs_answered"))

	// A job without a usable id cannot be answered: it is dropped.
	_, err = js.Publish(context.Background(), JobsSubject, marshal(t, goodRequest("not a token", 1e9)))
	require.NoError(t, err)
	eventually(t, func() bool { return counter(n, "jobs_unanswerable") == 1 }, "the job without an id dropped")
}

// Issue 34: a job survives a node killed mid-inference and is answered
// exactly once, by the node that takes it next.
func TestJobSurvivesNodeKill(t *testing.T) {
	srv := runServer(t)
	a := gated()
	nodeA := startNode(t, srv, a, WithName("gpu-a"), WithJobs(testJobs))
	nc := connect(t, srv.ClientURL())
	c := jobClient(t, nc, "eval-2")
	submit(t, c, goodRequest(c.ID("x"), 1e9))
	a.awaitStart(t, "eval-2.x")

	// While node A lives its heartbeat keeps the job, past the ack wait.
	b := gated()
	startNode(t, srv, b, WithName("gpu-b"), WithJobs(testJobs))
	time.Sleep(2 * testJobs.AckWait)
	select {
	case id := <-b.started:
		t.Fatalf("node B took %s while node A was running it", id)
	default:
	}
	kill(nodeA)
	b.awaitStart(t, "eval-2.x") // once the ack wait passes without node A
	b.release()
	p, er := waitJob(t, c, c.ID("x"))
	require.Nil(t, er)
	assert.Equal(t, "gpu-b", p.Node)
	assert.Equal(t, uint64(1), storedAnswers(t, nc, c.ID("x")))
	assert.Equal(t, []string{"eval-2.x"}, a.callIDs())
	assert.Equal(t, []string{"eval-2.x"}, b.callIDs())
}

// A job that stops every node that takes it is answered without running
// once it was handed out MaxDeliveries times.
func TestJobMaxDeliveries(t *testing.T) {
	srv := runServer(t)
	cfg := testJobs
	cfg.MaxDeliveries = 1
	a := gated()
	nodeA := startNode(t, srv, a, WithJobs(cfg))
	nc := connect(t, srv.ClientURL())
	c := jobClient(t, nc, "eval-3")
	submit(t, c, goodRequest(c.ID("poison"), 1e9))
	a.awaitStart(t, "eval-3.poison")
	kill(nodeA)

	b := &testEngine{}
	startNode(t, srv, b, WithName("gpu-b"), WithJobs(cfg))
	p, er := waitJob(t, c, c.ID("poison"))
	wantError(t, p, er, msgs.CodeInternal, "given out 1 times without an answer")
	assert.Empty(t, b.callIDs())
}

// Issue 34 item 7: a reply in flight while the NATS server restarts was
// lost. A job's answer is stored once the server is back, exactly once.
func TestJobSurvivesServerRestart(t *testing.T) {
	srv, opts := runServerOpts(t)
	opts.Port = srv.Addr().(*net.TCPAddr).Port
	e := gated()
	n := startNode(t, srv, e, WithJobs(testJobs))
	nc := connect(t, srv.ClientURL())
	c := jobClient(t, nc, "eval-4")
	submit(t, c, goodRequest(c.ID("r"), 1e9))
	e.awaitStart(t, "eval-4.r")

	// The server goes away with the job running, and the plan is ready
	// while it is away...
	srv.Shutdown()
	srv.WaitForShutdown()
	eventually(t, func() bool { return !n.nc.IsConnected() }, "the node disconnected")
	e.release()
	// ...and it comes back on the same port and store.
	restarted := natstest.RunServer(opts)
	t.Cleanup(restarted.Shutdown)

	p, er := waitJob(t, c, c.ID("r"))
	require.Nil(t, er)
	assert.Equal(t, "eval-4.r", p.ID)
	assert.Equal(t, uint64(1), storedAnswers(t, nc, c.ID("r")))
	assert.Equal(t, []string{"eval-4.r"}, e.callIDs())

	// Jobs submitted after the restart are served.
	submit(t, c, goodRequest(c.ID("s"), 1e9))
	e.awaitStart(t, "eval-4.s")
	e.release()
	p, er = waitJob(t, c, c.ID("s"))
	require.Nil(t, er)
	assert.Equal(t, "eval-4.s", p.ID)
}

// Live requests come first: a job waits behind them, and a job shed by a
// full queue goes back to the queue rather than being answered.
func TestJobsYieldToRequests(t *testing.T) {
	srv := runServer(t)
	e := gated()
	n := startNode(t, srv, e, WithQueueBound(1), WithJobs(testJobs))
	nc := connect(t, srv.ClientURL())
	live := sendAsync(t, nc, InferSubject("gpu-a"), goodRequest("live-1", 1e9))
	e.awaitStart(t, "live-1")
	waiting := sendAsync(t, nc, InferSubject("gpu-a"), goodRequest("live-2", 1e9))
	eventually(t, func() bool { return n.sched.depth() == 1 }, "live-2 queued")

	c := jobClient(t, nc, "eval-5")
	submit(t, c, goodRequest(c.ID("j"), 1e9))
	eventually(t, func() bool { return counter(n, "jobs_handed_back") >= 1 }, "the job handed back while the queue is full")

	e.release()
	p, er := live.one(t)
	require.Nil(t, er)
	assert.Equal(t, "live-1", p.ID)
	e.awaitStart(t, "live-2")
	e.release()
	p, er = waiting.one(t)
	require.Nil(t, er)
	e.awaitStart(t, "eval-5.j")
	e.release()
	p, er = waitJob(t, c, c.ID("j"))
	require.Nil(t, er)
	assert.Equal(t, "eval-5.j", p.ID)
}

// A graceful shutdown lets the job in flight finish and stores its answer;
// a job still waiting goes back to the queue for the next node.
func TestJobsShutdown(t *testing.T) {
	srv := runServer(t)
	e := gated()
	n := startNode(t, srv, e, WithJobs(testJobs))
	nc := connect(t, srv.ClientURL())
	c := jobClient(t, nc, "eval-6")
	submit(t, c, goodRequest(c.ID("1"), 1e9))
	e.awaitStart(t, "eval-6.1")

	done := make(chan error, 1)
	go func() { done <- n.Shutdown(context.Background()) }()
	e.release()
	require.NoError(t, <-done)
	p, er := waitJob(t, c, c.ID("1"))
	require.Nil(t, er)
	assert.Equal(t, "eval-6.1", p.ID)

	// With the grace period over, the job in flight is handed back and the
	// next node answers it.
	f := gated()
	m := startNode(t, srv, f, WithName("gpu-b"), WithJobs(testJobs))
	submit(t, c, goodRequest(c.ID("2"), 1e9))
	f.awaitStart(t, "eval-6.2")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, m.Shutdown(ctx), context.Canceled)
	g := &testEngine{}
	startNode(t, srv, g, WithName("gpu-c"), WithJobs(testJobs))
	p, er = waitJob(t, c, c.ID("2"))
	require.Nil(t, er)
	assert.Equal(t, "gpu-c", p.Node)
	assert.Equal(t, uint64(1), storedAnswers(t, nc, c.ID("2")))
}
