package node

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

func TestMetricsEndpoint(t *testing.T) {
	srv := runServer(t)
	n := startNode(t, srv, &testEngine{}, WithMetricsAddr("127.0.0.1:0"), WithGPU(&fakeGPU{}))
	nc := connect(t, srv.ClientURL())
	mustPlan(t, nc, InferSubject("gpu-a"), goodRequest("A", 1e9))
	p, e := requestRaw(t, nc, InferSubject("gpu-a"), []byte{0xc1})
	wantError(t, p, e, msgs.CodeBadRequest)
	n.Status() // reads the GPU

	resp, err := http.Get("http://" + n.MetricsAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Type"), "version=0.0.4")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range []string{
		"vlanode_requests_total 2",
		"vlanode_plans_total 1",
		`vlanode_errors_total{code="bad_request"} 1`,
		`vlanode_errors_total{code="overloaded"} 0`,
		`vlanode_shed_total{reason="queue_full"} 0`,
		`vlanode_frames_received_total{camera="left"} 0`,
		"vlanode_queue_depth 0",
		`vlanode_stage_seconds_count{stage="total"} 1`,
		`vlanode_stage_seconds_count{stage="unmarshal"} 1`,
		`vlanode_stage_seconds_count{stage="engine"} 1`,
		`vlanode_stage_seconds_count{stage="reply"} 1`,
		`vlanode_stage_seconds_sum{stage="prefill"} 0.003`,
		"vlanode_vram_peak_bytes 1.073741824e+09",
		"vlanode_budget_bytes 8.589934592e+09",
		"vlanode_gpu_memory_free_bytes 1.3958643712e+11",
		"vlanode_gpu_temperature_celsius 40",
	} {
		assert.Contains(t, string(body), line+"\n")
	}
}
