package msgs_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"vlanode/msgs"
)

// TestNumTrajSamples: the request's num_traj_samples round-trips, is
// optional (absent is 0, one sample), and outside 1…16 (or with a
// question) is a bad_request naming the field.
func TestNumTrajSamples(t *testing.T) {
	r := sampleRequest()
	b, err := msgs.Marshal(&r)
	require.NoError(t, err)
	got, err := msgs.DecodeInferRequest(b)
	require.NoError(t, err)
	assert.Equal(t, 0, got.NumTrajSamples, "absent")

	for _, k := range []int{1, 6, msgs.MaxTrajSamples} {
		r.NumTrajSamples = k
		b, err := msgs.Marshal(&r)
		require.NoError(t, err)
		got, err := msgs.DecodeInferRequest(b)
		require.NoError(t, err, "%d samples", k)
		assert.Equal(t, k, got.NumTrajSamples)
	}
	for _, k := range []int{-1, msgs.MaxTrajSamples + 1, 1000} {
		r.NumTrajSamples = k
		b, err := msgs.Marshal(&r)
		require.NoError(t, err)
		_, err = msgs.DecodeInferRequest(b)
		require.Error(t, err, "%d samples", k)
		assert.ErrorContains(t, err, "num_traj_samples: must be 1 to 16")
	}

	r.NumTrajSamples = 2
	r.Question = "What is ahead?"
	b, err = msgs.Marshal(&r)
	require.NoError(t, err)
	_, err = msgs.DecodeInferRequest(b)
	assert.ErrorContains(t, err, "num_traj_samples: is for planning")

	// a float where an integer is wanted
	m := map[string]any{}
	r = sampleRequest()
	b, err = msgs.Marshal(&r)
	require.NoError(t, err)
	require.NoError(t, msgpack.Unmarshal(b, &m))
	m["num_traj_samples"] = 2.5
	b, err = msgpack.Marshal(m)
	require.NoError(t, err)
	_, err = msgs.DecodeInferRequest(b)
	assert.ErrorContains(t, err, "num_traj_samples: want integer")
}

// TestPlanSamples: a Plan's samples round-trip, are absent when there are
// none, and are validated as the first sample is.
func TestPlanSamples(t *testing.T) {
	p := samplePlan()
	b, err := msgs.Marshal(&p)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, msgpack.Unmarshal(b, &raw))
	assert.NotContains(t, raw, "samples", "no key for one sample: old clients see what they saw")

	first := samplePlan()
	for i := range 2 {
		s := msgs.TrajSample{Trajectory: first.Trajectory, Actions: first.Actions}
		s.Actions = append([][2]float64(nil), s.Actions...)
		s.Actions[0][0] = float64(i + 1)
		p.Samples = append(p.Samples, s)
	}
	b, err = msgs.Marshal(&p)
	require.NoError(t, err)
	got, e, err := msgs.DecodeReply(b)
	require.NoError(t, err)
	require.Nil(t, e)
	require.Len(t, got.Samples, 2)
	assert.Equal(t, p.Samples, got.Samples)

	p.Samples[1].Actions = p.Samples[1].Actions[:10]
	b, err = msgs.Marshal(&p)
	require.NoError(t, err)
	_, _, err = msgs.DecodeReply(b)
	assert.ErrorContains(t, err, "samples[1].actions: got 10 actions for 64 waypoints")

	p.Samples[1].Actions = first.Actions
	p.Samples[0].Trajectory.XYZ = append([][3]float64(nil), first.Trajectory.XYZ...)
	p.Samples[0].Trajectory.XYZ[3][1] = math.NaN()
	b, err = msgs.Marshal(&p)
	require.NoError(t, err)
	_, _, err = msgs.DecodeReply(b)
	assert.ErrorContains(t, err, "samples[0].trajectory.xyz[3]")
}
