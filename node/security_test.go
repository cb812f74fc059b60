package node

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// permissionsConf is the documented permission setup (docs/security.md).
const permissionsConf = "../docs/nats-permissions.conf"

// The passwords of permissionsConf's users in these tests.
var testPasswords = map[string]string{"node": "node-pw", "robot": "robot-pw", "client": "client-pw"}

func setPasswords(t *testing.T) {
	for user, pw := range testPasswords {
		t.Setenv("VLA_"+strings.ToUpper(user)+"_PASSWORD", pw)
	}
}

// runPermissionServer runs a server from permissionsConf, as documented.
func runPermissionServer(t *testing.T) *server.Server {
	t.Helper()
	setPasswords(t)
	opts, err := server.ProcessConfigFile(permissionsConf)
	require.NoError(t, err)
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, true
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	s := natstest.RunServer(opts)
	t.Cleanup(s.Shutdown)
	return s
}

// asUser connects to url as one of permissionsConf's users; the errors the
// server reports on the connection (permission violations) go to errs.
func asUser(t *testing.T, url, user string, errs chan<- error) *nats.Conn {
	t.Helper()
	return connect(t, url, nats.UserInfo(user, testPasswords[user]), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errs != nil {
			select {
			case errs <- err:
			default:
			}
		}
	}))
}

// fakeClock is a node clock the test moves by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }
func newFakeClock(t time.Time) *fakeClock { c := &fakeClock{}; c.set(t); return c }

// flood drives a robot publishing both cameras at 10 Hz on robot and, every
// 400 ms, 32 frames a camera stamped an hour ahead on attacker (when not
// nil), advancing clock; after each step it asks for a use_latest plan on
// asker and checks that it was planned on the robot's newest frames.
func flood(t *testing.T, clock *fakeClock, robot, attacker, asker *nats.Conn) {
	t.Helper()
	start := clock.now()
	base := int64(1_800_000_000_000_000_000)
	for step := range 16 {
		clock.set(start.Add(time.Duration(step) * testPeriod))
		stamp := base + int64(step)*int64(testPeriod)
		for _, cam := range testCameras {
			f := rawFrame(cam, stamp)
			f.Seq = uint64(step + 1)
			require.NoError(t, robot.Publish(FramesSubject("gpu-a", cam), marshal(t, &f)))
		}
		require.NoError(t, robot.Flush())
		if attacker != nil && step%4 == 0 {
			for i := range 32 {
				for _, cam := range testCameras {
					f := rawFrame(cam, stamp+int64(time.Hour)+int64(i)*int64(testPeriod))
					require.NoError(t, attacker.Publish(FramesSubject("gpu-a", cam), marshal(t, &f)))
				}
			}
			attacker.Flush() // the server has them (or refused them) before the request
		}
		if step == 0 {
			continue
		}
		p := mustPlan(t, asker, InferSubject("gpu-a"), latestRequest(fmt.Sprint("latest-", step)))
		want := fmt.Sprintf("%d %d %d %d", stamp-int64(testPeriod), stamp, stamp-int64(testPeriod), stamp)
		require.Equal(t, want, p.Reasoning, "step %d: planned on the robot's frames", step)
	}
}

// Issue 34 item 3: a second connection publishing 32 frames stamped an hour
// ahead every 400 ms made every use_latest request unsupported. Without
// permissions, the frames reach the node and are dropped and counted.
func TestFramesFloodWithoutPermissions(t *testing.T) {
	srv := runServer(t)
	clock := newFakeClock(time.Unix(1_000_000, 0))
	n := startNode(t, srv, &testEngine{}, withClock(clock.now))
	robot := connect(t, srv.ClientURL())
	attacker := connect(t, srv.ClientURL())
	flood(t, clock, robot, attacker, robot)
	assert.Equal(t, uint64(4*32*len(testCameras)), counter(n, "frames_rejected_ahead"))
	assert.Equal(t, uint64(16*len(testCameras)), counter(n, "frames_received"))
}

