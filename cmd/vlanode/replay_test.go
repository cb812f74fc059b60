package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeCLIClip writes a clip folder for cliEngine: n frames a camera, 100 ms
// apart.
func writeCLIClip(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var img bytes.Buffer
	require.NoError(t, png.Encode(&img, image.NewGray(image.Rect(0, 0, 4, 3))))
	for _, cam := range []string{"front", "rear"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, cam), 0o755))
		for k := range n {
			require.NoError(t, os.WriteFile(filepath.Join(dir, cam, fmt.Sprintf("%d.png", 1_000_000_000+k*100_000_000)), img.Bytes(), 0o644))
		}
	}
	return dir
}

func runCtx(ctx context.Context, args ...string) (int, string, string) {
	var o, e bytes.Buffer
	code := run(ctx, args, &o, &e)
	return code, o.String(), e.String()
}

func TestRecordAndReplayCommands(t *testing.T) {
	var env engineEnv
	var model string
	url, _, _ := serving(t, cliSpec(&env, &model), "--name", "cli")

	// Record in the background until cancelled.
	rctx, stopRecord := context.WithCancel(context.Background())
	var recOut, recErr syncBuffer
	recDone := make(chan int, 1)
	go func() {
		recDone <- run(rctx, []string{"record", "--nats-url", url, "--node", "cli", "--stream", "clip", "--quiet"}, &recOut, &recErr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(recOut.String(), "recording node cli into stream clip") {
		select {
		case code := <-recDone:
			t.Fatalf("record exited %d: %s", code, recErr.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "record did not start")
		time.Sleep(5 * time.Millisecond)
	}

	code, stdout, stderr := runCLI("replay", "--nats-url", url, "--node", "cli", "--fast", writeCLIClip(t, 4))
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "replaying")
	assert.Contains(t, stdout, "model cli-test, cameras front, rear")
	assert.Contains(t, stdout, "replayed 8 frames and 3 requests")
	assert.Contains(t, stdout, "plans: 3")
	assert.Contains(t, stdout, "errors: 0")
	assert.Contains(t, stdout, "round_trip")
	assert.Contains(t, stderr, "11/11", "the progress bar")

	// Wait until the recording holds 8 frames, 3 requests and 3 plans.
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for {
		st, err := js.Stream(context.Background(), "clip")
		require.NoError(t, err)
		info, err := st.Info(context.Background())
		require.NoError(t, err)
		if info.State.Msgs == 14 {
			break
		}
		require.True(t, time.Now().Before(deadline), "stream has %d messages", info.State.Msgs)
		time.Sleep(5 * time.Millisecond)
	}
	stopRecord()
	require.Equal(t, 0, <-recDone, recErr.String())
	assert.Contains(t, recOut.String(), "stored 14 messages in stream clip: 8 frames, 3 requests, 3 plans")
	assert.Contains(t, recOut.String(), "vlanode replay --node cli jetstream:clip")

	code, stdout, stderr = runCLI("replay", "--nats-url", url, "--node", "cli", "--fast", "--explicit", "--no-progress", "jetstream:clip")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "replayed 8 frames and 3 requests")
	assert.Contains(t, stdout, "plans: 3")
	assert.Contains(t, stdout, "recorded plans (not replayed): 3")
	assert.Empty(t, stderr)

	// Failed requests: exit status 1, each kind of error once with its count.
	code, stdout, stderr = runCLI("replay", "--nats-url", url, "--node", "cli", "--fast", "--no-progress", "--subject", "vla.nobody.infer", writeCLIClip(t, 4))
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "errors: 3 (client_no_responders 3)")
	assert.Contains(t, stdout, "  3 × client_no_responders: no node serves vla.nobody.infer\n")
	assert.Contains(t, stderr, "3 of 3 requests failed")

	// --json: a plan a line, then the summary.
	code, stdout, stderr = runCLI("replay", "--nats-url", url, "--node", "cli", "--fast", "--no-progress", "--print-plans", "--json", writeCLIClip(t, 3))
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 3, stdout)
	var plan struct {
		Plan struct {
			ID        string `json:"id"`
			Reasoning string `json:"reasoning"`
		} `json:"plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &plan))
	assert.Equal(t, "replay-1", plan.Plan.ID)
	assert.Equal(t, "ok", plan.Plan.Reasoning)
	var sum struct {
		Summary struct {
			Plans  int            `json:"plans"`
			Errors map[string]int `json:"errors"`
		} `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &sum))
	assert.Equal(t, 2, sum.Summary.Plans)

	// An unknown node is reported by name.
	code, _, stderr = runCLI("replay", "--nats-url", url, "--node", "nope", "--discover-timeout", "300ms", writeCLIClip(t, 2))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `no node "nope" answered`)
}

