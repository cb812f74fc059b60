package alpamayo_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/backend/replay"
	"vlanode/cpu"
	"vlanode/models/alpamayo"
	"vlanode/models/qwen3vl"
	"vlanode/synth"
)

// tinyDir and tiny15Dir hold the alpamayo-r1-tiny and alpamayo-1.5-tiny
// synthetic checkpoints, written once by TestMain for every test of the
// package.
var tinyDir, tiny15Dir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vlanode-alpamayo-tiny-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		for _, c := range []struct {
			arch synth.Arch
			dst  *string
		}{{synth.AlpamayoR1Tiny, &tinyDir}, {synth.Alpamayo15Tiny, &tiny15Dir}} {
			out := filepath.Join(dir, string(c.arch))
			l, err := synth.NewLayout(c.arch)
			if err == nil {
				_, err = synth.Write(context.Background(), out, l, synth.Options{Seed: 7})
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "writing the tiny checkpoint:", err)
				return 1
			}
			*c.dst = out
		}
		return m.Run()
	}()
	os.Exit(code)
}

func tinyCheckpoint(t *testing.T) string {
	t.Helper()
	require.NotEmpty(t, tinyDir)
	return tinyDir
}

// loadResident loads the checkpoint in dir with every unit resident on a
// CPU backend; the model and the backend are closed when t ends.
func loadResident(t *testing.T, dir string) *alpamayo.Model {
	t.Helper()
	be, err := cpu.New()
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	m, err := alpamayo.Load(be, dir, alpamayo.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// request builds 16 random 64×96 images (grid 1×4×6) and a straight,
// constant-speed ego history.
func request(seed uint64) *alpamayo.Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	const images, patches = 16, 24
	px := make([]float32, images*patches*1536)
	for i := range px {
		px[i] = float32(rng.Float64()*2 - 1)
	}
	req := &alpamayo.Request{Images: qwen3vl.Images{Pixels: px}, Seed: seed}
	for range images {
		req.Images.Grids = append(req.Images.Grids, qwen3vl.Grid{T: 1, H: 4, W: 6})
	}
	for i := range 16 {
		x := float32(i-15) * 0.5 // 5 m/s, t0 at the origin
		req.HistXYZ = append(req.HistXYZ, [3]float32{x, 0, 0})
		req.HistRot = append(req.HistRot, [9]float32{1, 0, 0, 0, 1, 0, 0, 0, 1})
	}
	return req
}

func TestInferTiny(t *testing.T) {
	dir := tinyCheckpoint(t)
	m := loadResident(t, dir)

	req := request(3)
	req.Greedy = true
	req.MaxReasoningTokens = 12
	res, err := m.Infer(context.Background(), req)
	require.NoError(t, err)
	assert.Len(t, res.XYZ, 64)
	assert.Len(t, res.Rot, 64)
	assert.Len(t, res.Actions, 64)
	assert.LessOrEqual(t, len(res.ReasoningIDs), 12)
	// 16 vision blocks of 6 image tokens and their delimiters, 48 history
	// tokens and theirs, and the chat text around them.
	assert.Greater(t, res.PromptTokens, 16*(6+2)+48+2)
	assert.Equal(t, res.PromptTokens+len(res.ReasoningIDs)-1, res.CachedTokens, "the last sampled token is not fed back")
	for _, p := range res.XYZ {
		for _, v := range p {
			require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "trajectory not finite")
		}
	}
	for _, id := range res.ReasoningIDs {
		assert.False(t, int(id) >= m.Tokens.TrajFirst && int(id) <= m.Tokens.TrajLast, "trajectory token %d in the reasoning", id)
	}
	t.Logf("prompt %d tokens, cached %d, reasoning %q (%d ids), first waypoint %v, last %v, timing %+v",
		res.PromptTokens, res.CachedTokens, res.Reasoning, len(res.ReasoningIDs), res.XYZ[0], res.XYZ[63], res.Timing)

	// The same request gives the same plan (greedy reasoning, seeded noise).
	again, err := m.Infer(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, res.ReasoningIDs, again.ReasoningIDs)
	assert.Equal(t, res.XYZ, again.XYZ)
}

