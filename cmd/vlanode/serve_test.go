package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
	"vlanode/node"
)

// cliEngine is a deterministic engine for command tests: two cameras, two
// frames each, no ego poses.
type cliEngine struct{ budget uint64 }

func (e cliEngine) Info() node.EngineInfo {
	return node.EngineInfo{Model: "cli-test", Cameras: []string{"front", "rear"}, FramesPerCamera: 2,
		FramePeriod: 100 * time.Millisecond, BudgetBytes: e.budget}
}

func (cliEngine) Infer(context.Context, *node.Observation) (*msgs.Plan, error) {
	return &msgs.Plan{Reasoning: "ok"}, nil
}

// cliSpec builds cliEngine and remembers what serve resolved.
func cliSpec(got *engineEnv, modelFlag *string) engineSpec {
	return engineSpec{
		flags: func(fs *flag.FlagSet) { fs.StringVar(modelFlag, "model", "", "model directory") },
		build: func(_ context.Context, env engineEnv) (node.Engine, error) {
			*got = env
			return cliEngine{budget: env.BudgetBytes}, nil
		},
	}
}

// syncBuffer is an output safe for a command running in a goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serving runs serve with spec in the background and returns the NATS URL
// it prints, and a function that stops it (like SIGTERM) and returns its
// error.
func serving(t *testing.T, spec engineSpec, args ...string) (string, *syncBuffer, func() error) {
	t.Helper()
	url, stdout, _, stop := servingLogged(t, spec, args...)
	return url, stdout, stop
}

// servingLogged is serving that also returns serve's stderr, its log.
func servingLogged(t *testing.T, spec engineSpec, args ...string) (string, *syncBuffer, *syncBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	args = append([]string{"--data-dir", t.TempDir(), "--gpu", "-1"}, args...)
	if !slices.Contains(args, "--listen") && !slices.Contains(args, "--nats-url") {
		args = append([]string{"--port", "0"}, args...)
	}
	go func() { done <- serveCommand(spec)(ctx, args, &stdout, &stderr) }()
	re := regexp.MustCompile(`on (nats://\S+) `)
	var url string
	deadline := time.Now().Add(60 * time.Second) // loading a model on a busy 2-core machine takes seconds
	for url == "" {
		if m := re.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("serve returned %v; stderr: %s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve did not start; stderr: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(10 * time.Second):
				stopErr = fmt.Errorf("serve did not stop")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { stop() })
	return url, &stdout, &stderr, stop
}

func TestServeNoEngine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := serveCommand(engineSpec{})(context.Background(), []string{"--data-dir", t.TempDir(), "--port", "0"}, &stdout, &stderr)
	assert.ErrorContains(t, err, "no model engine yet")
}

func TestServeNeedsModel(t *testing.T) {
	code, _, stderr := runCLI("serve", "--data-dir", t.TempDir(), "--port", "0", "--gpu", "-1")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--model is required")
}

func TestServeFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--max-payload", "8XB"}, `"8XB" is not a size`},
		{[]string{"--max-payload", "65MiB"}, "at most 64MiB"},
		{[]string{"--queue-bound", "0"}, "--queue-bound must be at least 1"},
		{[]string{"--budget", "lots"}, "want auto, unlimited or a size"},
		{[]string{"--name", "a.b"}, "not a single NATS subject token"},
		{[]string{"--port", "70000"}, "out of range"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--token", "t", "--user", "u"}, "give one of"},
		{[]string{"--nkey", "u.nk"}, "need an external server"},
		{[]string{"--tls-ca", "ca.pem"}, "TLS needs an external server"},
		{[]string{"--nats-url", "nats://x", "--tls-cert", "c.pem"}, "needs its key"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--listen", "0.0.0.0:4222"}, "reaches beyond this machine"},
		{[]string{"--listen", "4222"}, "want HOST:PORT"},
		{[]string{"--listen", "127.0.0.1:1", "--port", "2"}, "not both"},
		{[]string{"--nats-url", "nats://bus:4222", "--listen", "127.0.0.1:4222"}, "for the embedded server"},
		{[]string{"--max-frame-skew", "-1s"}, "must not be negative"},
		{[]string{"--nats-url", "nats://x", "--nats-config", "n.conf"}, "--nats-config configures the embedded server"},
		{[]string{"--job-ack-wait", "10ms"}, "at least 100ms"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(append([]string{"serve"}, c.args...)...)
			assert.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, c.want)
		})
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "8MiB": 8 << 20, "16G": 16e9, "1.5GiB": 3 << 29, "512KiB": 512 << 10, "10B": 10, "2 MiB": 2 << 20} {
		got, err := parseBytes(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "MiB", "8XB", "1e30"} {
		_, err := parseBytes(in)
		assert.Error(t, err, in)
	}
	var b budgetFlag
	require.NoError(t, b.Set("auto"))
	assert.Equal(t, "auto", b.String())
	require.NoError(t, b.Set("8GiB"))
	assert.Equal(t, int64(8<<30), b.bytes)
	require.NoError(t, b.Set("unlimited"))
	assert.Equal(t, "unlimited", b.String())
}