func TestReplaySourceErrors(t *testing.T) {
	code, _, stderr := runCLI("replay", "--node", "n", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no such file or directory")

	code, _, stderr = runCLI("replay", "--node", "n")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "want a SOURCE")

	code, _, stderr = runCLI("replay", t.TempDir())
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--node is required")

	notes := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(notes, nil, 0o644))
	code, _, stderr = runCLI("replay", "--node", "n", notes)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, notes+": not a clip folder, jetstream:STREAM or video file")

	code, _, stderr = runCLI("replay", "--node", "n", "jetstream:")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "needs a stream name")

	code, _, stderr = runCLI("replay", t.TempDir(), "--node", "n", "--speed", "0")
	assert.Equal(t, 2, code, "flags may follow SOURCE")
	assert.Contains(t, stderr, "--speed must be positive")

	code, _, stderr = runCLI("replay", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stderr, "<camera>/<stamp_ns>.mp4|avi|mkv|…,\n                   a video whose first frame was captured at stamp_ns")
	assert.Contains(t, stderr, "a video file     drive.mp4: the one camera of a one-camera model")

	code, _, stderr = runCLI("clip", "--out", t.TempDir(), "--video", "--video-format", "webm")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--video-format must be avi, mkv or mp4")

	code, _, stderr = runCLI("record", "--node", "n")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--node and --stream are required")
}

// TestReplayWaitsForTheServer: replay started a moment before serve waits
// for the NATS server (up to --discover-timeout) and says when none came.
func TestReplayWaitsForTheServer(t *testing.T) {
	code, _, stderr := runCLI("replay", "--nats-url", "nats://127.0.0.1:1", "--node", "n", "--discover-timeout", "300ms", writeCLIClip(t, 2))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "nats://127.0.0.1:1")

	var env engineEnv
	var model string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	done := make(chan int, 1)
	var out, errOut syncBuffer
	go func() {
		done <- run(context.Background(), []string{"replay", "--nats-url", "nats://" + addr, "--node", "late", "--fast", "--no-progress", writeCLIClip(t, 3)}, &out, &errOut)
	}()
	time.Sleep(300 * time.Millisecond) // replay is waiting by now
	serving(t, cliSpec(&env, &model), "--name", "late", "--listen", addr)
	select {
	case code := <-done:
		require.Equal(t, 0, code, errOut.String())
	case <-time.After(20 * time.Second):
		t.Fatal("replay did not finish")
	}
	assert.Contains(t, out.String(), "plans: 2")
}