// In the documented permission setup only the robot may publish frames:
// the same flood from a client's connection is refused by NATS and never
// reaches the node; clients and robots may request, the node may not.
func TestPermissionSetup(t *testing.T) {
	srv := runPermissionServer(t)
	clock := newFakeClock(time.Unix(1_000_000, 0))
	n := startNode(t, srv, &testEngine{}, withClock(clock.now), WithUserInfo("node", testPasswords["node"]), WithJobs(testJobs))
	robot := asUser(t, srv.ClientURL(), "robot", nil)
	violations := make(chan error, 1024)
	attacker := asUser(t, srv.ClientURL(), "client", violations)
	flood(t, clock, robot, attacker, attacker)
	require.NotEmpty(t, violations)
	assert.ErrorContains(t, <-violations, `Permissions Violation for Publish to "vla.gpu-a.frames.`)
	assert.Equal(t, uint64(0), counter(n, "frames_rejected"), "the node never saw the flood")
	assert.Equal(t, uint64(16*len(testCameras)), counter(n, "frames_received"))

	// The node's credentials cannot ask for plans.
	nodeErrs := make(chan error, 8)
	impostor := asUser(t, srv.ClientURL(), "node", nodeErrs)
	_, err := impostor.Request(AnyInferSubject, marshal(t, goodRequest("x", 1e9)), 200*time.Millisecond)
	require.Error(t, err)
	assert.ErrorContains(t, <-nodeErrs, `Permissions Violation for Publish to "vla.infer"`)

	// A client submits jobs and reads their answers.
	c := jobClient(t, attacker, "perm")
	submit(t, c, goodRequest(c.ID("1"), 1e9))
	p, e := waitJob(t, c, c.ID("1"))
	require.Nil(t, e)
	assert.Equal(t, "perm.1", p.ID)

	// Discovery works for a robot (vlanode replay runs as one).
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	peer, err := Discover(ctx, robot, "gpu-a")
	require.NoError(t, err)
	assert.Equal(t, "test-vla", peer.Info.Model)

	// A client reaches the node's control subject (the node subscribes to
	// it: its answer, forbidden without a token, comes back); the robot's
	// credentials cannot publish there.
	_, err = RequestControl(ctx, attacker, "gpu-a", &msgs.ControlRequest{Op: msgs.OpGetBudget})
	assert.ErrorContains(t, err, "forbidden: control is off on node gpu-a")
	robotErrs := make(chan error, 8)
	robotCtl := asUser(t, srv.ClientURL(), "robot", robotErrs)
	_, err = robotCtl.Request(ControlSubject("gpu-a"), marshal(t, &msgs.ControlRequest{Op: msgs.OpGetBudget}), 200*time.Millisecond)
	require.Error(t, err)
	assert.ErrorContains(t, <-robotErrs, `Permissions Violation for Publish to "vla.gpu-a.control"`)
}

// The embedded server takes the same file: serve --nats-config.
func TestEmbeddedPermissionSetup(t *testing.T) {
	setPasswords(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	opts := []Option{WithName("gpu-a"), WithEmbeddedServer(0, t.TempDir()), WithEmbeddedConfig(permissionsConf)}
	require.ErrorContains(t, CheckCredentials(ctx, append(opts, WithUserInfo("node", "wrong"))...), "Authorization Violation")
	require.NoError(t, CheckCredentials(ctx, append(opts, WithUserInfo("node", testPasswords["node"]))...))

	n, err := Start(ctx, &testEngine{}, append(opts, WithUserInfo("node", testPasswords["node"]), WithJobs(testJobs))...)
	require.NoError(t, err)
	defer n.Shutdown(ctx)
	violations := make(chan error, 8)
	client := asUser(t, n.URL(), "client", violations)
	require.NoError(t, client.Publish(FramesSubject("gpu-a", "left"), marshal(t, ptr(rawFrame("left", 1)))))
	require.NoError(t, client.Flush())
	select {
	case err := <-violations:
		assert.ErrorContains(t, err, `Permissions Violation for Publish to "vla.gpu-a.frames.left"`)
	case <-time.After(waitFor):
		t.Fatal("no permission violation")
	}
	p, e := request(t, client, InferSubject("gpu-a"), goodRequest("c", 1e9))
	require.Nil(t, e)
	assert.Equal(t, "c", p.ID)
}

func ptr[T any](v T) *T { return &v }
