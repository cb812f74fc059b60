package node

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// TestMicroStatsTrue sends a mix of requests (plans, refusals at once, a
// request superseded while it waits, one refused for a full queue) and
// checks that $SRV.STATS.vlanode counts every one when it is answered:
// requests, errors with the last one's text, and processing time from
// receipt to answer, which covers the time the engine was held.
func TestMicroStatsTrue(t *testing.T) {
	srv := runServer(t)
	eng := gated()
	n := startNode(t, srv, eng, WithName("gpu-a"), WithQueueBound(1))
	nc := connect(t, srv.ClientURL())
	subj := InferSubject("gpu-a")

	running := sendAsync(t, nc, subj, goodRequest("running", 1e9))
	eng.awaitStart(t, "running")
	first := sendAsync(t, nc, subj, latestRequest("latest-1"))
	eventually(t, func() bool { return n.sched.depth() == 1 }, "latest-1 queued")
	second := sendAsync(t, nc, subj, latestRequest("latest-2")) // supersedes latest-1
	_, e := first.one(t)
	require.NotNil(t, e)
	assert.Equal(t, msgs.CodeOverloaded, e.Err.Code)
	full := sendAsync(t, nc, subj, goodRequest("full", 2e9)) // the queue holds latest-2
	_, e = full.one(t)
	require.NotNil(t, e)

	// A request the node refuses at once carries the micro error headers.
	m, err := nc.Request(subj, []byte("not msgpack"), waitFor)
	require.NoError(t, err)
	assert.Equal(t, "400", m.Header.Get(micro.ErrorCodeHeader))
	assert.Contains(t, m.Header.Get(micro.ErrorHeader), "bad_request: ")

	const held = 150 * time.Millisecond
	time.Sleep(held) // the engine holds "running" at least this long
	eng.release()
	p, e := running.one(t)
	require.Nil(t, e)
	assert.Equal(t, "running", p.ID)
	_, e = second.one(t) // no frames were published: unsupported, before the engine
	require.NotNil(t, e)
	assert.Equal(t, msgs.CodeUnsupported, e.Err.Code)

	stats := microStats(t, nc)
	var requests, errs int
	var total time.Duration
	var last string
	for _, ep := range stats.Endpoints {
		requests += ep.NumRequests
		errs += ep.NumErrors
		total += ep.ProcessingTime
		if ep.Subject == subj {
			last = ep.LastError
			assert.Equal(t, ep.ProcessingTime/time.Duration(ep.NumRequests), ep.AverageProcessingTime)
		}
	}
	assert.Equal(t, 5, requests, "running, latest-1, latest-2, full, not msgpack")
	assert.Equal(t, 4, errs, "all but running")
	assert.GreaterOrEqual(t, total, 2*held, "running and latest-2 waited while the engine was held")
	assert.Contains(t, last, "unsupported: use_latest")

	// PING answers on all three forms of its subject with the same id.
	for _, id := range []string{"", stats.ID} {
		for _, name := range []string{"", ServiceName} {
			if name == "" && id != "" {
				continue
			}
			subj, err := micro.ControlSubject(micro.PingVerb, name, id)
			require.NoError(t, err)
			m, err := nc.Request(subj, nil, waitFor)
			require.NoError(t, err, subj)
			var ping micro.Ping
			require.NoError(t, json.Unmarshal(m.Data, &ping))
			assert.Equal(t, micro.PingResponseType, ping.Type)
			assert.Equal(t, stats.ID, ping.ID)
			assert.Equal(t, ServiceName, ping.Name)
		}
	}
}

func microStats(t *testing.T, nc *nats.Conn) micro.Stats {
	t.Helper()
	subj, err := micro.ControlSubject(micro.StatsVerb, ServiceName, "")
	require.NoError(t, err)
	m, err := nc.Request(subj, nil, waitFor)
	require.NoError(t, err)
	var stats micro.Stats
	require.NoError(t, json.Unmarshal(m.Data, &stats))
	assert.Equal(t, micro.StatsResponseType, stats.Type)
	return stats
}

// Every subscription the node makes holds at most its pending limits: the
// frames subscription and the infer endpoints 4 × max payload, the micro
// control subjects 1 MiB.
func TestPendingLimitsOnEverySubscription(t *testing.T) {
	srv := runServer(t)
	n := startNode(t, srv, &testEngine{}, WithName("gpu-a"), WithMaxPayload(1<<20))
	wantMsgs, wantBytes := n.pendingLimits()
	assert.Equal(t, 1<<16, wantMsgs)
	assert.Equal(t, 4<<20, wantBytes)
	subs := append([]*nats.Subscription{n.framesSub}, n.svc.subs...)
	require.Len(t, subs, 1+2+9, "frames, two infer endpoints, three verbs in three forms")
	for i, sub := range subs {
		msgs, bytes, err := sub.PendingLimits()
		require.NoError(t, err)
		if i < 3 {
			assert.Equal(t, [2]int{wantMsgs, wantBytes}, [2]int{msgs, bytes}, sub.Subject)
		} else {
			assert.True(t, strings.HasPrefix(sub.Subject, "$SRV."), sub.Subject)
			assert.Equal(t, [2]int{1024, 1 << 20}, [2]int{msgs, bytes}, sub.Subject)
		}
	}
	// The control subjects still answer.
	nc := connect(t, srv.ClientURL())
	m, err := nc.Request("$SRV.PING.vlanode", nil, waitFor)
	require.NoError(t, err)
	assert.Contains(t, string(m.Data), `"name":"vlanode"`)
}
