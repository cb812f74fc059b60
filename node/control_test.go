package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

const controlToken = "s3cret"

// minBudget is the smallest budget budgetEngine runs within.
const minBudget = 1 << 30

// budgetEngine is testEngine whose budget can change. It logs every
// inference and budget change in order and counts calls that overlapped
// (Rebudget during Infer or the reverse), which the node must never make.
type budgetEngine struct {
	*testEngine
	budget atomic.Uint64

	busy    atomic.Int32
	overlap atomic.Int32
	mu      sync.Mutex
	events  []string
}

func newBudgetEngine(gate bool) *budgetEngine {
	e := &budgetEngine{testEngine: &testEngine{}}
	if gate {
		e.testEngine = gated()
	}
	e.budget.Store(testBudget)
	return e
}

func (e *budgetEngine) log(ev string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

func (e *budgetEngine) eventList() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.events...)
}

func (e *budgetEngine) enter() {
	if e.busy.Add(1) > 1 {
		e.overlap.Add(1)
	}
}

func (e *budgetEngine) Info() EngineInfo {
	i := e.testEngine.Info()
	b := e.budget.Load()
	i.BudgetBytes = b
	i.Plan = &msgs.PlanSummary{Mode: "test", FixedBytes: b / 4, ResidentBytes: b / 2, PredictedMs: float64(80<<30) / float64(b)}
	return i
}

func (e *budgetEngine) Infer(ctx context.Context, obs *Observation) (*msgs.Plan, error) {
	e.enter()
	defer e.busy.Add(-1)
	e.log("infer " + obs.RequestID)
	p, err := e.testEngine.Infer(ctx, obs)
	if p != nil {
		p.VRAMPeakBytes = e.budget.Load() * 9 / 10
	}
	return p, err
}

func (e *budgetEngine) Rebudget(_ context.Context, b uint64) error {
	e.enter()
	defer e.busy.Add(-1)
	if b != 0 && b < minBudget {
		return fmt.Errorf("%w: a budget of %d bytes is below the model's minimum of %d", ErrUnsupported, b, minBudget)
	}
	time.Sleep(20 * time.Millisecond) // free, plan, load
	e.budget.Store(b)
	e.log(fmt.Sprintf("budget %d", b))
	return nil
}

var _ Rebudgeter = (*budgetEngine)(nil)

// controlAsync sends a control request and returns its pending reply.
func controlAsync(t *testing.T, nc *nats.Conn, req *msgs.ControlRequest) chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 2)
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, ch)
	require.NoError(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
	require.NoError(t, nc.PublishRequest(ControlSubject("gpu-a"), inbox, marshal(t, req)))
	require.NoError(t, nc.Flush())
	return ch
}

// controlReply waits for a control reply and decodes it.
func controlReply(t *testing.T, ch chan *nats.Msg) (*msgs.ControlReply, *msgs.Error) {
	t.Helper()
	select {
	case m := <-ch:
		r, e, err := msgs.DecodeControlReply(m.Data)
		require.NoError(t, err, "a valid ControlReply or Error")
		return r, e
	case <-time.After(waitFor):
		t.Fatal("no control reply")
		return nil, nil
	}
}

func control(t *testing.T, nc *nats.Conn, req *msgs.ControlRequest) (*msgs.ControlReply, *msgs.Error) {
	t.Helper()
	return controlReply(t, controlAsync(t, nc, req))
}

func setBudget(budget string) *msgs.ControlRequest {
	return &msgs.ControlRequest{ID: "ctl-1", Token: controlToken, Op: msgs.OpSetBudget, Budget: budget}
}

