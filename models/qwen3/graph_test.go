package qwen3_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/models/qwen3"
	"vlanode/safetensors"
	"vlanode/sample"
	"vlanode/tensor"
)

// replayer is the cpu backend with the two capabilities a step graph
// needs, done on the host: a "graph" is the captured function, run again
// at each launch (the ops read their tensors then, as a replayed CUDA
// graph does), and positions are I32 tensors of the fake's own. It lets
// the model's graph logic run without a GPU.
type replayer struct {
	backend.Backend
	captures, launches int
	failAttention      bool // AttentionAt refuses, as for a cache too long
	capturing          bool
}

type posTensor struct{ v int }

func (p *posTensor) DType() tensor.DType { return tensor.I32 }
func (p *posTensor) Shape() []int        { return []int{1} }

type replayGraph struct {
	r  *replayer
	fn func() error
}

func (g *replayGraph) Launch() error { g.r.launches++; return g.fn() }
func (g *replayGraph) Close() error  { return nil }

func (r *replayer) Alloc(purpose string, dt tensor.DType, shape ...int) (backend.Tensor, error) {
	if dt == tensor.I32 {
		return &posTensor{}, nil
	}
	return r.Backend.Alloc(purpose, dt, shape...)
}

func (r *replayer) Free(t backend.Tensor) {
	if _, ok := t.(*posTensor); !ok {
		r.Backend.Free(t)
	}
}

func (r *replayer) CaptureGraph(fn func() error) (backend.Graph, error) {
	r.captures++
	return &replayGraph{r: r, fn: fn}, nil // nothing runs while capturing
}

func (r *replayer) UploadI32(dst backend.Tensor, src []int32) error {
	dst.(*posTensor).v = int(src[0])
	return nil
}

func (r *replayer) CopyRowsAt(dst, src, pos backend.Tensor) error {
	rows, _ := backend.Matrix(src)
	view, err := r.Rows(dst, pos.(*posTensor).v, rows)
	if err != nil {
		return err
	}
	return r.Copy(view, src)
}

func (r *replayer) AttentionAt(dst, q, k, v backend.Tensor, o backend.AttnOpts, pos backend.Tensor) error {
	if r.failAttention {
		return errors.New("replayer: no device positions for this cache")
	}
	rows, _ := backend.Matrix(q)
	o.QPos0 = pos.(*posTensor).v
	o.NKV = o.QPos0 + rows
	return r.Attention(dst, q, k, v, o)
}

// TestStepGraphLogic decodes through the step graph on the replaying
// backend and op by op: the same logits at every step; the first step
// runs op by op, the second is captured, every later one launches it.
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
	want, graphed, _ := decode(host)
	require.False(t, graphed, "the cpu backend captures nothing")

	same := func(got [][]float32) {
		t.Helper()
		for i := range want {
			for j := range want[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("step %d, logit %d: %v, op by op %v", i, j, got[i][j], want[i][j])
				}
			}
		}
	}
	r := &replayer{Backend: host}
	got, graphed, gerr := decode(r)
	require.NoError(t, gerr)
	require.True(t, graphed)
	require.Equal(t, 1, r.captures, "captured once, on the second step")
	require.Equal(t, steps-1, r.launches, "the second step and every later one launch the graph")
	same(got)

	r = &replayer{Backend: host, failAttention: true}
	got, graphed, gerr = decode(r)
	require.False(t, graphed)
	require.ErrorContains(t, gerr, "no device positions")
	require.Zero(t, r.captures)
	same(got)
}
