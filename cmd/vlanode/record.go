package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"vlanode/node"
	"vlanode/node/record"
)

func runRecord(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("record", stderr)
	var nf natsFlags
	nf.register(fs, "NATS server of the node (it must run JetStream; vlanode serve's embedded server does)")
	name := fs.String("node", "", "the node whose subjects to record (required)")
	stream := fs.String("stream", "", "JetStream stream to store into, created if missing (required)")
	duration := fs.Duration("duration", 0, "stop after this long (0: at SIGINT/SIGTERM)")
	var maxBytes byteSize
	fs.Var(&maxBytes, "max-bytes", "the stream's size limit, e.g. 2GiB; past it new messages are refused (0: none)")
	noRequests := fs.Bool("no-requests", false, "do not record vla.<node>.infer requests (they carry the ego history replay needs)")
	quiet := fs.Bool("quiet", false, "no progress line")
	asJSON := fs.Bool("json", false, "print what was stored as one JSON object (the other lines go to stderr)")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *name == "" || *stream == "":
		return usagef("--node and --stream are required")
	case *duration < 0:
		return usagef("--duration must not be negative")
	}
	nf.clientURL()
	if err := nf.resolve(false); err != nil {
		return err
	}
	nc, err := node.Connect(nf.url, "vlanode record", nf.auth)
	if err != nil {
		return err
	}
	defer nc.Close()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	// The progress line is redrawn at most every 200 ms.
	var last atomic.Int64
	progress := func(c record.Counts) {
		if *quiet {
			return
		}
		now := time.Now().UnixNano()
		if prev := last.Load(); now-prev < int64(200*time.Millisecond) || !last.CompareAndSwap(prev, now) {
			return
		}
		fmt.Fprintf(stderr, "\rrecording %s: %d frames, %d requests, %d plans, %.1f MiB", *stream, c.Frames, c.Requests, c.Plans, float64(c.Bytes)/(1<<20))
	}
	lines := stdout
	if *asJSON {
		lines = stderr
	}
	ready := func() { fmt.Fprintf(lines, "recording node %s into stream %s; stop with Ctrl-C\n", *name, *stream) }
	c, err := record.Record(ctx, nc, record.Config{Node: *name, Stream: *stream, MaxBytes: int64(maxBytes), Requests: !*noRequests, Ready: ready}, progress)
	if !*quiet {
		fmt.Fprintln(stderr)
	}
	if *asJSON {
		if jerr := json.NewEncoder(stdout).Encode(map[string]any{
			"stream": *stream, "messages": c.Messages(), "frames": c.Frames, "requests": c.Requests, "plans": c.Plans,
			"bytes": c.Bytes, "refused": c.Failed,
		}); jerr != nil && err == nil {
			err = jerr
		}
		return err
	}
	fmt.Fprintf(stdout, "stored %d messages in stream %s: %d frames, %d requests, %d plans, %d bytes; %d refused\n",
		c.Messages(), *stream, c.Frames, c.Requests, c.Plans, c.Bytes, c.Failed)
	fmt.Fprintf(stdout, "replay it with: vlanode replay --node %s %s%s\n", *name, streamPrefix, *stream)
	return err
}
