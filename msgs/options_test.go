package msgs_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// TestRequestOptions round-trips the optional keys added within version 1
// and checks that a request without them decodes as before (nil pointers,
// empty strings).
func TestRequestOptions(t *testing.T) {
	temp, topP, seed := 0.0, 0.9, uint64(42)
	r := sampleRequest()
	r.Prompt = ""
	r.CameraOrder = []string{"front_wide_120fov", "front_tele_30fov"}
	r.NavText = "Turn left in 30m"
	r.Temperature, r.TopP, r.Seed = &temp, &topP, &seed
	got, err := msgs.DecodeInferRequest(mustMarshal(t, r))
	require.NoError(t, err)
	assert.Equal(t, r.CameraOrder, got.CameraOrder)
	assert.Equal(t, "Turn left in 30m", got.NavText)
	require.NotNil(t, got.Temperature)
	assert.Zero(t, *got.Temperature, "0 is sent, not left out")
	assert.Equal(t, 0.9, *got.TopP)
	assert.Equal(t, uint64(42), *got.Seed)
	keys := generic(t, mustMarshal(t, r))
	for _, k := range []string{"camera_order", "nav_text", "temperature", "top_p", "seed"} {
		assert.Contains(t, keys, k)
	}

	old, err := msgs.DecodeInferRequest(mustMarshal(t, sampleRequest()))
	require.NoError(t, err)
	assert.Nil(t, old.Temperature)
	assert.Nil(t, old.TopP)
	assert.Nil(t, old.Seed)
	assert.Nil(t, old.CameraOrder)
	assert.Empty(t, old.NavText+old.Question)

	q := sampleRequest()
	q.Question = "Is the light green?"
	got, err = msgs.DecodeInferRequest(mustMarshal(t, q))
	require.NoError(t, err)
	assert.Equal(t, "Is the light green?", got.Question)

	p := samplePlan()
	p.Answer = "Yes."
	back, _, err := msgs.DecodeReply(mustMarshal(t, p))
	require.NoError(t, err)
	assert.Equal(t, "Yes.", back.Answer)
	assert.NotContains(t, generic(t, mustMarshal(t, samplePlan())), "answer", "sent only with an answer")
}

func TestRequestOptionsBad(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"empty question", set("question", ""), "question: must not be empty"},
		{"blank question", set("question", "  \n"), "question: must not be blank"},
		{"question not string", set("question", 3), "question: want string, got integer"},
		{"question with nav", edits(set("question", "why?"), set("nav_text", "Turn left")), "nav_text: is for planning"},
		{"negative temperature", set("temperature", -0.1), "temperature: must be finite and >= 0"},
		{"nan temperature", set("temperature", math.NaN()), "temperature: must be finite"},
		{"temperature string", set("temperature", "hot"), "temperature: want number, got string"},
		{"top_p 0", set("top_p", 0.0), "top_p: must be in (0, 1]"},
		{"top_p above 1", set("top_p", 1.5), "top_p: must be in (0, 1]"},
		{"negative seed", set("seed", -1), "seed: want non-negative integer"},
		{"empty camera_order", set("camera_order", []any{}), "camera_order: must not be empty"},
		{"camera twice", set("camera_order", []any{"front_wide_120fov", "front_wide_120fov"}), "camera_order[1]: camera \"front_wide_120fov\" is also camera_order[0]"},
		{"camera not string", set("camera_order", []any{"a", 7}), "camera_order[1]: want string, got integer"},
		{"nav_text not string", set("nav_text", []byte("x")), "nav_text: want string, got bin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := generic(t, mustMarshal(t, sampleRequest()))
			c.edit(m)
			_, err := msgs.DecodeInferRequest(encode(t, m))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			fe, ok := err.(*msgs.FieldError)
			require.True(t, ok)
			assert.Equal(t, msgs.CodeBadRequest, fe.Code)
		})
	}
}