// TestBudgetChangeWhileQueued: a budget change waits for the inference in
// flight, runs before the queued requests, and every request is answered,
// each plan carrying the budget it ran within; the engine never re-plans
// during an inference.
func TestBudgetChangeWhileQueued(t *testing.T) {
	srv := runServer(t)
	e := newBudgetEngine(true)
	n := startNode(t, srv, e, WithControl(ControlConfig{Token: controlToken}), WithQueueBound(8))
	nc := connect(t, srv.ClientURL())

	first := sendAsync(t, nc, InferSubject("gpu-a"), goodRequest("r1", 1e9))
	e.awaitStart(t, "r1")
	var queued []*replies
	for i := 2; i <= 4; i++ {
		queued = append(queued, sendAsync(t, nc, InferSubject("gpu-a"), goodRequest(fmt.Sprintf("r%d", i), 1e9)))
	}
	eventually(t, func() bool { return n.sched.depth() == 3 }, "three requests queued")
	ctl := controlAsync(t, nc, setBudget("4GiB"))
	time.Sleep(50 * time.Millisecond)
	select {
	case <-ctl:
		t.Fatal("the budget changed during an inference")
	default:
	}

	e.release()
	p, er := first.one(t)
	require.Nil(t, er)
	assert.Equal(t, uint64(testBudget), p.BudgetBytes, "r1 ran within the old budget")
	assert.Equal(t, uint64(testBudget)*9/10, p.VRAMPeakBytes)

	r, er := controlReply(t, ctl)
	require.Nil(t, er, "%+v", er)
	assert.Equal(t, "ctl-1", r.ID)
	assert.Equal(t, "gpu-a", r.Node)
	assert.Equal(t, uint64(4<<30), r.BudgetBytes)
	assert.Equal(t, uint64(testBudget), r.PreviousBudgetBytes)
	assert.True(t, r.Changed)
	assert.False(t, r.Auto)
	assert.GreaterOrEqual(t, r.WaitedMs, 40.0, "waited for r1")
	assert.GreaterOrEqual(t, r.ReplanMs, 20.0)
	require.NotNil(t, r.Plan)
	assert.Equal(t, uint64(1<<30), r.Plan.FixedBytes, "the new plan's summary")

	for i, q := range queued {
		e.awaitStart(t, fmt.Sprintf("r%d", i+2))
		e.release()
		p, er := q.one(t)
		require.Nil(t, er, "queued request %d answered", i+2)
		assert.Equal(t, uint64(4<<30), p.BudgetBytes)
		assert.Equal(t, uint64(4<<30)*9/10, p.VRAMPeakBytes)
	}
	assert.Equal(t, []string{"infer r1", fmt.Sprintf("budget %d", 4<<30), "infer r2", "infer r3", "infer r4"}, e.eventList())
	assert.Zero(t, e.overlap.Load())
	b, auto := n.Budget()
	assert.Equal(t, uint64(4<<30), b)
	assert.False(t, auto)
	assert.Equal(t, float64(4<<30), n.m.budget.Value())
	assert.Equal(t, 1.0, n.m.budgetChanges.Value(BudgetFromControl))

	// The same budget again changes nothing.
	r, er = control(t, nc, setBudget("4GiB"))
	require.Nil(t, er)
	assert.False(t, r.Changed)
	assert.Len(t, e.eventList(), 5)
}

// TestBudgetChangesUnderLoad: budgets change while clients keep sending;
// no request is lost or fails, and the engine never re-plans during an
// inference.
func TestBudgetChangesUnderLoad(t *testing.T) {
	srv := runServer(t)
	e := newBudgetEngine(false)
	startNode(t, srv, e, WithControl(ControlConfig{Token: controlToken}), WithQueueBound(16))
	nc := connect(t, srv.ClientURL())
	var wg sync.WaitGroup
	var plans, failures atomic.Int32
	stop := make(chan struct{})
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m, err := nc.Request(InferSubject("gpu-a"), marshal(t, goodRequest(fmt.Sprintf("c%d-%d", c, i), 1e9)), waitFor)
				if err != nil {
					failures.Add(1)
					continue
				}
				if _, e, err := msgs.DecodeReply(m.Data); err != nil || e != nil {
					failures.Add(1)
					continue
				}
				plans.Add(1)
			}
		}()
	}
	for _, b := range []string{"8GiB", "4GiB", "16GiB", "2GiB", "8GiB"} {
		_, er := control(t, nc, setBudget(b))
		require.Nil(t, er)
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, failures.Load())
	assert.Positive(t, plans.Load())
	assert.Zero(t, e.overlap.Load())
	assert.Equal(t, uint64(8<<30), e.budget.Load())
}

