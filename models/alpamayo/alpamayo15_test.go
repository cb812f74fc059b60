package alpamayo_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/cpu"
	"vlanode/models"
	"vlanode/models/alpamayo"
	"vlanode/models/qwen3vl"
)

// load15 loads the alpamayo-1.5-tiny checkpoint on the cpu backend.
func load15(t *testing.T) *alpamayo.Model {
	t.Helper()
	require.NotEmpty(t, tiny15Dir)
	be, err := cpu.New()
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	m, err := alpamayo.Load(be, tiny15Dir, alpamayo.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.True(t, m.Config.Is15())
	return m
}

// promptText decodes a result's prompt ids, special tokens included.
func promptText(t *testing.T, m *alpamayo.Model, res *alpamayo.Result) string {
	t.Helper()
	ids := make([]int, len(res.PromptIDs))
	for i, id := range res.PromptIDs {
		ids[i] = int(id)
	}
	s, err := m.Tok.Decode(ids)
	require.NoError(t, err)
	return s
}

// withImages keeps the first n images of req.
func withImages(req *alpamayo.Request, n int) *alpamayo.Request {
	req.Images = qwen3vl.Images{Pixels: req.Images.Pixels[:n*24*1536], Grids: req.Images.Grids[:n]}
	return req
}

func TestPrompt15(t *testing.T) {
	m := load15(t)
	ctx := context.Background()
	img := "<|vision_start|>" + strings.Repeat("<|image_pad|>", 6) + "<|vision_end|>"

	// two cameras of two frames, named; navigation text after the history
	req := withImages(request(4), 4)
	req.Greedy, req.MaxReasoningTokens = true, 2
	req.Cameras = []int{1, 6}
	req.NavText = "Turn left onto De La Cruz Boulevard in 40m"
	res, err := m.Infer(ctx, req)
	require.NoError(t, err)
	text := promptText(t, m, res)
	assert.True(t, strings.HasPrefix(text, "<|im_start|>system\nYou are a driving assistant that generates safe and accurate actions.<|im_end|>\n<|im_start|>user\n"+
		"Front camera: frame 0 "+img+"frame 1 "+img+"Front telephoto camera: frame 0 "+img+"frame 1 "+img+"<|traj_history_start|>"), text)
	assert.True(t, strings.HasSuffix(text, "<|traj_history_end|><|route_start|>Turn left onto De La Cruz Boulevard in 40m<|route_end|>"+
		"output the chain-of-thought reasoning of the driving process, then output the future trajectory.<|im_end|>\n<|im_start|>assistant\n<|cot_start|>"), text)
	assert.Len(t, res.XYZ, 64)

	// without cameras: R1's image blocks; without navigation: no route
	req = request(4)
	req.Greedy, req.MaxReasoningTokens = true, 2
	res, err = m.Infer(ctx, req)
	require.NoError(t, err)
	text = promptText(t, m, res)
	assert.Contains(t, text, "<|im_start|>user\n"+strings.Repeat(img, 16)+"<|traj_history_start|>")
	assert.Contains(t, text, "<|traj_history_end|>output the chain-of-thought")

	// a question: the VQA prompt, an answer and no plan
	req = withImages(request(4), 4)
	req.Greedy, req.MaxReasoningTokens = true, 5
	req.Cameras = []int{0, 2}
	req.Question = "What is the traffic light's state?"
	req.HistXYZ, req.HistRot = nil, nil
	res, err = m.Infer(ctx, req)
	require.NoError(t, err)
	text = promptText(t, m, res)
	assert.True(t, strings.HasSuffix(text, "Front right camera: frame 0 "+img+"frame 1 "+img+
		"<|question_start|>What is the traffic light's state?<|question_end|><|im_end|>\n<|im_start|>assistant\n<|answer_start|>"), text)
	assert.NotEmpty(t, res.AnswerIDs)
	assert.LessOrEqual(t, len(res.AnswerIDs), 5)
	assert.Empty(t, res.XYZ)
	assert.Empty(t, res.ReasoningIDs)
	ids := make([]int, 0, len(res.AnswerIDs))
	for _, id := range res.AnswerIDs {
		if int(id) == m.Tokens.AnswerEnd || int(id) == m.Tokens.EOS {
			break
		}
		ids = append(ids, int(id))
	}
	want, err := m.Tok.Decode(ids)
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(want), res.Answer)
}

