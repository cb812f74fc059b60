package node

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// fakeGPU is GPU telemetry for tests; failing makes Read fail.
type fakeGPU struct {
	failing atomic.Bool
}

func (f *fakeGPU) Read() (*msgs.GPU, error) {
	if f.failing.Load() {
		return nil, errors.New("GPU fell off the bus")
	}
	return &msgs.GPU{
		Name: "Fake H200", MemoryTotalBytes: 140 << 30, MemoryUsedBytes: 10 << 30, MemoryFreeBytes: 130 << 30,
		PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16, TemperatureC: 40,
		SMClockMHz: 1980, MemClockMHz: 3201, ThrottleReasons: []string{"gpu_idle"},
	}, nil
}

func (*fakeGPU) Close() error { return nil }

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStatusPublishing(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	sub, err := nc.SubscribeSync(StatusSubject("gpu-a"))
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	g := &fakeGPU{}
	var logs syncBuffer
	n := startNode(t, srv, &testEngine{}, WithGPU(g), WithStatusInterval(20*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	mustPlan(t, nc, InferSubject("gpu-a"), goodRequest("A", 1e9))

	received := 0
	next := func() *msgs.Status {
		t.Helper()
		received++
		require.Less(t, received, 1000, "status messages")
		m, err := sub.NextMsg(waitFor)
		require.NoError(t, err)
		s, err := msgs.DecodeStatus(m.Data)
		require.NoError(t, err)
		return s
	}
	var s *msgs.Status
	for s = next(); s.Counters["plans"] == 0; s = next() {
	}
	assert.Equal(t, "gpu-a", s.Node)
	assert.Equal(t, "test-vla", s.Model)
	assert.Equal(t, uint64(testBudget), s.BudgetBytes)
	assert.Equal(t, &msgs.PlanSummary{Mode: "test", PredictedMs: 1}, s.Plan)
	require.NotNil(t, s.GPU)
	assert.Equal(t, "Fake H200", s.GPU.Name)
	assert.Equal(t, 5, s.GPU.PCIeGen)
	assert.Equal(t, 16, s.GPU.PCIeWidth)
	assert.Equal(t, []string{"gpu_idle"}, s.GPU.ThrottleReasons)
	assert.Equal(t, 0, s.QueueDepth)
	for _, k := range []string{"requests", "plans", "errors_bad_request", "errors_overloaded", "shed_queue_full", "shed_superseded", "shed_deadline", "shed_shutdown", "frames_received", "frames_rejected"} {
		assert.Contains(t, s.Counters, k)
	}
	assert.Equal(t, uint64(1), s.Counters["requests"])

	// Without telemetry, the status says nothing of a GPU, and the log says
	// so once.
	g.failing.Store(true)
	for s = next(); s.GPU != nil; s = next() {
	}
	for range 3 {
		assert.Nil(t, next().GPU)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "GPU telemetry unavailable"), logs.String())
	g.failing.Store(false)
	for s = next(); s.GPU == nil; s = next() {
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "GPU telemetry is back"))
	_ = n
}

func TestStatusWithoutGPU(t *testing.T) {
	srv := runServer(t)
	n := startNode(t, srv, &testEngine{})
	s := n.Status()
	assert.Nil(t, s.GPU)
	assert.Equal(t, "gpu-a", s.Node)
}
