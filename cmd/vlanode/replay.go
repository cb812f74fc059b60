package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"vlanode/msgs"
	"vlanode/node"
	"vlanode/node/replay"
	"vlanode/vision/video"
)

// streamPrefix marks a replay SOURCE that is a JetStream stream.
const streamPrefix = "jetstream:"

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", stderr)
	var nf natsFlags
	nf.register(fs, "NATS server of the node")
	name := fs.String("node", "", "the node to replay into (required): frames go to vla.<node>.frames.*")
	subject := fs.String("subject", "", "where requests go: empty for vla.<node>.infer, or any to use vla.infer")
	explicit := fs.Bool("explicit", false, "send each request with its frames instead of use_latest")
	fast := fs.Bool("fast", false, "as fast as the node answers, instead of in real time")
	speed := fs.Float64("speed", 1, "real-time factor (2: twice as fast as recorded)")
	every := fs.Int("every", 1, "clip folders and video files: one request every N frame periods of the model")
	deadline := fs.Int("deadline-ms", 0, "deadline_ms of each request (0: none)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for each answer")
	prompt := fs.String("prompt", "", "prompt for every request")
	keep := fs.Bool("keep-stamps", false, "publish the recorded stamps instead of shifting the clip to now")
	inflight := fs.Int("max-inflight", 1, "real time: requests awaiting answers at once; a request due while that many await is not made, as a robot asks again once it has its plan (raise it to see the node shed load)")
	discoverWait := fs.Duration("discover-timeout", 10*time.Second, "how long to wait for the NATS server and for the node to describe its model (a node that is still loading its model)")
	noProgress := fs.Bool("no-progress", false, "do not draw a progress bar")
	maxTokens := fs.Int("max-reasoning-tokens", 0, "max_reasoning_tokens of every request (0: as recorded, or the model's default)")
	printPlans := fs.Bool("print-plans", false, "print each plan as it arrives: trajectory, reasoning, latency per stage")
	asJSON := fs.Bool("json", false, "print JSON lines instead: each plan (with --print-plans) as {\"plan\": …}, then {\"summary\": …}")
	jobs := fs.Bool("jobs", false, "send the requests as jobs on vla.jobs (at-least-once, answers read from vla.results.<id>; a node must run with --jobs); implies --explicit")
	concurrency := fs.Int("concurrency", 0, "offline evaluation: play this many clips at once, each request carrying its frames and each clip's next request sent once the previous is answered (0: one clip in real time, unless several clips are given)")
	out := fs.String("out", "", "offline evaluation: write every plan (and every failed request) as JSON lines to this file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: vlanode replay --node NAME [flags] SOURCE...

SOURCE is one of (docs/node.md):
  a clip folder    <camera>/<stamp_ns>.jpg|png, one file a frame, or <camera>/<stamp_ns>.mp4|avi|mkv|…,
                   a video whose first frame was captured at stamp_ns (frame i at stamp_ns + i/fps);
                   and ego.csv (stamp_ns,x,y,z,r00…r22) for the ego poses (vlanode clip [--video] writes one)
  a folder of clip folders
  a video file     drive.mp4: the one camera of a one-camera model, with the ego.csv beside it
                   (a model of several cameras needs a clip folder of one video a camera)
  jetstream:STREAM a stream made by vlanode record; jetstream:PREFIX* for every stream whose name
                   starts with PREFIX
Video frames are decoded with OpenCV and sent as JPEG (quality 95).
Several clips, --concurrency or --out: offline evaluation (docs/node.md).

flags:`)
		fs.PrintDefaults()
	}
	sources, err := parseWithSources(fs, args)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case *name == "":
		return usagef("--node is required")
	case *speed <= 0 || *every < 1 || *inflight < 1 || *deadline < 0 || *maxTokens < 0 || *concurrency < 0:
		return usagef("--speed must be positive, --every and --max-inflight at least 1, --deadline-ms, --max-reasoning-tokens and --concurrency not negative")
	}
	nf.clientURL()
	if err := nf.resolve(false); err != nil {
		return err
	}
	for _, source := range sources {
		if err := checkSource(source); err != nil {
			return err
		}
	}
	nc, peer, err := connectDiscover(ctx, nf, *name, *discoverWait, "vlanode replay")
	if err != nil {
		return err
	}
	defer nc.Close()
	clips, err := expandSources(ctx, nc, sources, peer.Info, *every)
	if err != nil {
		return err
	}
	if len(clips) > 1 || *concurrency > 0 || *out != "" {
		for _, f := range []string{"speed", "max-inflight", "print-plans", "keep-stamps"} {
			if set[f] {
				return usagef("--%s does not apply to offline evaluation (several clips, --concurrency or --out): every clip goes as fast as the node answers, each request with its frames", f)
			}
		}
		if !set["timeout"] {
			*timeout = offlineTimeout
		}
		return replayMany(ctx, nc, clips, replayManyConfig{
			name: *name, peer: peer, subject: *subject, deadline: *deadline, timeout: *timeout, prompt: *prompt,
			maxTokens: *maxTokens, jobs: *jobs, concurrency: max(*concurrency, 1), out: *out,
			progress: !*noProgress, asJSON: *asJSON,
		}, stdout, stderr)
	}
	source := clips[0].Name
	src, err := clips[0].Open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	cfg := replay.Config{
		Node: *name, Info: peer.Info, Explicit: *explicit, Fast: *fast, Speed: *speed,
		DeadlineMs: *deadline, Timeout: *timeout, Prompt: *prompt, KeepStamps: *keep, MaxInflight: *inflight,
		MaxReasoningTokens: *maxTokens,
	}
	switch {
	case *printPlans && *asJSON:
		enc := json.NewEncoder(stdout)
		cfg.OnPlan = func(p *msgs.Plan, rtt time.Duration) {
			enc.Encode(map[string]any{"plan": node.NewPlanJSON(p, nil), "round_trip_ms": float64(rtt) / float64(time.Millisecond)})
		}
	case *printPlans:
		cfg.OnPlan = func(p *msgs.Plan, rtt time.Duration) { printReplayPlan(stdout, p, rtt) }
	}
	if *jobs {
		jc, err := node.NewJobClient(ctx, nc, fmt.Sprintf("replay-%d", time.Now().UnixNano()))
		if err != nil {
			return err
		}
		defer jc.Close()
		cfg.Jobs = jc
	}
	if *subject == "any" {
		cfg.Subject = node.AnyInferSubject
	} else if *subject != "" {
		cfg.Subject = *subject
	}
	if !*noProgress {
		cfg.Progress = stderr
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "replaying %s into node %s (model %s, cameras %s)\n", source, *name, peer.Info.Model, strings.Join(peer.Info.Cameras, ", "))
	}
	sum, err := replay.Play(ctx, nc, src, cfg)
	if sum != nil {
		if *asJSON {
			json.NewEncoder(stdout).Encode(map[string]any{"summary": sum.JSON()})
		} else {
			sum.Write(stdout)
		}
	}
	if err != nil {
		return err
	}
	if n := sum.ErrorCount(); n > 0 {
		return fmt.Errorf("%d of %d requests failed (the errors are listed above)", n, sum.Requests)
	}
	return nil
}

// parseWithSources parses flags around one or more positional SOURCEs.
func parseWithSources(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(rest) == 0 {
		return nil, usagef("want a SOURCE")
	}
	return rest, nil
}

// checkSource refuses what replay cannot read, with a reason, before the
// node is asked for its model; a video file's header is read.
func checkSource(source string) error {
	if name, ok := strings.CutPrefix(source, streamPrefix); ok {
		if name == "" {
			return usagef("jetstream: needs a stream name (jetstream:STREAM)")
		}
		return nil
	}
	st, err := os.Stat(source)
	if err != nil {
		return fmt.Errorf("SOURCE: %w", err)
	}
	if st.IsDir() {
		return nil
	}
	if video.IsVideo(source) {
		if _, err := video.Probe(source); err != nil {
			if errors.Is(err, video.ErrNoOpenCV) {
				err = fmt.Errorf("%w; or extract its frames into a clip folder of images (docs/node.md)", err)
			}
			return err
		}
		return nil
	}
	return fmt.Errorf("%s: not a clip folder, jetstream:STREAM or video file", source)
}

// printReplayPlan prints one plan in a few lines: where the trajectory
// goes, the reasoning, and the time of each stage.
func printReplayPlan(w io.Writer, p *msgs.Plan, rtt time.Duration) {
	var end [3]float64
	if n := len(p.Trajectory.XYZ); n > 0 {
		end = p.Trajectory.XYZ[n-1]
	}
	horizon := p.Trajectory.DT * float64(len(p.Trajectory.XYZ))
	reasoning := p.Reasoning
	if r := []rune(reasoning); len(r) > 60 {
		reasoning = string(r[:60]) + "…"
	}
	t := p.TimingMs
	fmt.Fprintf(w, "\rplan %s from %s: in %.1f s to x=%.1f m, y=%.1f m | reasoning %q\n", p.ID, p.Node, horizon, end[0], end[1], reasoning)
	fmt.Fprintf(w, "  ms: preprocess %.0f, vision %.0f, prefill %.0f, decode %.0f, diffusion %.0f, total %.0f (round trip %.0f)\n",
		t.Preprocess, t.Vision, t.Prefill, t.Decode, t.Diffusion, t.Total, float64(rtt)/float64(time.Millisecond))
}

// connectDiscover connects as connectWaiting does and waits for node name
// to describe itself, both within wait; the caller closes the connection.
func connectDiscover(ctx context.Context, nf natsFlags, name string, wait time.Duration, client string) (*nats.Conn, *node.Peer, error) {
	dctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	nc, err := connectWaiting(dctx, nf, client)
	if err != nil {
		return nil, nil, err
	}
	peer, err := node.Discover(dctx, nc, name)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, peer, nil
}

// connectWaiting connects to the NATS server, waiting for it until ctx ends
// (a serve started a moment ago may not listen yet).
func connectWaiting(ctx context.Context, nf natsFlags, client string) (*nats.Conn, error) {
	nc, err := node.Connect(nf.url, client, nf.auth, nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			last := nc.LastError()
			nc.Close()
			if last != nil {
				return nil, fmt.Errorf("connecting to %s: %w", nf.url, last)
			}
			return nil, fmt.Errorf("no NATS server answered at %s (is vlanode serve running? --nats-url or $NATS_URL name another server)", nf.url)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nc, nil
}