// TestReplayManyCommand: a folder of clip folders played two at a time
// writes every plan as a JSON line with its clip, id, stamp and plan;
// a clip that cannot be played is reported by name, the others go on,
// and the exit status says so; the summary gives plans per second.
func TestReplayManyCommand(t *testing.T) {
	var env engineEnv
	var model string
	url, _, _ := serving(t, cliSpec(&env, &model), "--name", "cli", "--queue-bound", "1")
	root := t.TempDir()
	for i := range 3 {
		require.NoError(t, os.Rename(writeCLIClip(t, 4), filepath.Join(root, fmt.Sprintf("clip-%d", i))))
	}
	short := writeCLIClip(t, 1) // one frame a camera: the model needs two
	require.NoError(t, os.Rename(short, filepath.Join(root, "clip-short")))
	out := filepath.Join(t.TempDir(), "plans.jsonl")

	code, stdout, stderr := runCLI("replay", "--nats-url", url, "--node", "cli", "--concurrency", "2", "--out", out, root)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "replaying 4 clips into node cli, 2 at a time")
	assert.Contains(t, stdout, "clips: 4, failed: 1")
	assert.Regexp(t, `plans: 9 \([0-9.]+ plans/s\)`, stdout)
	assert.Contains(t, stdout, "errors: 0")
	assert.Contains(t, stderr, "clip "+filepath.Join(root, "clip-short")+" failed: replay:")
	assert.Contains(t, stderr, "1 of 4 clips failed")
	assert.Contains(t, stderr, "4/4", "the progress bar over clips")

	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 10, string(raw))
	ids, clips := map[string]bool{}, map[string]int{}
	clipErrors := 0
	for _, l := range lines {
		var r struct {
			Clip      string  `json:"clip"`
			ID        string  `json:"id"`
			StampNs   int64   `json:"stamp_ns"`
			RTT       float64 `json:"round_trip_ms"`
			ClipError string  `json:"clip_error"`
			Plan      *struct {
				ID        string `json:"id"`
				Reasoning string `json:"reasoning"`
			} `json:"plan"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		if r.ClipError != "" {
			clipErrors++
			assert.Equal(t, filepath.Join(root, "clip-short"), r.Clip)
			continue
		}
		require.NotNil(t, r.Plan, l)
		assert.Equal(t, r.ID, r.Plan.ID)
		assert.Equal(t, "ok", r.Plan.Reasoning)
		assert.Positive(t, r.StampNs)
		assert.Positive(t, r.RTT)
		ids[r.ID] = true
		clips[r.Clip]++
	}
	assert.Equal(t, 1, clipErrors)
	assert.Len(t, ids, 9)
	assert.Equal(t, map[string]int{filepath.Join(root, "clip-0"): 3, filepath.Join(root, "clip-1"): 3, filepath.Join(root, "clip-2"): 3}, clips)

	// Without the broken clip: exit 0; two clips given as SOURCEs, --json.
	code, stdout, stderr = runCLI("replay", "--nats-url", url, "--node", "cli", "--no-progress", "--json",
		filepath.Join(root, "clip-0"), filepath.Join(root, "clip-1"))
	require.Equal(t, 0, code, stderr)
	var sum struct {
		Summary struct {
			Plans     int     `json:"plans"`
			Clips     int     `json:"clips"`
			PlansPerS float64 `json:"plans_per_s"`
		} `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &sum), stdout)
	assert.Equal(t, 6, sum.Summary.Plans)
	assert.Equal(t, 2, sum.Summary.Clips)
	assert.Positive(t, sum.Summary.PlansPerS)

	// A folder holding one clip folder is that clip, played in real time.
	one := t.TempDir()
	require.NoError(t, os.Rename(writeCLIClip(t, 4), filepath.Join(one, "only")))
	code, stdout, stderr = runCLI("replay", "--nats-url", url, "--node", "cli", "--fast", "--no-progress", one)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "replaying "+filepath.Join(one, "only")+" into node cli")
	assert.Contains(t, stdout, "plans: 3")

	code, _, stderr = runCLI("replay", "--nats-url", url, "--node", "cli", "--concurrency", "2", "--speed", "2", root)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--speed does not apply to offline evaluation")
}

// TestClipCount: clip --count writes that many clip folders, each driving
// differently, which replay takes as a folder of clips.
func TestClipCount(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCLI("clip", "--out", out, "--count", "3", "--seconds", "0.4", "--width", "32", "--height", "18")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "wrote 3 clips of 0.4 s, 4 cameras (48 frames, 32x18 JPEG)")
	egos := map[string]bool{}
	for i := range 3 {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("clip-%03d", i), "ego.csv"))
		require.NoError(t, err)
		egos[string(b)] = true
	}
	assert.Len(t, egos, 3, "each clip drives its own path")
	code, _, stderr = runCLI("clip", "--out", out, "--count", "-1")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--count must not be negative")
}
