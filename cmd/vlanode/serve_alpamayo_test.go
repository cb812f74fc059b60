package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"vlanode/engine"
	"vlanode/msgs"
	"vlanode/node"
)

// TestServeAlpamayoTiny serves the tiny synthetic Alpamayo-R1 on the CPU
// backend and asks it for plans over NATS: a good request, a corrupt
// frame, and a NaN in the ego history. The node answers each and keeps
// serving.
func TestServeAlpamayoTiny(t *testing.T) {
	model := tinyAlpamayo(t)
	url, _, stop := serving(t, alpamayoSpec(), "--model", model, "--device", "cpu", "--name", "tiny")
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()

	frames, ego := tinyObservation(t)
	ask := asker(t, nc)

	plan, e := ask(msgs.InferRequest{ID: "good", Frames: frames, EgoHistory: ego, MaxReasoningTokens: 4})
	require.Nil(t, e)
	assert.Equal(t, "good", plan.ID)
	assert.Equal(t, "tiny", plan.Node)
	assert.Len(t, plan.Trajectory.XYZ, 64)
	assert.Len(t, plan.Actions, 64)
	assert.Greater(t, plan.TimingMs.Prefill, 0.0)

	bad := append([]msgs.Frame(nil), frames...)
	bad[5].Data = append([]byte(nil), bad[5].Data[:40]...)
	_, e = ask(msgs.InferRequest{ID: "corrupt", Frames: bad, EgoHistory: ego})
	require.NotNil(t, e)
	assert.Equal(t, msgs.CodeBadRequest, e.Err.Code)
	assert.Contains(t, e.Err.Message, "png")

	nan := append([]msgs.EgoPose(nil), ego...)
	nan[3].XYZ[0] = nanValue()
	_, e = ask(msgs.InferRequest{ID: "nan", Frames: frames, EgoHistory: nan})
	require.NotNil(t, e)
	assert.Equal(t, msgs.CodeBadRequest, e.Err.Code)

	plan, e = ask(msgs.InferRequest{ID: "again", Frames: frames, EgoHistory: ego, MaxReasoningTokens: 2})
	require.Nil(t, e, "the node keeps serving after bad requests")
	assert.Equal(t, "again", plan.ID)
	require.NoError(t, stop())
}

func nanValue() float64 { return math.NaN() }

// TestServeAlpamayoBudget serves the tiny model within the plan's minimum
// budget (every unit streamed through the executor, some promoted after
// the prefill) and checks that the same request gets the same plan twice
// around a bad one: the slots and promotions are reused cleanly.
func TestServeAlpamayoBudget(t *testing.T) {
	model := tinyAlpamayo(t)
	minBudget := tinyMinBudget(t, model)
	url, _, stop := serving(t, alpamayoSpec(), "--model", model, "--device", "cpu", "--name", "small", "--budget", fmt.Sprint(minBudget))
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()

	frames, ego := tinyObservation(t)
	ask := asker(t, nc)
	first, e := ask(msgs.InferRequest{ID: "a", Frames: frames, EgoHistory: ego, MaxReasoningTokens: 4})
	require.Nil(t, e)
	nan := append([]msgs.EgoPose(nil), ego...)
	nan[3].XYZ[0] = nanValue()
	_, e = ask(msgs.InferRequest{ID: "nan", Frames: frames, EgoHistory: nan})
	require.NotNil(t, e)
	second, e := ask(msgs.InferRequest{ID: "b", Frames: frames, EgoHistory: ego, MaxReasoningTokens: 4})
	require.Nil(t, e)
	assert.Equal(t, first.Trajectory, second.Trajectory)
	assert.Equal(t, first.Reasoning, second.Reasoning)
	require.NoError(t, stop())
}

// tinyObservation is 16 PNG frames of the four cameras and a straight
// 16-pose ego history.
func tinyObservation(t *testing.T) ([]msgs.Frame, []msgs.EgoPose) {
	t.Helper()
	var frames []msgs.Frame
	for i, p := range pngImages(t, 16) {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		frames = append(frames, msgs.Frame{
			V: msgs.Version, Camera: engine.Cameras[i/engine.FramesPerCamera], StampNs: int64(i%4) * 100e6,
			Encoding: msgs.EncodingPNG, Width: 192, Height: 108, Data: data,
		})
	}
	ego := make([]msgs.EgoPose, 16)
	for i := range ego {
		ego[i] = msgs.EgoPose{XYZ: [3]float64{float64(i-15) * 0.5, 0, 0}, Rot: [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}}
	}
	return frames, ego
}

