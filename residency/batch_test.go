package residency_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
)

func batchPlan(t *testing.T, a *residency.Arch, p *residency.Profile, budget int64, batch, samples int, opts residency.Options) (*residency.Plan, error) {
	t.Helper()
	w := placement.StandardWorkload().WithBatch(batch, samples)
	return residency.NewPlan(a, alpamayo.PlanUnits(a, w), w, p, budget, opts)
}

// TestBatchFixedCosts: the KV cache is one per sequence, with each
// sample's action tokens; the vision and prefill activations are every
// sequence's own over one shared scratch; the decode stage adds a pass over every sample's expert
// rows; and the minimum budget grows with the batch.
func TestBatchFixedCosts(t *testing.T) {
	a := alpamayo10B(t)
	p := shipped(t)
	one, err := batchPlan(t, a, p, 0, 1, 1, residency.Options{Exact: true})
	require.NoError(t, err)
	four, err := batchPlan(t, a, p, 0, 4, 1, residency.Options{Exact: true})
	require.NoError(t, err)
	six, err := batchPlan(t, a, p, 0, 1, 6, residency.Options{Exact: true})
	require.NoError(t, err)
	stage := func(pl *residency.Plan, s placement.Stage) residency.StagePlan {
		for _, sp := range pl.Stages {
			if sp.Stage == s {
				return sp
			}
		}
		t.Fatalf("no stage %s", s)
		return residency.StagePlan{}
	}
	kv := func(pl *residency.Plan) int64 {
		return stage(pl, placement.StageDecode).Bytes[residency.PurposeKV]
	}
	assert.Equal(t, 4*kv(one), kv(four), "a KV cache a sequence")
	assert.Greater(t, kv(six), kv(one), "room for 6 samples' action tokens")
	assert.Less(t, kv(six), 2*kv(one))
	for _, s := range []placement.Stage{placement.StageVision, placement.StagePrefill} {
		act1, act4 := stage(one, s).Bytes[residency.PurposeActivations], stage(four, s).Bytes[residency.PurposeActivations]
		assert.Greater(t, act4, act1, "%s: every sequence's pass is live", s)
		assert.Less(t, act4, 3*act1, "%s: over one shared scratch", s)
	}
	assert.Greater(t, stage(six, placement.StageDiffusion).Bytes[residency.PurposeActivations],
		stage(one, placement.StageDiffusion).Bytes[residency.PurposeActivations], "the wide expert pass's scratch")
	assert.Greater(t, four.MinBudgetBytes, one.MinBudgetBytes)
	assert.Greater(t, six.MinBudgetBytes, one.MinBudgetBytes)
	assert.Equal(t, 6*64, stage(six, placement.StageDiffusion).Rows, "the expert's rows: every sample")
}

// TestBatchPrediction: at 8 GiB a batch of 4 streams each unit once a
// pass, so it predicts less than 4 lone inferences and more than one; it
// plans no CPU shares (a batch's turn computes each sequence in turn).
func TestBatchPrediction(t *testing.T) {
	a := alpamayo10B(t)
	p := withCPU(t)
	const budget = 8 << 30
	one, err := batchPlan(t, a, p, budget, 1, 1, residency.Options{Exact: true})
	require.NoError(t, err)
	four, err := batchPlan(t, a, p, budget, 4, 1, residency.Options{})
	require.NoError(t, err)
	for _, s := range four.Stages {
		assert.Zero(t, s.CPUShare, "%s: no CPU share in a batch", s.Stage)
	}
	checkAccounts(t, four)
	assert.Greater(t, four.TotalMs, one.TotalMs)
	assert.Less(t, four.TotalMs, 2*one.TotalMs, "one stream of weights for four requests")
	six, err := batchPlan(t, a, p, 16<<30, 1, 6, residency.Options{Exact: true})
	require.NoError(t, err)
	lone, err := batchPlan(t, a, p, 16<<30, 1, 1, residency.Options{Exact: true})
	require.NoError(t, err)
	assert.Less(t, six.TotalMs, 1.3*lone.TotalMs, "6 samples at 16 GiB")
}

// TestLargestBatch: the largest batch fits and one more does not; an
// unlimited budget takes the limit; a budget below one request's minimum
// holds none.
func TestLargestBatch(t *testing.T) {
	a := alpamayo10B(t)
	p := shipped(t)
	units := func(w placement.Workload) []placement.Unit { return alpamayo.PlanUnits(a, w) }
	w := placement.StandardWorkload().WithBatch(0, 2)
	opts := residency.Options{Exact: true}
	three, err := batchPlan(t, a, p, 0, 3, 2, opts)
	require.NoError(t, err)
	n, err := residency.LargestBatch(a, units, w, p, three.MinBudgetBytes, opts, 16)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	n, err = residency.LargestBatch(a, units, w, p, 8<<30, opts, 16)
	require.NoError(t, err)
	_, err = batchPlan(t, a, p, 8<<30, n, 2, opts)
	require.NoError(t, err, "the largest batch plans")
	_, err = batchPlan(t, a, p, 8<<30, n+1, 2, opts)
	assert.ErrorIs(t, err, residency.ErrBudgetTooSmall, "one more does not")
	n, err = residency.LargestBatch(a, units, w, p, 0, opts, 16)
	require.NoError(t, err)
	assert.Equal(t, 16, n)
	n, err = residency.LargestBatch(a, units, w, p, 1<<30, opts, 16)
	require.NoError(t, err)
	assert.Zero(t, n)
	_, err = residency.LargestBatch(a, units, w, p, 1<<30, opts, 0)
	assert.Error(t, err)
}