// TestInferGraphsTiny runs the tiny model on the cpu backend wrapped with
// host-side graphs (backend/replay): the decode and Euler steps go
// through their graphs (captured once each, replayed after), and
// reasoning, actions and trajectory are the bits of the plain cpu run.
// The Euler steps' features and updates run on the "device"
// (backend.FlowFeed), the state read back once. Greedy decode steps take their tokens on the "device"
// (backend.TokenFeed): each step is queued before the host reads the
// token it feeds, and the same tokens come out where the reasoning ends
// on <|im_end|> (the step queued after it dropped), on
// <|traj_future_start|> (fed, then the end) mid-way and as the last token
// allowed, and after a single token.
func TestInferGraphsTiny(t *testing.T) {
	dir := tinyCheckpoint(t)
	host, err := cpu.New()
	require.NoError(t, err)
	defer host.Close()
	infer := func(be backend.Backend, req *alpamayo.Request, tokens func(*alpamayo.Tokens)) *alpamayo.Result {
		m, err := alpamayo.Load(be, dir, alpamayo.LoadOptions{})
		require.NoError(t, err)
		defer m.Close()
		if tokens != nil {
			tokens(&m.Tokens)
		}
		res, err := m.Infer(context.Background(), req)
		require.NoError(t, err)
		return res
	}
	greedy := request(4)
	greedy.Greedy, greedy.MaxReasoningTokens = true, 8
	plain := infer(host, greedy, nil).ReasoningIDs
	require.Len(t, plain, 8)
	k := 2 // a token of the plain reasoning not seen before it
	for slices.Contains(plain[:k], plain[k]) {
		k++
	}
	one := request(4)
	one.Greedy, one.MaxReasoningTokens = true, 1
	sampled := request(4)
	sampled.MaxReasoningTokens = 8
	for _, c := range []struct {
		name    string
		req     *alpamayo.Request
		tokens  func(*alpamayo.Tokens)
		dropped int // speculative steps taken back
	}{
		{"sampled", sampled, nil, 0},
		{"greedy", greedy, nil, 0},
		{"greedy, im_end mid-way", greedy, func(tk *alpamayo.Tokens) { tk.EOS = int(plain[k]) }, 1},
		{"greedy, traj_future_start mid-way", greedy, func(tk *alpamayo.Tokens) { tk.FutureStart = int(plain[k]) }, 0},
		{"greedy, traj_future_start last", greedy, func(tk *alpamayo.Tokens) { tk.FutureStart = int(plain[7]) }, 0},
		{"greedy, one token", one, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := infer(host, c.req, c.tokens)
			assert.False(t, want.DecodeGraph || want.DiffusionGraph, "the cpu backend captures nothing")
			r := replay.New(host)
			got := infer(r, c.req, c.tokens)
			require.Empty(t, got.GraphError)
			decodes := got.CachedTokens - got.PromptTokens
			t.Logf("reasoning %v, %d decode steps cached, %d fetched", got.ReasoningIDs, decodes, r.Fetches)
			assert.Equal(t, want.ReasoningIDs, got.ReasoningIDs)
			assert.Equal(t, want.CachedTokens, got.CachedTokens)
			assert.Equal(t, want.Normalized, got.Normalized)
			assert.Equal(t, want.XYZ, got.XYZ)
			assert.Equal(t, want.Rot, got.Rot)
			require.True(t, got.DiffusionGraph, "Euler steps through a graph")
			assert.Equal(t, 10, r.EulerSteps, "the Euler updates on the device")
			if decodes == 0 {
				assert.Equal(t, 1, r.Captures, "one Euler step graph")
				assert.Equal(t, 10-1, r.Launches, "every Euler step after the first launches its graph")
				return
			}
			require.True(t, got.DecodeGraph, "decode steps through a graph")
			assert.Equal(t, 2, r.Captures, "one decode step graph, one Euler step graph")
			steps := decodes + c.dropped
			assert.Equal(t, (steps-1)+(10-1), r.Launches, "every step after the first launches its graph")
			if c.req.Greedy {
				assert.Equal(t, steps, r.Fetches, "each decode step's token fed on the device")
			} else {
				assert.Zero(t, r.Fetches, "sampled tokens are fed from the host")
			}
		})
	}
}

func TestInferRejectsBadRequests(t *testing.T) {
	dir := tinyCheckpoint(t)
	m := loadResident(t, dir)

	short := request(1)
	short.HistXYZ = short.HistXYZ[:15]
	_, err := m.Infer(context.Background(), short)
	assert.ErrorContains(t, err, "want 16 poses")

	nan := request(1)
	nan.HistXYZ[4][1] = float32(math.NaN())
	_, err = m.Infer(context.Background(), nan)
	assert.ErrorContains(t, err, "pose 4 is not finite")

	noise := request(1)
	noise.Noise = make([]float32, 5)
	_, err = m.Infer(context.Background(), noise)
	assert.ErrorContains(t, err, "noise has 5 values")
}

// TestTeacherForced: fed the greedy run's own tokens, the teacher-forced
// run is that run (the same ids and plan) with each step's logits, whose
// argmax is the step's token; fed another token at step 1, the steps after
// it see that token (the ids follow it) and its logits differ.
func TestTeacherForced(t *testing.T) {
	m := loadResident(t, tinyCheckpoint(t))

	req := request(5)
	req.Greedy = true
	req.MaxReasoningTokens = 8
	want, err := m.Infer(context.Background(), req)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(want.ReasoningIDs), 3)
	assert.Nil(t, want.StepLogits)

	forced := *req
	forced.TeacherForced = want.ReasoningIDs
	got, err := m.Infer(context.Background(), &forced)
	require.NoError(t, err)
	assert.Equal(t, want.ReasoningIDs, got.ReasoningIDs)
	assert.Equal(t, want.Normalized, got.Normalized, "the same plan, bit for bit")
	require.Len(t, got.StepLogits, len(want.ReasoningIDs))
	for i, row := range got.StepLogits {
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		assert.Equal(t, int(want.ReasoningIDs[i]), best, "step %d's argmax", i)
	}

	other := slices.Clone(want.ReasoningIDs[:1])
	other = append(other, (want.ReasoningIDs[1]+1)%int32(len(got.StepLogits[0])))
	forced.TeacherForced = other
	moved, err := m.Infer(context.Background(), &forced)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(moved.ReasoningIDs), 2)
	assert.Equal(t, other, moved.ReasoningIDs[:2])
	assert.Equal(t, got.StepLogits[1], moved.StepLogits[1], "step 1 saw the same inputs")
	if len(moved.StepLogits) > 2 {
		assert.NotEqual(t, got.StepLogits[2], moved.StepLogits[2], "step 2 saw the other token")
	}

	forced.Greedy = false
	_, err = m.Infer(context.Background(), &forced)
	require.ErrorContains(t, err, "needs greedy decoding")
}
