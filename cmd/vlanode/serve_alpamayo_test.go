package main

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/engine"
	"vlanode/msgs"
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