// asker sends requests on vla.infer and decodes the replies.
func asker(t *testing.T, nc *nats.Conn) func(msgs.InferRequest) (*msgs.Plan, *msgs.Error) {
	return func(req msgs.InferRequest) (*msgs.Plan, *msgs.Error) {
		t.Helper()
		req.V = msgs.Version
		raw, err := msgs.Marshal(req)
		require.NoError(t, err)
		msg, err := nc.Request("vla.infer", raw, 60*time.Second)
		require.NoError(t, err)
		plan, e, err := msgs.DecodeReply(msg.Data)
		require.NoError(t, err)
		return plan, e
	}
}

// TestServeAlpamayo15Tiny serves the tiny Alpamayo 1.5 on the CPU backend
// over a real NATS server: two cameras with navigation text and sampling
// keys get a plan, a question gets an answer, and bad values of the new
// keys are bad_request naming the field (unsupported for prompt).
func TestServeAlpamayo15Tiny(t *testing.T) {
	model := tinyAlpamayo15(t)
	url, _, stop := serving(t, alpamayoSpec(), "--model", model, "--device", "cpu", "--name", "tiny15")
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	frames, ego := tinyObservation(t)
	ask := asker(t, nc)

	// front_wide and front_tele, sent tele first: camera_order names them
	two := append(append([]msgs.Frame(nil), frames[12:16]...), frames[4:8]...)
	zero, topP, seed := 0.0, 0.9, uint64(11)
	req := msgs.InferRequest{ID: "nav", Frames: two, EgoHistory: ego, MaxReasoningTokens: 3,
		CameraOrder: []string{"front_tele_30fov", "front_wide_120fov"}, NavText: "Turn left in 30m",
		Temperature: &zero, TopP: &topP, Seed: &seed}
	plan, e := ask(req)
	require.Nil(t, e)
	assert.Len(t, plan.Trajectory.XYZ, 64)
	assert.Empty(t, plan.Answer)
	assert.Zero(t, plan.VRAMPeakBytes, "the cpu backend has no device memory")
	again, e := ask(req)
	require.Nil(t, e)
	assert.Equal(t, plan.Trajectory, again.Trajectory, "temperature 0 and a seed: the same plan")

	plan, e = ask(msgs.InferRequest{ID: "vqa", Frames: frames, EgoHistory: ego, MaxReasoningTokens: 4, Question: "Is the road clear?"})
	require.Nil(t, e)
	assert.Empty(t, plan.Trajectory.XYZ)
	assert.Empty(t, plan.Actions)
	assert.NotContains(t, plan.Answer, "<|answer_end|>")

	neg := -0.5
	for _, c := range []struct {
		name string
		edit func(*msgs.InferRequest)
		code msgs.Code
		want string
	}{
		{"unknown camera", func(r *msgs.InferRequest) {
			r.CameraOrder = []string{"front_tele_30fov", "roof_360"}
		}, msgs.CodeBadRequest, `camera_order[1]: unknown camera "roof_360"`},
		{"frames of another camera", func(r *msgs.InferRequest) {
			r.CameraOrder = []string{"front_wide_120fov", "front_tele_30fov"}
		}, msgs.CodeBadRequest, `frames[0].camera: got "front_tele_30fov", want "front_wide_120fov"`},
		{"frames for two cameras, four named", func(r *msgs.InferRequest) {
			r.CameraOrder = []string{"front_tele_30fov", "front_wide_120fov", "cross_left_120fov", "cross_right_120fov"}
		}, msgs.CodeBadRequest, "frames: got 8 frames, want 16"},
		{"negative temperature", func(r *msgs.InferRequest) { r.Temperature = &neg }, msgs.CodeBadRequest, "temperature: must be finite and >= 0"},
		{"blank question", func(r *msgs.InferRequest) { r.Question = " " }, msgs.CodeBadRequest, "question: must not be blank"},
		{"prompt", func(r *msgs.InferRequest) { r.Prompt = "drive carefully" }, msgs.CodeUnsupported, "prompt: Alpamayo models take no free-form prompt"},
	} {
		r := req
		r.ID = c.name
		c.edit(&r)
		_, e := ask(r)
		require.NotNil(t, e, c.name)
		assert.Equal(t, c.code, e.Err.Code, c.name)
		assert.Contains(t, e.Err.Message, c.want, c.name)
	}

	// an empty question never reaches the node's model: the decoder
	// refuses it (Marshal leaves an empty string out, so send it raw)
	raw, err := msgs.Marshal(req)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, msgpack.Unmarshal(raw, &m))
	m["question"] = ""
	raw, err = msgpack.Marshal(m)
	require.NoError(t, err)
	reply, err := nc.Request("vla.infer", raw, 60*time.Second)
	require.NoError(t, err)
	_, e, err = msgs.DecodeReply(reply.Data)
	require.NoError(t, err)
	require.NotNil(t, e)
	assert.Equal(t, msgs.CodeBadRequest, e.Err.Code)
	assert.Contains(t, e.Err.Message, "question: must not be empty")
	require.NoError(t, stop())
}

