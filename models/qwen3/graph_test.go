package qwen3_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/backend/replay"
	"vlanode/cpu"
	"vlanode/models/qwen3"
	"vlanode/safetensors"
	"vlanode/sample"
)

// greedySteps prefills ids and decodes steps greedy tokens one at a time,
// returning each step's logits and the session's StepGraph.
func greedySteps(t *testing.T, m *qwen3.Model, ids []int32, steps int) ([][]float32, bool, error) {
	t.Helper()
	s, err := m.NewSession(len(ids) + steps)
	require.NoError(t, err)
	defer s.Close()
	logits, err := s.Forward(context.Background(), ids, false)
	require.NoError(t, err)
	var all [][]float32
	for range steps {
		logits, err = s.Forward(context.Background(), []int32{int32(sample.Greedy(logits))}, false)
		require.NoError(t, err)
		all = append(all, logits)
	}
	graphed, gerr := s.StepGraph()
	return all, graphed, gerr
}

// sameBits fails unless got holds want's logits bit for bit.
func sameBits(t *testing.T, want, got [][]float32) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("step %d, logit %d: %v, want %v (op by op)", i, j, got[i][j], want[i][j])
			}
		}
	}
}

// TestStepGraphLogic decodes through the step graph on the replaying
// backend and op by op: the same logits at every step; the first step
// runs op by op and is captured right after, every later one launches
// the graph.
// When the device-position ops refuse, decoding goes on op by op and says
// why.
func TestStepGraphLogic(t *testing.T) {
	name := referenceCases(t)[0]
	dir := filepath.Join(referenceDir, name)
	_, ids, _ := loadCase(t, dir)
	host, err := cpu.New()
	require.NoError(t, err)
	t.Cleanup(func() { host.Close() })
	ck, err := safetensors.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	const steps = 5
	decode := func(be backend.Backend) ([][]float32, bool, error) {
		m, err := qwen3.Load(be, dir, ck)
		require.NoError(t, err)
		defer m.Close()
		return greedySteps(t, m, ids, steps)
	}
	want, graphed, _ := decode(host)
	require.False(t, graphed, "the cpu backend captures nothing")
	same := func(got [][]float32) { t.Helper(); sameBits(t, want, got) }
	r := replay.New(host)
	got, graphed, gerr := decode(r)
	require.NoError(t, gerr)
	require.True(t, graphed)
	require.Equal(t, 1, r.Captures, "captured once, right after the first step")
	require.Equal(t, steps-1, r.Launches, "every step after the first launches the graph")
	same(got)

	r = replay.New(host)
	r.RefuseAttention = true
	got, graphed, gerr = decode(r)
	require.False(t, graphed)
	require.ErrorContains(t, gerr, "no device positions")
	require.Zero(t, r.Captures)
	same(got)
}
