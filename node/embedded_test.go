package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startEmbeddedNode starts a node with its own server.
func startEmbeddedNode(t *testing.T, opts ...Option) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	n, err := Start(ctx, &testEngine{}, append([]Option{WithName("solo")}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	return n
}

func TestEmbeddedServer(t *testing.T) {
	dir := t.TempDir()
	n := startEmbeddedNode(t, WithEmbeddedServer(0, dir), WithMaxPayload(2<<20))
	nc := connect(t, n.URL())
	assert.Contains(t, n.URL(), "127.0.0.1:")
	assert.Equal(t, int64(2<<20), nc.MaxPayload(), "--max-payload sets the embedded server's max_payload")
	assert.Equal(t, int64(2<<20), n.MaxPayload())
	mustPlan(t, nc, InferSubject("solo"), goodRequest("A", 1e9))

	// JetStream is on, with its store in the data directory.
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "probe", Subjects: []string{"probe.>"}})
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "jetstream"))
	assert.NoError(t, err, "the JetStream store is under the data directory")

	// Shutdown stops the server too.
	require.NoError(t, n.Shutdown(context.Background()))
	eventually(t, func() bool { return !nc.IsConnected() }, "the embedded server gone")
}

func TestEmbeddedServerTemporaryStoreAndAuth(t *testing.T) {
	n := startEmbeddedNode(t, WithToken("s3cret"))
	store := n.emb.tempDir
	require.NotEmpty(t, store)
	_, err := nats.Connect(n.URL())
	assert.ErrorContains(t, err, "Authorization Violation", "the embedded server requires the token")
	nc := connect(t, n.URL(), nats.Token("s3cret"))
	mustPlan(t, nc, AnyInferSubject, goodRequest("A", 1e9))
	require.NoError(t, n.Shutdown(context.Background()))
	_, err = os.Stat(store)
	assert.True(t, os.IsNotExist(err), "the temporary store is removed")
}

func TestEmbeddedPortTaken(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err := Start(ctx, &testEngine{}, WithName("x"), WithEmbeddedServer(tcpPort(srv), ""))
	assert.ErrorContains(t, err, "embedded server")
	assert.ErrorContains(t, err, "address already in use")
}

// TestEmbeddedListenBeyondLoopback: every interface needs credentials, or
// --insecure-no-auth; the node's own URL stays on loopback.
func TestEmbeddedListenBeyondLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err := Start(ctx, &testEngine{}, WithName("open"), WithEmbeddedServer(0, ""), WithListenHost("0.0.0.0", false))
	assert.ErrorContains(t, err, "listen on 0.0.0.0 without authentication")
	assert.ErrorContains(t, err, "--insecure-no-auth")

	n := startEmbeddedNode(t, WithEmbeddedServer(0, ""), WithListenHost("0.0.0.0", false), WithToken("s3cret"))
	assert.Contains(t, n.URL(), "nats://127.0.0.1:")
	assert.Contains(t, n.ListenAddr(), "0.0.0.0:")
	nc := connect(t, n.URL(), nats.Token("s3cret"))
	mustPlan(t, nc, AnyInferSubject, goodRequest("A", 1e9))

	open := startEmbeddedNode(t, WithEmbeddedServer(0, ""), WithListenHost("0.0.0.0", true))
	mustPlan(t, connect(t, open.URL()), InferSubject("solo"), goodRequest("B", 1e9))
}

func TestLoopback(t *testing.T) {
	for host, want := range map[string]bool{"": true, "localhost": true, "127.0.0.1": true, "::1": true, "127.0.0.2": true,
		"0.0.0.0": false, "::": false, "10.0.0.5": false, "robot.local": false} {
		assert.Equal(t, want, Loopback(host), host)
	}
}
