package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"vlanode/msgs"
	"vlanode/node"
	"vlanode/node/replay"
	"vlanode/vision/video"
)

// offlineTimeout is how long offline evaluation waits for each answer by
// default: a request may wait behind every other clip's in the node's
// queue, each several seconds within a small budget.
const offlineTimeout = 10 * time.Minute

// replayManyConfig is the command line of an offline evaluation.
type replayManyConfig struct {
	name        string
	peer        *node.Peer
	subject     string
	deadline    int
	timeout     time.Duration
	prompt      string
	maxTokens   int
	jobs        bool
	concurrency int
	out         string // JSON lines of plans and failures; "" for none
	progress    bool
	asJSON      bool
}

// expandSources turns replay's SOURCE arguments into clips: a clip folder,
// each clip folder of a folder of them, a stream, or every stream whose
// name starts with PREFIX for jetstream:PREFIX*.
func expandSources(ctx context.Context, nc *nats.Conn, sources []string, info node.EngineInfo, every int) ([]replay.Clip, error) {
	var clips []replay.Clip
	var js jetstream.JetStream
	for _, source := range sources {
		stream, ok := strings.CutPrefix(source, streamPrefix)
		if !ok && isVideoFile(source) {
			clips = append(clips, replay.Clip{Name: source, Open: func(context.Context) (replay.Source, error) {
				return replay.OpenVideo(source, replay.FolderConfig{Info: info, Every: every})
			}})
			continue
		}
		if !ok {
			dirs, err := replay.ClipFolders(source, info.Cameras)
			if err != nil {
				return nil, err
			}
			for _, dir := range dirs {
				clips = append(clips, replay.Clip{Name: dir, Open: func(context.Context) (replay.Source, error) {
					return replay.OpenFolder(dir, replay.FolderConfig{Info: info, Every: every})
				}})
			}
			continue
		}
		if js == nil {
			var err error
			if js, err = jetstream.New(nc); err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
		}
		names := []string{stream}
		if prefix, ok := strings.CutSuffix(stream, "*"); ok {
			var err error
			if names, err = streamsWithPrefix(ctx, js, prefix); err != nil {
				return nil, err
			}
		}
		for _, name := range names {
			clips = append(clips, replay.Clip{Name: streamPrefix + name, Open: func(ctx context.Context) (replay.Source, error) {
				return replay.OpenStream(ctx, js, name)
			}})
		}
	}
	return clips, nil
}

// isVideoFile says whether source is a video file (checkSource has read
// its header) rather than a folder.
func isVideoFile(source string) bool {
	st, err := os.Stat(source)
	return err == nil && !st.IsDir() && video.IsVideo(source)
}

// streamsWithPrefix lists the JetStream streams whose names start with
// prefix, by name.
func streamsWithPrefix(ctx context.Context, js jetstream.JetStream, prefix string) ([]string, error) {
	var names []string
	lister := js.StreamNames(ctx)
	for name := range lister.Name() {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	if err := lister.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("replay: listing streams: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("replay: no stream's name starts with %q", prefix)
	}
	slices.Sort(names)
	return names, nil
}

// planRecord is one line of --out: a plan, or a request that failed, or a
// clip that could not be played, with its clip.
type planRecord struct {
	Clip        string            `json:"clip"`
	ID          string            `json:"id,omitempty"`
	StampNs     int64             `json:"stamp_ns,omitempty"`
	RoundTripMs float64           `json:"round_trip_ms,omitempty"`
	Plan        *node.PlanJSON    `json:"plan,omitempty"`
	Error       *msgs.ErrorDetail `json:"error,omitempty"`
	ClipError   string            `json:"clip_error,omitempty"`
}

// replayMany plays clips into the node for offline evaluation and prints
// the merged summary with the throughput.
func replayMany(ctx context.Context, nc *nats.Conn, clips []replay.Clip, c replayManyConfig, stdout, stderr io.Writer) error {
	cfg := replay.ManyConfig{
		Clip: replay.Config{
			Node: c.name, Info: c.peer.Info, Explicit: true, Fast: true, DeadlineMs: c.deadline, Timeout: c.timeout,
			Prompt: c.prompt, MaxReasoningTokens: c.maxTokens, RetryOverloaded: true,
		},
		Concurrency: c.concurrency,
	}
	switch c.subject {
	case "":
	case "any":
		cfg.Clip.Subject = node.AnyInferSubject
	default:
		cfg.Clip.Subject = c.subject
	}
	if c.jobs {
		jc, err := node.NewJobClient(ctx, nc, fmt.Sprintf("replay-%d", time.Now().UnixNano()))
		if err != nil {
			return err
		}
		defer jc.Close()
		cfg.Clip.Jobs = jc
	}
	var rec *json.Encoder
	var outFile *os.File
	var outBuf *bufio.Writer
	if c.out != "" {
		f, err := os.Create(c.out)
		if err != nil {
			return fmt.Errorf("--out: %w", err)
		}
		outFile, outBuf = f, bufio.NewWriter(f)
		defer f.Close()
		rec = json.NewEncoder(outBuf)
	}
	var writeErr error
	write := func(r planRecord) {
		if rec != nil && writeErr == nil {
			writeErr = rec.Encode(r)
		}
	}
	cfg.OnPlan = func(clip string, p *msgs.Plan, rtt time.Duration) {
		pj := node.NewPlanJSON(p, nil)
		write(planRecord{Clip: clip, ID: p.ID, StampNs: p.StampNs, RoundTripMs: float64(rtt) / float64(time.Millisecond), Plan: &pj})
	}
	cfg.OnError = func(clip, id, code, msg string) {
		write(planRecord{Clip: clip, ID: id, Error: &msgs.ErrorDetail{Code: msgs.Code(code), Message: msg}})
	}
	cfg.OnClipFailed = func(f replay.ClipFailure) {
		fmt.Fprintf(stderr, "\rreplay: clip %s failed: %s\n", f.Clip, f.Error)
		write(planRecord{Clip: f.Clip, ClipError: f.Error})
	}
	if c.progress {
		cfg.Progress = stderr
	}
	if !c.asJSON {
		fmt.Fprintf(stdout, "replaying %d clips into node %s, %d at a time (model %s)\n", len(clips), c.name, c.concurrency, c.peer.Info.Model)
	}
	sum, err := replay.PlayMany(ctx, nc, clips, cfg)
	if outBuf != nil {
		writeErr = errors.Join(writeErr, outBuf.Flush(), outFile.Sync())
	}
	if sum != nil {
		if c.asJSON {
			json.NewEncoder(stdout).Encode(map[string]any{"summary": sum.JSON()})
		} else {
			sum.Write(stdout)
			if c.out != "" {
				fmt.Fprintf(stdout, "plans written to %s\n", c.out)
			}
		}
	}
	if err != nil {
		return err
	}
	if writeErr != nil {
		return fmt.Errorf("--out %s: %w", c.out, writeErr)
	}
	var errs []string
	if n := sum.ErrorCount(); n > 0 {
		errs = append(errs, fmt.Sprintf("%d of %d requests failed", n, sum.Requests))
	}
	if n := len(sum.FailedClips); n > 0 {
		errs = append(errs, fmt.Sprintf("%d of %d clips failed", n, sum.Clips))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s (listed above)", strings.Join(errs, "; "))
	}
	return nil
}
