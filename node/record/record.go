// Package record stores what a node's subjects carry into a JetStream
// stream, for vlanode replay.
//
// A recording of node N into stream S subscribes to vla.N.> and stores the
// messages of vla.N.frames.*, vla.N.plans and (optionally) vla.N.infer,
// unchanged and in arrival order, under the subject
// vlarec.S.<original subject> of stream S (file storage). JetStream's own timestamp of each message is the
// recording's clock; replay paces itself by it. Requests sent to vla.infer
// are not recorded: which node answered them cannot be told from outside.
package record

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Prefix starts the subject of every recorded message.
const Prefix = "vlarec"

// Subject returns the subject under which stream stores a message first
// published on original.
func Subject(stream, original string) string { return Prefix + "." + stream + "." + original }

// Original returns the subject a message of stream was first published on.
func Original(stream, subject string) (string, bool) {
	return strings.CutPrefix(subject, Prefix+"."+stream+".")
}

// Config says what to record where.
type Config struct {
	Node     string // the node whose subjects are recorded
	Stream   string // the JetStream stream, created or extended
	MaxBytes int64  // the stream's size limit; past it new messages are refused; 0: none
	Requests bool   // record vla.<node>.infer requests too (they carry the ego history)
	// Ready, if not nil, is called once the subscriptions are in place:
	// from then on nothing published is missed.
	Ready func()
}

// Counts are what a recording stored so far.
type Counts struct {
	Frames, Requests, Plans int64 // messages stored, by kind
	Bytes                   int64 // payload bytes stored
	Failed                  int64 // messages JetStream refused (full stream, too large)
}

// Messages returns the number of messages stored.
func (c Counts) Messages() int64 { return c.Frames + c.Requests + c.Plans }

// ackWait bounds the wait for JetStream's acknowledgements at the end.
const ackWait = 10 * time.Second

// Record creates (or updates) the stream and stores messages until ctx ends.
// progress, if not nil, is called after each stored message from the
// subscription goroutine. It returns the final counts.
func Record(ctx context.Context, nc *nats.Conn, cfg Config, progress func(Counts)) (Counts, error) {
	if err := checkName("stream", cfg.Stream); err != nil {
		return Counts{}, err
	}
	if err := checkName("node", cfg.Node); err != nil {
		return Counts{}, err
	}
	var failed atomic.Int64
	var firstErr sync.Once
	var pubErr error
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
		failed.Add(1)
		firstErr.Do(func() { pubErr = err })
	}))
	if err != nil {
		return Counts{}, fmt.Errorf("record: %w", err)
	}
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	sctx, cancel := context.WithTimeout(ctx, ackWait)
	_, err = js.CreateOrUpdateStream(sctx, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "vlanode recording of node " + cfg.Node,
		Subjects:    []string{Prefix + "." + cfg.Stream + ".>"},
		Storage:     jetstream.FileStorage,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardNew,
	})
	cancel()
	if err != nil {
		return Counts{}, fmt.Errorf("record: creating stream %s (does the server run JetStream?): %w", cfg.Stream, err)
	}

	// One subscription for all of the node's subjects, so that messages are
	// stored in the order they arrived (a publisher's frames before its
	// request); the node's status and anything else unknown is skipped.
	var mu sync.Mutex // guards c
	var c Counts
	prefix := "vla." + cfg.Node + "."
	sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
		rest := strings.TrimPrefix(m.Subject, prefix)
		var kind *int64
		switch {
		case strings.HasPrefix(rest, "frames."):
			kind = &c.Frames
		case rest == "plans":
			kind = &c.Plans
		case rest == "infer" && cfg.Requests:
			kind = &c.Requests
		default:
			return
		}
		out := &nats.Msg{Subject: Subject(cfg.Stream, m.Subject), Data: m.Data}
		if _, err := js.PublishMsgAsync(out); err != nil {
			failed.Add(1)
			firstErr.Do(func() { pubErr = err })
			return
		}
		mu.Lock()
		*kind++
		c.Bytes += int64(len(m.Data))
		snap := c
		mu.Unlock()
		if progress != nil {
			snap.Failed = failed.Load()
			progress(snap)
		}
	})
	if err != nil {
		return Counts{}, fmt.Errorf("record: subscribing to %s>: %w", prefix, err)
	}
	if err := nc.Flush(); err != nil {
		return Counts{}, fmt.Errorf("record: %w", err)
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	<-ctx.Done()
	sub.Drain() // stop taking; store what was delivered already
	waitClosed(sub)
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(ackWait):
		return snapshot(&mu, &c, &failed), errors.New("record: JetStream did not acknowledge every message in time")
	}
	out := snapshot(&mu, &c, &failed)
	if pubErr != nil {
		return out, fmt.Errorf("record: %d message(s) not stored, the first because: %w", out.Failed, pubErr)
	}
	return out, nil
}

func snapshot(mu *sync.Mutex, c *Counts, failed *atomic.Int64) Counts {
	mu.Lock()
	defer mu.Unlock()
	out := *c
	out.Failed = failed.Load()
	return out
}

// waitClosed waits, at most ackWait, until a draining subscription has
// handled what it was delivered and closed.
func waitClosed(s *nats.Subscription) {
	ch := s.StatusChanged(nats.SubscriptionClosed)
	if !s.IsValid() {
		return
	}
	select {
	case <-ch:
	case <-time.After(ackWait):
	}
}

// checkName checks that s can be a stream name or subject token.
func checkName(what, s string) error {
	if s == "" || strings.ContainsAny(s, ".*> \t\r\n/\\") {
		return fmt.Errorf("record: %s name %q must be non-empty, without '.', '*', '>', '/', '\\' or whitespace", what, s)
	}
	return nil
}