// TestControlRefusals: control without the token, with a wrong one, an
// unknown operation, a budget that does not parse, one below the model's
// minimum, auto without GPU telemetry: each refused with a clear error,
// the budget unchanged.
func TestControlRefusals(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())

	// A node without a control token refuses everything.
	off := newBudgetEngine(false)
	n := startNode(t, srv, off)
	_, er := control(t, nc, setBudget("4GiB"))
	require.NotNil(t, er)
	assert.Equal(t, msgs.CodeForbidden, er.Err.Code)
	assert.Contains(t, er.Err.Message, "control is off on node gpu-a: serve it with --control-token")
	require.NoError(t, n.Shutdown(context.Background()))

	e := newBudgetEngine(false)
	startNode(t, srv, e, WithControl(ControlConfig{Token: controlToken}))
	for _, c := range []struct {
		name string
		req  *msgs.ControlRequest
		code msgs.Code
		msg  string
	}{
		{"no token", &msgs.ControlRequest{Op: msgs.OpSetBudget, Budget: "4GiB"}, msgs.CodeForbidden, "wrong or missing control token"},
		{"wrong token", &msgs.ControlRequest{Token: "guess", Op: msgs.OpSetBudget, Budget: "4GiB"}, msgs.CodeForbidden, "wrong or missing control token"},
		{"unknown op", &msgs.ControlRequest{Token: controlToken, Op: "reboot"}, msgs.CodeBadRequest, `op: unknown operation "reboot"`},
		{"no budget", &msgs.ControlRequest{Token: controlToken, Op: msgs.OpSetBudget}, msgs.CodeBadRequest, "budget: set_budget needs a budget"},
		{"not a size", setBudget("eight gigs"), msgs.CodeBadRequest, `budget: want auto, unlimited or a size: residency: budget "eight gigs"`},
		{"negative", setBudget("-4GiB"), msgs.CodeBadRequest, "is negative"},
		{"below the minimum", setBudget("512MiB"), msgs.CodeUnsupported, "re-planning for a budget of 0.5 GiB: unsupported: a budget of 536870912 bytes is below the model's minimum"},
		{"auto without NVML", setBudget("auto"), msgs.CodeUnsupported, "budget auto needs the GPU's free memory from NVML, and this node has no GPU telemetry"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, er := control(t, nc, c.req)
			require.Nil(t, r)
			require.NotNil(t, er)
			assert.Equal(t, c.code, er.Err.Code)
			assert.Contains(t, er.Err.Message, c.msg)
			assert.Equal(t, uint64(testBudget), e.budget.Load(), "unchanged")
		})
	}
	// get_budget reports without changing.
	r, er := control(t, nc, &msgs.ControlRequest{ID: "g", Token: controlToken, Op: msgs.OpGetBudget})
	require.Nil(t, er)
	assert.Equal(t, uint64(testBudget), r.BudgetBytes)
	assert.False(t, r.Changed)
	require.NotNil(t, r.Plan)
	assert.Equal(t, "test", r.Plan.Mode)

	// Garbage is a bad request.
	m, err := nc.Request(ControlSubject("gpu-a"), []byte{0xc1}, waitFor)
	require.NoError(t, err)
	_, ge, err := msgs.DecodeControlReply(m.Data)
	require.NoError(t, err)
	assert.Equal(t, msgs.CodeBadRequest, ge.Err.Code)
}