// TestServeAlpamayoRebudget serves the tiny model with every unit resident
// and, while requests wait in the queue, changes the budget to the plan's
// minimum (every unit streamed through the executor) and back: every
// request is answered, each plan carries the budget it ran within, the
// control replies carry each plan's summary, greedy reasoning is the same
// within every budget, and a budget below the minimum is refused with the
// minimum while the node keeps serving.
func TestServeAlpamayoRebudget(t *testing.T) {
	model := tinyAlpamayo(t)
	minBudget := uint64(tinyMinBudget(t, model))
	url, _, stop := serving(t, alpamayoSpec(), "--model", model, "--device", "cpu", "--name", "tiny", "--control-token", "tok", "--queue-bound", "8")
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	frames, ego := tinyObservation(t)
	zero := 0.0
	send := func(id string) chan *nats.Msg {
		ch := make(chan *nats.Msg, 1)
		raw, err := msgs.Marshal(&msgs.InferRequest{ID: id, Frames: frames, EgoHistory: ego, MaxReasoningTokens: 4, Temperature: &zero})
		require.NoError(t, err)
		inbox := nc.NewInbox()
		_, err = nc.ChanSubscribe(inbox, ch)
		require.NoError(t, err)
		require.NoError(t, nc.PublishRequest("vla.tiny.infer", inbox, raw))
		return ch
	}
	answer := func(ch chan *nats.Msg) *msgs.Plan {
		t.Helper()
		select {
		case m := <-ch:
			p, e, err := msgs.DecodeReply(m.Data)
			require.NoError(t, err)
			require.Nil(t, e, "%+v", e)
			return p
		case <-time.After(2 * time.Minute):
			t.Fatal("no answer")
			return nil
		}
	}
	ctl := func(budget string) (*msgs.ControlReply, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		req := &msgs.ControlRequest{ID: budget, Token: "tok", Op: msgs.OpSetBudget, Budget: budget}
		if budget == "" {
			req.Op = msgs.OpGetBudget
		}
		return node.RequestControl(ctx, nc, "tiny", req)
	}

	before, err := ctl("")
	require.NoError(t, err)
	require.NotNil(t, before.Plan)
	assert.Zero(t, before.BudgetBytes)
	assert.Zero(t, before.Plan.StreamedBytes, "no budget: every unit resident")
	assert.Positive(t, before.Plan.ResidentBytes)

	var pending []chan *nats.Msg
	for i := range 3 {
		pending = append(pending, send(fmt.Sprintf("before-%d", i)))
	}
	small, err := ctl(fmt.Sprint(minBudget))
	require.NoError(t, err)
	assert.True(t, small.Changed)
	assert.Equal(t, minBudget, small.BudgetBytes)
	assert.Zero(t, small.PreviousBudgetBytes)
	assert.Positive(t, small.Plan.StreamedBytes, "the minimum streams")
	assert.Less(t, small.Plan.ResidentBytes, before.Plan.ResidentBytes)
	for i := range 2 {
		pending = append(pending, send(fmt.Sprintf("small-%d", i)))
	}
	back, err := ctl("unlimited")
	require.NoError(t, err)
	assert.Equal(t, minBudget, back.PreviousBudgetBytes)
	assert.Zero(t, back.Plan.StreamedBytes)

	var plans []*msgs.Plan
	for _, ch := range pending {
		plans = append(plans, answer(ch))
	}
	// Each change waited for the inference in flight and ran before the
	// requests queued behind it, which the queue answers in order: the
	// plans' budgets run no budget, the minimum, no budget, and some ran
	// within the minimum (requests were queued when it came).
	var seq []uint64
	for _, p := range plans {
		if len(seq) == 0 || seq[len(seq)-1] != p.BudgetBytes {
			seq = append(seq, p.BudgetBytes)
		}
		assert.Equal(t, plans[0].Reasoning, p.Reasoning, "greedy reasoning within every budget")
		assert.Len(t, p.Trajectory.XYZ, 64)
	}
	assert.Contains(t, [][]uint64{{0, minBudget, 0}, {minBudget, 0}}, seq, "budgets in the order of the changes")
	_, err = ctl(fmt.Sprint(minBudget - 1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unsupported")
	assert.Contains(t, err.Error(), "minimum")
	after := answer(send("after"))
	assert.Zero(t, after.BudgetBytes, "serving within the budget before the refusal")
	require.NoError(t, stop())
}