func TestServeRunsAndStops(t *testing.T) {
	var env engineEnv
	var model string
	url, stdout, stop := serving(t, cliSpec(&env, &model), "--name", "cli", "--model", "/m", "--budget", "8GiB", "--metrics-addr", "127.0.0.1:0", "--user", "robot", "--password", "pw")
	assert.Equal(t, "/m", model, "the engine's own flags are parsed")
	assert.Equal(t, uint64(8<<30), env.BudgetBytes)
	assert.Nil(t, env.Telemetry, "--gpu -1")
	assert.Contains(t, stdout.String(), "/metrics")

	_, err := nats.Connect(url)
	assert.ErrorContains(t, err, "Authorization Violation", "the embedded server takes --user/--password")
	nc, err := nats.Connect(url, nats.UserInfo("robot", "pw"))
	require.NoError(t, err)
	defer nc.Close()
	req, err := msgs.Marshal(&msgs.InferRequest{ID: "x", UseLatest: true})
	require.NoError(t, err)
	m, err := nc.Request(node.InferSubject("cli"), req, 10*time.Second)
	require.NoError(t, err)
	_, e, err := msgs.DecodeReply(m.Data)
	require.NoError(t, err)
	require.NotNil(t, e)
	assert.Equal(t, msgs.CodeUnsupported, e.Err.Code, "no frames yet: %s", e.Err.Message)

	require.NoError(t, stop(), "serve exits cleanly when its context ends (SIGTERM)")
}

func TestServeBudgetAutoNeedsGPU(t *testing.T) {
	var env engineEnv
	var model string
	var stdout, stderr bytes.Buffer
	err := serveCommand(cliSpec(&env, &model))(context.Background(),
		[]string{"--budget", "auto", "--gpu", "-1", "--port", "0", "--data-dir", t.TempDir()}, &stdout, &stderr)
	assert.ErrorContains(t, err, "--budget auto: gpu: --budget auto needs GPU telemetry")
}

// TestNATSURLFromEnvironment: serve and the client commands read $NATS_URL
// when --nats-url is not given; serve's embedded-server flags keep it
// embedded.
func TestNATSURLFromEnvironment(t *testing.T) {
	t.Setenv("NATS_URL", "nats://bus:4222")
	var stderr bytes.Buffer
	c, err := parseServe([]string{"--gpu", "-1"}, &stderr, engineSpec{})
	require.NoError(t, err)
	assert.Equal(t, "nats://bus:4222", c.nats.url)
	assert.True(t, c.nats.fromEnv)
	c, err = parseServe([]string{"--gpu", "-1", "--listen", "127.0.0.1:0"}, &stderr, engineSpec{})
	require.NoError(t, err)
	assert.Equal(t, "", c.nats.url, "--listen: the embedded server")
	c, err = parseServe([]string{"--gpu", "-1", "--nats-url", "nats://other:4222"}, &stderr, engineSpec{})
	require.NoError(t, err)
	assert.Equal(t, "nats://other:4222", c.nats.url, "the flag wins")

	var f natsFlags
	assert.Equal(t, "nats://bus:4222", f.clientURL())
	t.Setenv("NATS_URL", "")
	f = natsFlags{}
	assert.Equal(t, defaultNATSURL, f.clientURL())
}

