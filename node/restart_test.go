package node

import (
	"net"
	"testing"

	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerRestart(t *testing.T) {
	srv, opts := runServerOpts(t)
	opts.Port = srv.Addr().(*net.TCPAddr).Port
	e := gated()
	n := startNode(t, srv, e)
	nc := connect(t, srv.ClientURL())
	subject := InferSubject("gpu-a")

	a := sendAsync(t, nc, subject, goodRequest("A", 1e9))
	e.awaitStart(t, "A")
	b := sendAsync(t, nc, subject, goodRequest("B", 1e9))
	eventually(t, func() bool { return n.sched.depth() == 1 }, "B queued")

	// The server goes away with A running and B waiting...
	srv.Shutdown()
	srv.WaitForShutdown()
	eventually(t, func() bool { return !n.nc.IsConnected() && !nc.IsConnected() }, "both disconnected")

	// ...and comes back on the same port and store.
	restarted := natstest.RunServer(opts)
	t.Cleanup(restarted.Shutdown)
	eventually(t, func() bool { return n.nc.IsConnected() && nc.IsConnected() }, "both reconnected")
	require.NoError(t, nc.Flush()) // the client's reply subscriptions are back on the server

	for _, w := range []struct {
		id string
		r  *replies
	}{{"A", a}, {"B", b}} {
		if w.id == "B" {
			e.awaitStart(t, "B")
		}
		e.release()
		p, er := w.r.one(t)
		require.Nil(t, er)
		assert.Equal(t, w.id, p.ID, "a request accepted before the restart is answered after it")
		w.r.none(t, nc)
	}

	// New requests are served: the node's subscriptions came back too.
	c := sendAsync(t, nc, subject, goodRequest("C", 1e9))
	e.awaitStart(t, "C")
	e.release()
	p, er := c.one(t)
	require.Nil(t, er)
	assert.Equal(t, "C", p.ID)
	any := sendAsync(t, nc, AnyInferSubject, goodRequest("D", 1e9))
	e.awaitStart(t, "D")
	e.release()
	p, er = any.one(t)
	require.Nil(t, er)
	assert.Equal(t, "D", p.ID)
}
