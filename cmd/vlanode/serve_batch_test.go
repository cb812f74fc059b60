package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// tinyBatchMinBudget is the minimum budget of a batch of the tiny model's
// requests, of samples trajectory samples each.
func tinyBatchMinBudget(t *testing.T, model string, batch, samples int) int64 {
	t.Helper()
	code, stdout, stderr := runCLI("plan", "--model", model, "--budget", "none", "--batch", fmt.Sprint(batch), "--samples", fmt.Sprint(samples), "--json")
	require.Equal(t, 0, code, stderr)
	var p struct {
		Min int64 `json:"min_budget_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &p))
	return p.Min
}

// batchRequests are four plan requests of different reasoning lengths,
// sampling and trajectory samples: their decodes end at different steps.
func batchRequests(t *testing.T) []msgs.InferRequest {
	frames, ego := tinyObservation(t)
	zero := 0.0
	var out []msgs.InferRequest
	for i, c := range []struct {
		tokens, samples int
		greedy          bool
	}{{5, 1, false}, {2, 2, true}, {6, 1, true}, {3, 2, false}} {
		seed := uint64(10 + i)
		r := msgs.InferRequest{ID: fmt.Sprintf("r%d", i), Frames: frames, EgoHistory: ego, MaxReasoningTokens: c.tokens,
			NumTrajSamples: c.samples, Seed: &seed}
		if c.greedy {
			r.Temperature = &zero
		}
		out = append(out, r)
	}
	return out
}

// askAll sends every request at once and returns the replies in order.
func askAll(t *testing.T, nc *nats.Conn, reqs []msgs.InferRequest) []*msgs.Plan {
	t.Helper()
	type reply struct {
		i    int
		plan *msgs.Plan
		err  error
	}
	ch := make(chan reply, len(reqs))
	for i, r := range reqs {
		r.V = msgs.Version
		raw, err := msgs.Marshal(r)
		require.NoError(t, err)
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		require.NoError(t, err)
		require.NoError(t, nc.PublishRequest("vla.infer", inbox, raw))
		go func() {
			defer sub.Unsubscribe()
			m, err := sub.NextMsg(120e9)
			if err != nil {
				ch <- reply{i: i, err: err}
				return
			}
			p, e, err := msgs.DecodeReply(m.Data)
			if err == nil && e != nil {
				err = fmt.Errorf("%s: %s", e.Err.Code, e.Err.Message)
			}
			ch <- reply{i: i, plan: p, err: err}
		}()
	}
	require.NoError(t, nc.Flush())
	out := make([]*msgs.Plan, len(reqs))
	for range reqs {
		r := <-ch
		require.NoError(t, r.err, "request %d", r.i)
		out[r.i] = r.plan
	}
	return out
}

// TestServeAlpamayoBatch serves the tiny model on the CPU backend within
// a budget that streams its units, with --max-batch: requests sent
// together are run as one batch and each gets the plan it gets alone (the
// same reasoning, trajectory, actions and samples, bit for bit), and a
// node whose budget holds batches of 2 runs 4 requests in two parts, each
// plan again the lone one.
func TestServeAlpamayoBatch(t *testing.T) {
	model := tinyAlpamayo(t)
	reqs := batchRequests(t)
	for _, tc := range []struct {
		name    string
		budget  int64
		batches int // the distinct batches the 4 requests run in
	}{
		{"one batch", tinyBatchMinBudget(t, model, 4, 2), 1},
		{"split by the budget", tinyBatchMinBudget(t, model, 2, 2), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _, stop := serving(t, alpamayoSpec(), "--model", model, "--device", "cpu", "--name", "batch",
				"--budget", fmt.Sprint(tc.budget), "--max-batch", "4", "--batch-wait", "1s", "--queue-bound", "8", "--samples", "2")
			nc, err := nats.Connect(url)
			require.NoError(t, err)
			defer nc.Close()
			ask := asker(t, nc)
			var solo []*msgs.Plan
			for _, r := range reqs {
				p, e := ask(r)
				require.Nil(t, e, "%+v", e)
				solo = append(solo, p)
			}
			assert.Len(t, solo[1].Samples, 1, "two trajectory samples")
			assert.Empty(t, solo[0].Samples)
			assert.NotEqual(t, solo[0].Reasoning, solo[2].Reasoning)

			got := askAll(t, nc, reqs)
			decodes := map[float64]int{}
			for i, p := range got {
				assert.Equal(t, solo[i].ID, p.ID)
				assert.Equal(t, solo[i].Reasoning, p.Reasoning, "request %d", i)
				assert.Equal(t, solo[i].Trajectory, p.Trajectory, "request %d", i)
				assert.Equal(t, solo[i].Actions, p.Actions, "request %d", i)
				assert.Equal(t, solo[i].Samples, p.Samples, "request %d", i)
				decodes[p.TimingMs.Decode]++
			}
			assert.Len(t, decodes, tc.batches, "requests of one batch share its stage times: %v", decodes)

			// more samples than the plan holds: unsupported, naming the field
			many := reqs[0]
			many.NumTrajSamples = 9
			_, e := ask(many)
			require.NotNil(t, e)
			assert.Equal(t, msgs.CodeUnsupported, e.Err.Code)
			assert.Contains(t, e.Err.Message, "num_traj_samples")
			require.NoError(t, stop())
		})
	}
}

// TestLoadCommand runs vlanode load against a node serving the tiny model
// in batches: every plan under load equals its solo plan, the report is
// written, and a node that cannot be found fails the command.
func TestLoadCommand(t *testing.T) {
	model := tinyAlpamayo(t)
	url, _, stop := serving(t, alpamayoSpec(), "--model", model, "--device", "cpu", "--name", "loaded",
		"--budget", fmt.Sprint(tinyBatchMinBudget(t, model, 3, 2)), "--max-batch", "3", "--batch-wait", "500ms", "--queue-bound", "8", "--samples", "2")
	out := filepath.Join(t.TempDir(), "load.json")
	code, stdout, stderr := runCLI("load", "--nats-url", url, "--node", "loaded", "--clients", "3", "--requests", "1",
		"--samples", "2", "--max-reasoning-tokens", "3", "--width", "192", "--height", "108", "--out", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "3 plans in")
	assert.Contains(t, stdout, "same reasoning as solo: 3 of 3; identical plans: 3")
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep struct {
		Plans     int     `json:"plans"`
		PlansPerS float64 `json:"plans_per_s"`
		Identical int     `json:"identical"`
		Results   []struct {
			Ratio float64 `json:"latency_over_solo"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(raw, &rep))
	assert.Equal(t, 3, rep.Plans)
	assert.Equal(t, 3, rep.Identical)
	assert.Positive(t, rep.PlansPerS)
	require.Len(t, rep.Results, 3)
	assert.Positive(t, rep.Results[0].Ratio)
	require.NoError(t, stop())

	code, _, stderr = runCLI("load", "--nats-url", url, "--node", "loaded", "--discover-timeout", "200ms")
	assert.Equal(t, 1, code)
	assert.NotEmpty(t, stderr)
}