// TestServeHTTPAndListen serves with --listen and --http-addr: the NATS
// URL is the listen address and the HTTP API answers.
func TestServeHTTPAndListen(t *testing.T) {
	var env engineEnv
	var model string
	url, stdout, stop := serving(t, cliSpec(&env, &model), "--name", "h", "--model", "/m", "--listen", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	assert.Contains(t, url, "nats://127.0.0.1:")
	m := regexp.MustCompile(`HTTP API on (http://\S+) `).FindStringSubmatch(stdout.String())
	require.NotNil(t, m, stdout.String())
	resp, err := http.Get(m[1] + "/v1/models")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	var models struct {
		Data []struct {
			ID          string   `json:"id"`
			CameraOrder []string `json:"camera_order"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&models))
	require.Len(t, models.Data, 1)
	assert.Equal(t, "cli-test", models.Data[0].ID)
	assert.Equal(t, []string{"front", "rear"}, models.Data[0].CameraOrder)
	require.NoError(t, stop())
}

// Issue 34 item 6: bad NATS credentials were found only after the model
// had loaded. serve connects first.
func TestServeChecksCredentialsFirst(t *testing.T) {
	opts := natstest.DefaultTestOptions
	opts.Port, opts.Username, opts.Password = -1, "robot", "pw"
	srv := natstest.RunServer(&opts)
	defer srv.Shutdown()
	built := false
	spec := engineSpec{build: func(context.Context, engineEnv) (node.Engine, error) { built = true; return cliEngine{}, nil }}
	var stdout, stderr bytes.Buffer
	err := serveCommand(spec)(context.Background(), []string{"--gpu", "-1", "--nats-url", srv.ClientURL(), "--user", "robot", "--password", "wrong"}, &stdout, &stderr)
	assert.ErrorContains(t, err, "Authorization Violation")
	assert.False(t, built, "the model was not loaded")

	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("authorization { users = [{user = node, password = right}] }\n"), 0o600))
	err = serveCommand(spec)(context.Background(), []string{"--gpu", "-1", "--port", "0", "--data-dir", t.TempDir(),
		"--nats-config", conf, "--user", "node", "--password", "wrong"}, &stdout, &stderr)
	assert.ErrorContains(t, err, "Authorization Violation")
	assert.False(t, built, "the model was not loaded")
}

// stuckEngine never returns from Infer until released, whatever its
// context says; Close records that it was called.
type stuckEngine struct {
	cliEngine
	started, release chan struct{}
	closed           *atomic.Bool
}

func (e stuckEngine) Infer(context.Context, *node.Observation) (*msgs.Plan, error) {
	close(e.started)
	<-e.release
	return nil, fmt.Errorf("released")
}

func (e stuckEngine) Close() error { e.closed.Store(true); return nil }

// SIGTERM with an inference that does not stop: serve exits once the grace
// period (and half a second for the cancelled inference) is over, and
// leaves the engine it may still be using open.
func TestServeExitsWithStuckEngine(t *testing.T) {
	e := stuckEngine{started: make(chan struct{}), release: make(chan struct{}), closed: new(atomic.Bool)}
	defer close(e.release)
	spec := engineSpec{build: func(context.Context, engineEnv) (node.Engine, error) { return e, nil }}
	url, _, stop := serving(t, spec, "--shutdown-grace", "100ms")
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	req := &msgs.InferRequest{ID: "r"}
	for _, cam := range []string{"front", "rear"} {
		for k := range 2 {
			req.Frames = append(req.Frames, msgs.Frame{Camera: cam, StampNs: int64(k) * 100e6, Encoding: msgs.EncodingMono8, Width: 1, Height: 1, Data: []byte{1}})
		}
	}
	raw, err := msgs.Marshal(req)
	require.NoError(t, err)
	require.NoError(t, nc.PublishRequest("vla.infer", nc.NewInbox(), raw))
	select {
	case <-e.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the inference did not start")
	}
	err = stop()
	assert.ErrorIs(t, err, node.ErrInferenceAbandoned)
	assert.False(t, e.closed.Load(), "an engine still in use is not closed")
}
