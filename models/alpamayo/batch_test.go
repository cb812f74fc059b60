package alpamayo_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/cpu"
	"vlanode/layering"
	"vlanode/models"
	"vlanode/models/alpamayo"
)

// TestSamplesShareTheReasoning: K trajectory samples of one request share
// its reasoning; sample 0 is the plan of one sample, bit for bit (the cpu
// backend's products compute each row alone), and the others differ (their
// own noise).
func TestSamplesShareTheReasoning(t *testing.T) {
	dir := tinyCheckpoint(t)
	be, err := cpu.New()
	require.NoError(t, err)
	defer be.Close()
	for _, tc := range []struct {
		name string
		lay  func() *alpamayo.Layering
	}{
		{"resident", func() *alpamayo.Layering { return nil }},
		{"streamed", func() *alpamayo.Layering { return hostLayering(be, tinyPlan(t, dir, -1), layering.Pipelined) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := alpamayo.Load(be, dir, alpamayo.LoadOptions{Layering: tc.lay()})
			require.NoError(t, err)
			defer m.Close()
			req := request(5)
			req.MaxReasoningTokens = 6
			one, err := m.Infer(context.Background(), req)
			require.NoError(t, err)
			assert.Empty(t, one.Samples)

			req.Samples = 4
			k, err := m.Infer(context.Background(), req)
			require.NoError(t, err)
			assert.Equal(t, one.ReasoningIDs, k.ReasoningIDs)
			assert.Equal(t, one.Normalized, k.Normalized, "sample 0 is the plan of one sample")
			assert.Equal(t, one.Actions, k.Actions)
			assert.Equal(t, one.XYZ, k.XYZ)
			require.Len(t, k.Samples, 3)
			for i, s := range k.Samples {
				assert.Len(t, s.XYZ, len(one.XYZ))
				assert.Len(t, s.Actions, len(one.Actions))
				assert.NotEqual(t, one.Normalized, s.Normalized, "sample %d draws its own noise", i+1)
			}
		})
	}
}

// TestSamplesBounds: more samples than MaxSamples, or noise for another
// number of samples, is bad input.
func TestSamplesBounds(t *testing.T) {
	dir := tinyCheckpoint(t)
	m := loadResident(t, dir)
	req := request(5)
	req.Samples = alpamayo.MaxSamples + 1
	_, err := m.Infer(context.Background(), req)
	assert.ErrorIs(t, err, models.ErrBadInput)
	assert.ErrorContains(t, err, "trajectory samples")
	req.Samples = 2
	req.Noise = make([]float32, 64*2)
	_, err = m.Infer(context.Background(), req)
	assert.ErrorIs(t, err, models.ErrBadInput)
	assert.ErrorContains(t, err, "2 samples")
}

// TestInferBatchEqualsSolo runs requests of different lengths, samples
// and seeds together through the streamed tiny model and checks that each
// result is the request's lone result, bit for bit: reasoning ids (greedy
// and sampled), actions and trajectories of every sample. The requests'
// reasoning ends at different steps, so sequences drop out of the
// lockstep decode while others go on.
func TestInferBatchEqualsSolo(t *testing.T) {
	dir := tinyCheckpoint(t)
	be, err := cpu.New()
	require.NoError(t, err)
	defer be.Close()
	m, err := alpamayo.Load(be, dir, alpamayo.LoadOptions{Layering: hostLayering(be, tinyPlan(t, dir, -1), layering.Pipelined)})
	require.NoError(t, err)
	defer m.Close()

	reqs := []*alpamayo.Request{request(5), request(6), request(7), request(8)}
	reqs[0].MaxReasoningTokens = 6
	reqs[1].MaxReasoningTokens, reqs[1].Greedy = 2, true // drops out first
	reqs[2].MaxReasoningTokens, reqs[2].Samples = 9, 3
	reqs[3].MaxReasoningTokens, reqs[3].Greedy, reqs[3].Samples = 4, true, 2
	var want []*alpamayo.Result
	for _, r := range reqs {
		res, err := m.Infer(context.Background(), r)
		require.NoError(t, err)
		want = append(want, res)
	}
	lens := map[int]bool{}
	for _, w := range want {
		lens[len(w.ReasoningIDs)] = true
	}
	require.Greater(t, len(lens), 1, "the sequences end at different steps")

	got, errs := m.InferBatch(context.Background(), reqs)
	require.Len(t, got, len(reqs))
	for i := range reqs {
		require.NoError(t, errs[i], "request %d", i)
		assert.Equal(t, want[i].ReasoningIDs, got[i].ReasoningIDs, "request %d", i)
		assert.Equal(t, want[i].PromptIDs, got[i].PromptIDs, "request %d", i)
		assert.Equal(t, want[i].Normalized, got[i].Normalized, "request %d", i)
		assert.Equal(t, want[i].XYZ, got[i].XYZ, "request %d", i)
		assert.Equal(t, want[i].Rot, got[i].Rot, "request %d", i)
		assert.Equal(t, want[i].Samples, got[i].Samples, "request %d", i)
		require.NotNil(t, got[i].Layers)
	}
	// one executor run for the batch: each streamed unit a pass, once
	assert.Same(t, got[0].Layers, got[3].Layers)
	solo := turns(want[0].Layers)
	batch := turns(got[0].Layers)
	assert.Less(t, batch, 2*solo, "the batch streams each unit once a pass (%d turns; one request %d)", batch, solo)

	// a bad request fails alone
	bad := request(9)
	bad.HistXYZ = bad.HistXYZ[:3]
	got, errs = m.InferBatch(context.Background(), []*alpamayo.Request{reqs[0], bad, reqs[1]})
	assert.ErrorIs(t, errs[1], models.ErrBadInput)
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	assert.Equal(t, want[0].Normalized, got[0].Normalized)
	assert.Equal(t, want[1].ReasoningIDs, got[2].ReasoningIDs)
}

// turns counts the executor's turns that copied a unit into a slot.
func turns(p *layering.Profile) int {
	n := 0
	for _, tr := range p.Turns {
		if tr.Slot != layering.NoSlot {
			n++
		}
	}
	return n
}