// An engine that cannot re-plan says so.
func TestControlEngineWithoutRebudget(t *testing.T) {
	srv := runServer(t)
	startNode(t, srv, &testEngine{}, WithControl(ControlConfig{Token: controlToken}))
	nc := connect(t, srv.ClientURL())
	_, er := control(t, nc, setBudget("4GiB"))
	require.NotNil(t, er)
	assert.Equal(t, msgs.CodeUnsupported, er.Err.Code)
	assert.Contains(t, er.Err.Message, "the engine of node gpu-a cannot change its budget while serving")
}

// freeMemory is a fake GPU's free-memory source for auto mode.
type freeMemory struct {
	free, held atomic.Uint64
	fail       atomic.Bool
}

func (g *freeMemory) sample() (uint64, uint64, error) {
	if g.fail.Load() {
		return 0, 0, fmt.Errorf("nvml: GPU is lost")
	}
	return g.free.Load(), g.held.Load(), nil
}

// TestAutoBudget: in auto mode the budget follows the fake GPU's free
// memory (shrinking at once, growing past the hysteresis); a set budget
// turns auto mode off and "auto" turns it on again.
func TestAutoBudget(t *testing.T) {
	srv := runServer(t)
	e := newBudgetEngine(false)
	g := &freeMemory{}
	const reserve, hyst = 1 << 30, 1 << 30
	g.held.Store(testBudget) // the node holds its 8 GiB
	g.free.Store(reserve)    // and 1 GiB is free: 8 GiB available, as now
	n := startNode(t, srv, e, WithControl(ControlConfig{Token: controlToken, Auto: &AutoConfig{
		Sample: g.sample, Reserve: reserve, Hysteresis: hyst, Interval: 10 * time.Millisecond, On: true,
	}}))
	nc := connect(t, srv.ClientURL())
	budgetIs := func(want uint64, what string) {
		t.Helper()
		eventually(t, func() bool { return e.budget.Load() == want }, what)
	}

	// Another process takes 3 GiB: the node shrinks to 5 GiB.
	g.held.Store(testBudget - 3<<30)
	budgetIs(5<<30, "shrunk to what is available")
	g.held.Store(5 << 30)
	// 0.5 GiB more free: within the hysteresis, no change.
	g.free.Store(reserve + 1<<29)
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, uint64(5<<30), e.budget.Load())
	// 3 GiB more free: grows.
	g.free.Store(reserve + 3<<30)
	budgetIs(8<<30, "grew past the hysteresis")
	g.held.Store(8 << 30)
	g.free.Store(reserve)
	// A failing GPU keeps the budget.
	g.fail.Store(true)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, uint64(8<<30), e.budget.Load())
	g.fail.Store(false)

	// A set budget turns auto off.
	r, er := control(t, nc, setBudget("6GiB"))
	require.Nil(t, er)
	assert.False(t, r.Auto)
	g.held.Store(6 << 30)
	g.free.Store(reserve + 10<<30)
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, uint64(6<<30), e.budget.Load(), "auto is off")
	// "auto" turns it on again at what is available.
	r, er = control(t, nc, setBudget("auto"))
	require.Nil(t, er)
	assert.True(t, r.Auto)
	assert.Equal(t, uint64(16<<30), r.BudgetBytes)
	_, auto := n.Budget()
	assert.True(t, auto)
	// Too little for the model: the budget stays, and the node keeps serving.
	g.held.Store(16 << 30)
	g.free.Store(0)
	g.held.Store(reserve + 1<<28)
	time.Sleep(100 * time.Millisecond)
	assert.Equal(t, uint64(16<<30), e.budget.Load())
	mustPlan(t, nc, InferSubject("gpu-a"), goodRequest("after", 1e9))
	assert.Zero(t, e.overlap.Load())
	assert.True(t, strings.HasPrefix(e.eventList()[0], "budget "))
}
