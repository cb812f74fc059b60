package node

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMicroServiceDiscovery(t *testing.T) {
	srv := runServer(t)
	startNode(t, srv, &testEngine{}, WithName("gpu-a"))
	startNode(t, srv, &testEngine{}, WithName("gpu-b"))
	nc := connect(t, srv.ClientURL())
	mustPlan(t, nc, InferSubject("gpu-b"), goodRequest("A", 1e9))

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	p, err := Discover(ctx, nc, "gpu-b")
	require.NoError(t, err)
	assert.Equal(t, "gpu-b", p.Node)
	assert.Equal(t, EngineInfo{
		Model: "test-vla", Cameras: testCameras, FramesPerCamera: testFrames, FramePeriod: testPeriod,
		EgoPoses: testEgoPoses, EgoPeriod: testPeriod,
	}, p.Info)
	assert.Equal(t, int64(1<<20), p.MaxPayload, "the test server's max_payload")

	// The micro service INFO lists both endpoints with their queue group.
	subj, err := micro.ControlSubject(micro.InfoVerb, ServiceName, p.ID)
	require.NoError(t, err)
	m, err := nc.Request(subj, nil, waitFor)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(m.Data, &info))
	subjects := map[string]string{}
	for _, e := range info.Endpoints {
		subjects[e.Subject] = e.QueueGroup
	}
	assert.Equal(t, map[string]string{AnyInferSubject: QueueGroup, InferSubject("gpu-b"): QueueGroup}, subjects)

	// STATS carries the node's counters.
	subj, err = micro.ControlSubject(micro.StatsVerb, ServiceName, p.ID)
	require.NoError(t, err)
	m, err = nc.Request(subj, nil, waitFor)
	require.NoError(t, err)
	var stats micro.Stats
	require.NoError(t, json.Unmarshal(m.Data, &stats))
	require.NotEmpty(t, stats.Endpoints)
	var counters map[string]uint64
	require.NoError(t, json.Unmarshal(stats.Endpoints[0].Data, &counters))
	assert.Equal(t, uint64(1), counters["plans"])

	// An unknown node: an error naming those that answered.
	ctx, cancel = context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	_, err = Discover(ctx, nc, "gpu-z")
	assert.ErrorContains(t, err, `no node "gpu-z" answered`)
	assert.ErrorContains(t, err, "gpu-a")
}