// TestGuidance15 checks classifier-free guidance: weight 1 is the plain
// run with navigation text bit for bit; another weight runs the unguided
// cache and moves the actions; the reasoning is the same either way.
func TestGuidance15(t *testing.T) {
	m := load15(t)
	ctx := context.Background()
	run := func(w, temp float64) *alpamayo.Result {
		req := request(6)
		req.Greedy, req.MaxReasoningTokens = true, 3
		req.NavText = "Turn right in 30m"
		req.GuidanceWeight, req.NoiseTemperature = w, temp
		res, err := m.Infer(ctx, req)
		require.NoError(t, err)
		return res
	}
	plain, one, strong := run(0, 0), run(1, 0), run(1.5, 0)
	assert.Equal(t, plain.Normalized, one.Normalized, "weight 1 is the guided field alone")
	assert.Zero(t, one.GuidanceWeight)
	assert.Equal(t, 1.5, strong.GuidanceWeight)
	assert.Equal(t, plain.ReasoningIDs, strong.ReasoningIDs)
	assert.NotEqual(t, plain.Normalized, strong.Normalized)

	// the noise temperature scales the flow's start: at 0 the flow starts
	// from zero, whatever the seed
	cold := run(0, 1e-30)
	zero := func(seed uint64) []float32 {
		req := request(seed)
		req.Greedy, req.MaxReasoningTokens = true, 3
		req.NavText = "Turn right in 30m"
		req.Noise = make([]float32, 128)
		res, err := m.Infer(ctx, req)
		require.NoError(t, err)
		return res.Normalized
	}
	assert.InDeltaSlice(t, zero(6), cold.Normalized, 1e-4)
}

func TestRequestErrors15(t *testing.T) {
	m := load15(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		edit func(*alpamayo.Request)
		want string
	}{
		{"blank question", func(r *alpamayo.Request) { r.Question = "  " }, "question is blank"},
		{"question and route", func(r *alpamayo.Request) { r.Question, r.NavText = "why?", "Turn left" }, "navigation text is for planning"},
		{"temperature", func(r *alpamayo.Request) { r.Temperature = -1 }, "temperature -1"},
		{"noise temperature", func(r *alpamayo.Request) { r.NoiseTemperature = -0.5 }, "noise temperature -0.5"},
		{"cameras", func(r *alpamayo.Request) { r.Cameras = []int{0, 1, 2} }, "16 images for 3 cameras"},
		{"camera twice", func(r *alpamayo.Request) { r.Cameras = []int{1, 1} }, "camera index 1 given twice"},
	} {
		req := request(1)
		c.edit(req)
		_, err := m.Infer(ctx, req)
		assert.ErrorIs(t, err, models.ErrBadInput, c.name)
		assert.ErrorContains(t, err, c.want, c.name)
	}

	// Alpamayo-R1 takes neither navigation text nor questions
	be, err := cpu.New()
	require.NoError(t, err)
	defer be.Close()
	r1, err := alpamayo.Load(be, tinyCheckpoint(t), alpamayo.LoadOptions{})
	require.NoError(t, err)
	defer r1.Close()
	for _, edit := range []func(*alpamayo.Request){
		func(r *alpamayo.Request) { r.NavText = "Turn left" },
		func(r *alpamayo.Request) { r.Question = "why?" },
	} {
		req := request(1)
		edit(req)
		_, err := r1.Infer(ctx, req)
		assert.ErrorIs(t, err, models.ErrUnsupported)
	}
}

func TestCameraOrder(t *testing.T) {
	order, idx, err := alpamayo.CameraOrder([]string{"front_tele_30fov", "cross_left_120fov", "front_wide_120fov"})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 0}, order)
	assert.Equal(t, []int{0, 1, 6}, idx)
	_, _, err = alpamayo.CameraOrder([]string{"front_wide_120fov", "roof_360"})
	assert.ErrorContains(t, err, `unknown camera "roof_360"`)
	_, _, err = alpamayo.CameraOrder([]string{"front_wide_120fov", "front_wide_120fov"})
	assert.ErrorContains(t, err, "given twice")
}
