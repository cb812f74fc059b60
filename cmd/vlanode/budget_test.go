package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
	"vlanode/node"
)

// rebudgetEngine is cliEngine whose budget can change (node.Rebudgeter):
// budgets under 1 GiB are below its minimum.
type rebudgetEngine struct {
	mu     sync.Mutex
	budget uint64
}

func (e *rebudgetEngine) Info() node.EngineInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	return cliEngine{budget: e.budget}.Info()
}

func (e *rebudgetEngine) Infer(ctx context.Context, obs *node.Observation) (*msgs.Plan, error) {
	return cliEngine{}.Infer(ctx, obs)
}

func (e *rebudgetEngine) Rebudget(_ context.Context, b uint64) error {
	if b != 0 && b < 1<<30 {
		return fmt.Errorf("%w: below the minimum of 1 GiB", node.ErrUnsupported)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.budget = b
	return nil
}

func (e *rebudgetEngine) current() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.budget
}

// rebudgetSpec builds a rebudgetEngine and hands it to the test.
func rebudgetSpec(got **rebudgetEngine) engineSpec {
	return engineSpec{
		flags: func(fs *flag.FlagSet) { fs.String("model", "", "model directory") },
		build: func(_ context.Context, env engineEnv) (node.Engine, error) {
			*got = &rebudgetEngine{budget: env.BudgetBytes}
			return *got, nil
		},
	}
}

// TestServeBudgetControlAndSIGHUP: serve reads its budget from
// --budget-file, the budget command changes it with the control token and
// is refused without it, SIGHUP re-reads the file, and a file that does
// not parse, or a budget below the minimum, leaves the budget as it was.
func TestServeBudgetControlAndSIGHUP(t *testing.T) {
	file := filepath.Join(t.TempDir(), "budget")
	require.NoError(t, os.WriteFile(file, []byte("# the node's share of the GPU\n8GiB\n"), 0o644))
	var eng *rebudgetEngine
	url, _, logs, stop := servingLogged(t, rebudgetSpec(&eng), "--name", "cli", "--budget-file", file, "--control-token", "tok")
	assert.Equal(t, uint64(8<<30), eng.current())

	code, stdout, stderr := runCLI("budget", "--nats-url", url, "--node", "cli", "--set", "4GiB", "--control-token", "tok")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "node cli: budget 4,294,967,296 bytes (4.29 GB) (was 8,589,934,592 bytes (8.59 GB))")
	assert.Equal(t, uint64(4<<30), eng.current())

	code, _, stderr = runCLI("budget", "--nats-url", url, "--node", "cli", "--set", "2GiB")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "forbidden: wrong or missing control token")
	code, _, stderr = runCLI("budget", "--nats-url", url, "--node", "cli", "--set", "0.5GiB", "--control-token", "tok")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "unsupported: re-planning for a budget of 0.5 GiB: unsupported: below the minimum of 1 GiB (serving within 4 GiB)")
	code, _, stderr = runCLI("budget", "--nats-url", url, "--node", "cli", "--set", "lots", "--control-token", "tok")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--set: budget: want auto, unlimited or a size")
	code, _, stderr = runCLI("budget", "--nats-url", url, "--node", "cli", "--set", "auto", "--control-token", "tok")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "budget auto needs the GPU's free memory from NVML, and this node has no GPU telemetry")
	assert.Equal(t, uint64(4<<30), eng.current())

	// SIGHUP: the file again.
	require.NoError(t, os.WriteFile(file, []byte("2GiB\n"), 0o644))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	waitUntil(t, func() bool { return eng.current() == 2<<30 }, "SIGHUP applied the file")
	require.NoError(t, os.WriteFile(file, []byte("plenty\n"), 0o644))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	// The next file only once the node has read this one (a busy machine
	// may take its time).
	waitUntil(t, func() bool { return strings.Contains(logs.String(), "SIGHUP: the budget stays") }, "SIGHUP read the bad file")
	require.NoError(t, os.WriteFile(file, []byte("unlimited\n"), 0o644))
	assert.Equal(t, uint64(2<<30), eng.current(), "a file that does not parse changes nothing")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	waitUntil(t, func() bool { return eng.current() == 0 }, "SIGHUP applied unlimited")

	code, stdout, stderr = runCLI("budget", "--nats-url", url, "--node", "cli", "--control-token", "tok", "--json")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, `"BudgetBytes":0`)

	// Plans carry the budget they ran within.
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	code, _, stderr = runCLI("budget", "--nats-url", url, "--node", "cli", "--set", "3GiB", "--control-token", "tok")
	require.Equal(t, 0, code, stderr)
	req, err := msgs.Marshal(&msgs.InferRequest{ID: "p", Frames: cliFrames(), EgoHistory: []msgs.EgoPose{}})
	require.NoError(t, err)
	m, err := nc.Request("vla.cli.infer", req, 10*time.Second)
	require.NoError(t, err)
	p, e, err := msgs.DecodeReply(m.Data)
	require.NoError(t, err)
	require.Nil(t, e)
	assert.Equal(t, uint64(3<<30), p.BudgetBytes)
	require.NoError(t, stop())
}

// cliFrames are the four frames cliEngine takes.
func cliFrames() []msgs.Frame {
	var fs []msgs.Frame
	for _, c := range []string{"front", "rear"} {
		for k := range 2 {
			fs = append(fs, msgs.Frame{Camera: c, StampNs: int64(k) * 100e6, Encoding: msgs.EncodingMono8, Width: 1, Height: 1, Data: []byte{1}})
		}
	}
	return fs
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out: %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServeBudgetFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "budget")
	var env engineEnv
	var model string
	for _, c := range []struct {
		file string
		args []string
		want string
	}{
		{"8GiB", []string{"--budget", "4GiB"}, "give --budget or --budget-file, not both"},
		{"# nothing\n\n", nil, "no budget in it"},
		{"eight", nil, `budget: want auto, unlimited or a size: residency: budget "eight"`},
		{"8GiB", []string{"--budget-auto-interval", "1ms"}, "--budget-auto-interval must be at least 10ms"},
	} {
		require.NoError(t, os.WriteFile(file, []byte(c.file), 0o644))
		_, err := parseServe(append([]string{"--budget-file", file}, c.args...), &syncBuffer{}, cliSpec(&env, &model))
		assert.ErrorContains(t, err, c.want)
	}
	_, err := parseServe([]string{"--budget-file", filepath.Join(t.TempDir(), "missing")}, &syncBuffer{}, cliSpec(&env, &model))
	assert.ErrorContains(t, err, "no such file")
	require.NoError(t, os.WriteFile(file, []byte("auto"), 0o644))
	c, err := parseServe([]string{"--budget-file", file}, &syncBuffer{}, cliSpec(&env, &model))
	require.NoError(t, err)
	assert.True(t, c.budget.auto)
}
