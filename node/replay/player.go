package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"

	"vlanode/msgs"
	"vlanode/node"
	"vlanode/node/ingest"
)

// Config says how to play a clip.
type Config struct {
	Node    string          // frames go to vla.<Node>.frames.<camera>
	Subject string          // requests go here; "" means vla.<Node>.infer
	Info    node.EngineInfo // the node's model (node.Discover)

	// Explicit sends each request with its frames (the latest synchronized
	// ones the player published, by the node's own sync rule); otherwise
	// requests say use_latest.
	Explicit bool
	// Fast sends the next event as soon as the previous request is
	// answered; otherwise the clip's timing is kept (scaled by Speed) and
	// requests do not wait for each other's answers.
	Fast       bool
	Speed      float64       // real-time factor; 0 means 1
	DeadlineMs int           // each request's deadline_ms; 0: none
	Timeout    time.Duration // how long to wait for an answer; 0 means 10 s
	Prompt     string        // replaces the requests' prompt when not empty
	// MaxReasoningTokens replaces the requests' max_reasoning_tokens when
	// positive.
	MaxReasoningTokens int
	KeepStamps         bool // publish the recorded stamps; otherwise shift them to now
	// MaxInflight bounds, in real time, the requests awaiting answers at
	// once: a request due while that many wait is not made (counted in
	// Summary.Skipped), as a robot's planning loop asks again only once it
	// has its plan. 0 means 1.
	MaxInflight int
	// Jobs, when set, sends each request as a job on the jobs queue
	// (at-least-once, answered from the results stream) with an id of its
	// own; requests carry their frames (Explicit is implied) and frames are
	// not published on the frame subjects.
	Jobs *node.JobClient
	// IDPrefix starts every request id, followed by the request's number
	// in the clip; "" means "replay-". Clips played at once into one node
	// (PlayMany) each take their own.
	IDPrefix string
	// RetryOverloaded sends a request answered overloaded again, after a
	// pause that doubles from 50 ms to 1 s, until Timeout has passed since
	// it was first sent: offline evaluation wants every request answered,
	// and a node whose queue is full says so (Summary.Retries counts them).
	RetryOverloaded bool

	Progress io.Writer // a progress bar is drawn here; nil: none
	// OnPlan, when set, is called with every plan received and its round
	// trip, from the goroutine that received it (serialized with the
	// summary's updates).
	OnPlan func(plan *msgs.Plan, rtt time.Duration)
	// OnError, when set, is called with every request that failed: its
	// id, the code (the protocol's, or the client's ErrTimeout …) and the
	// message, serialized as OnPlan.
	OnError func(id, code, message string)
}

// Client-side outcomes of a request, counted in Summary.Errors beside the
// protocol's codes.
const (
	ErrTimeout      = "client_timeout"       // no answer within Config.Timeout
	ErrNoResponders = "client_no_responders" // nobody serves the subject
	ErrMaxPayload   = "client_max_payload"   // larger than the server's max_payload
	ErrClient       = "client_error"         // another transport error, or an unreadable reply
)

// Play plays src into the node and waits for every answer.
func Play(ctx context.Context, nc *nats.Conn, src Source, cfg Config) (*Summary, error) {
	p, err := newPlayer(nc, src, cfg)
	if err != nil {
		return nil, err
	}
	return p.play(ctx)
}

type player struct {
	nc    *nats.Conn
	src   Source
	cfg   Config
	store *ingest.Store // what was published: the frames of explicit requests, and of use_latest ones in fast mode
	bar   *progressbar.ProgressBar

	published  map[frameKey]time.Time // when each frame was published (fast mode, use_latest)
	offset     int64                  // added to the clip's stamps
	offsetSet  bool
	lastStamp  int64 // newest frame stamp published (after the offset)
	requestSeq int

	wg       sync.WaitGroup
	inflight chan struct{}

	mu  sync.Mutex // guards sum
	sum *Summary
}

func newPlayer(nc *nats.Conn, src Source, cfg Config) (*player, error) {
	if cfg.Speed == 0 {
		cfg.Speed = 1
	}
	if cfg.Speed < 0 {
		return nil, fmt.Errorf("replay: speed %g, want > 0", cfg.Speed)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxInflight == 0 {
		cfg.MaxInflight = 1
	}
	if cfg.Subject == "" {
		cfg.Subject = node.InferSubject(cfg.Node)
	}
	if cfg.Jobs != nil {
		cfg.Explicit = true
	}
	if cfg.IDPrefix == "" {
		cfg.IDPrefix = "replay-"
	}
	store, err := ingest.New(ingest.Config{
		Cameras: cfg.Info.Cameras, FramesPerCamera: cfg.Info.FramesPerCamera, Period: cfg.Info.FramePeriod,
		StaleAfter: time.Duration(1<<62 - 1), // stamps, not arrival, decide in a replay
		MaxSkew:    time.Duration(1<<63 - 1), // and a clip may have gaps
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	p := &player{nc: nc, src: src, cfg: cfg, store: store, inflight: make(chan struct{}, cfg.MaxInflight), sum: newSummary(cfg),
		published: map[frameKey]time.Time{}}
	if cfg.Progress != nil {
		p.bar = progressbar.NewOptions(src.Len(),
			progressbar.OptionSetWriter(cfg.Progress),
			progressbar.OptionSetDescription("replay"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("events"),
			progressbar.OptionShowIts(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(cfg.Progress) }),
		)
	}
	return p, nil
}

func (p *player) play(ctx context.Context) (*Summary, error) {
	start := time.Now()
	var first int64
	var err error
	for i := 0; ; i++ {
		var e Event
		e, err = p.src.Next(ctx)
		if err != nil {
			break
		}
		if i == 0 {
			first = e.At
		}
		if !p.cfg.Fast {
			due := start.Add(time.Duration(float64(e.At-first) / p.cfg.Speed))
			if err = sleepUntil(ctx, due); err != nil {
				break
			}
		}
		switch e.Kind {
		case KindFrame:
			err = p.frame(e.Frame)
		case KindRequest:
			p.request(ctx, e.Request)
		}
		if err != nil {
			break
		}
		if p.bar != nil {
			p.bar.Add(1)
		}
	}
	p.wg.Wait()
	if p.bar != nil {
		p.bar.Finish()
	}
	p.sum.Elapsed = time.Since(start)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if f, ok := p.src.(*Folder); ok {
		p.sum.Skipped["no ego history"] += f.Skipped
	}
	if s, ok := p.src.(*Stream); ok {
		p.sum.RecordedPlans = s.Plans
		p.sum.Invalid = s.Invalid
	}
	return p.sum, err
}

// shift applies the stamp offset, choosing it at the first stamp seen so
// that the clip's first moment is now.
func (p *player) shift(stamp int64) int64 {
	if p.cfg.KeepStamps {
		return stamp
	}
	if !p.offsetSet {
		p.offset, p.offsetSet = time.Now().UnixNano()-stamp, true
	}
	return stamp + p.offset
}

// frame publishes one frame.
func (p *player) frame(f *msgs.Frame) error {
	g := *f
	g.StampNs = p.shift(f.StampNs)
	data, err := msgs.Marshal(&g)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if p.cfg.Jobs == nil {
		if err := p.nc.Publish(node.FramesSubject(p.cfg.Node, g.Camera), data); err != nil {
			return fmt.Errorf("replay: publishing a frame: %w", err)
		}
	}
	p.lastStamp = max(p.lastStamp, g.StampNs)
	p.count(func(s *Summary) { s.Frames++ })
	if p.cfg.Fast {
		p.published[frameKey{g.Camera, g.StampNs}] = time.Now()
	}
	if err := p.store.Add(&g, time.Unix(0, g.StampNs)); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}

// frameKey names a published frame.
type frameKey struct {
	camera string
	stamp  int64
}

// refresh publishes again those of the frames a use_latest request made now
// would use that were published more than a frame period ago. In fast mode
// the clip's time runs faster than the node's clock, and the node drops
// frames by the time it received them (its --stale-after): frames published
// before the previous answer came back may be stale by now, although they
// are the clip's latest.
func (p *player) refresh() error {
	frames, _, err := p.store.Latest(time.Unix(0, p.lastStamp))
	if err != nil {
		return nil // not synchronized: the node will say so
	}
	now := time.Now()
	for i := range frames {
		key := frameKey{frames[i].Camera, frames[i].StampNs}
		if now.Sub(p.published[key]) < p.cfg.Info.FramePeriod {
			continue
		}
		p.published[key] = now
		data, err := msgs.Marshal(&frames[i])
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		if err := p.nc.Publish(node.FramesSubject(p.cfg.Node, frames[i].Camera), data); err != nil {
			return fmt.Errorf("replay: publishing a frame: %w", err)
		}
	}
	return nil
}

// SkipBusy is the Summary.Skipped reason of a real-time request not made
// because Config.MaxInflight requests were awaiting answers.
const SkipBusy = "node busy"

// request sends one request built from a clip's request event. In real
// time it is not made while MaxInflight requests await their answers.
func (p *player) request(ctx context.Context, clip *msgs.InferRequest) {
	if !p.cfg.Fast {
		select {
		case p.inflight <- struct{}{}:
		default:
			p.count(func(s *Summary) { s.Skipped[SkipBusy]++ })
			return
		}
	}
	req, data, ok := p.build(clip)
	switch {
	case !ok && !p.cfg.Fast:
		<-p.inflight
	case !ok:
	case p.cfg.Fast:
		if !p.cfg.Explicit {
			if err := p.refresh(); err != nil {
				p.failed(req.ID, ErrClient, err.Error())
				return
			}
		}
		p.send(ctx, req, data)
	default:
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-p.inflight }()
			p.send(ctx, req, data)
		}()
	}
}

// build makes the request of a clip's request event, and its encoding. It
// reports false, having counted why, when the request cannot be sent.
func (p *player) build(clip *msgs.InferRequest) (*msgs.InferRequest, []byte, bool) {
	p.requestSeq++
	id := fmt.Sprintf("%s%d", p.cfg.IDPrefix, p.requestSeq)
	if p.cfg.Jobs != nil {
		id = p.cfg.Jobs.ID(id)
	}
	req := &msgs.InferRequest{
		ID: id, Prompt: clip.Prompt,
		MaxReasoningTokens: clip.MaxReasoningTokens, DeadlineMs: p.cfg.DeadlineMs,
		NavText: clip.NavText, Question: clip.Question,
		Temperature: clip.Temperature, TopP: clip.TopP, Seed: clip.Seed,
		EgoHistory: make([]msgs.EgoPose, len(clip.EgoHistory)),
	}
	for i, e := range clip.EgoHistory {
		e.StampNs = p.shift(e.StampNs)
		req.EgoHistory[i] = e
	}
	if p.cfg.MaxReasoningTokens > 0 {
		req.MaxReasoningTokens = p.cfg.MaxReasoningTokens
	}
	if p.cfg.Prompt != "" {
		req.Prompt = p.cfg.Prompt
	}
	if p.cfg.Explicit {
		frames, _, err := p.store.Latest(time.Unix(0, p.lastStamp))
		if err != nil {
			p.count(func(s *Summary) { s.Skipped["not synchronized"]++ })
			return nil, nil, false
		}
		req.Frames = frames
	} else {
		req.UseLatest = true
	}
	data, err := msgs.Marshal(req)
	if err != nil {
		p.failed(id, ErrClient, err.Error())
		return nil, nil, false
	}
	p.count(func(s *Summary) { s.Requests++ })
	if max := p.nc.MaxPayload(); int64(len(data)) > max {
		p.failed(id, ErrMaxPayload, fmt.Sprintf("a request of %d bytes exceeds the server's max_payload of %d bytes: start the node with a larger --max-payload, or replay with use_latest", len(data), max))
		return nil, nil, false
	}
	return req, data, true
}

// send makes one request (data is req encoded), or submits it as a job
// and waits for its answer, and records the outcome.
func (p *player) send(ctx context.Context, req *msgs.InferRequest, data []byte) {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	start := time.Now()
	var plan *msgs.Plan
	var e *msgs.Error
	var err, unreadable error
	for pause := retryFirst; ; pause = min(2*pause, retryMax) {
		plan, e, err, unreadable = p.exchange(rctx, req, data)
		if !p.cfg.RetryOverloaded || err != nil || e == nil || e.Err.Code != msgs.CodeOverloaded {
			break
		}
		if sleepUntil(rctx, time.Now().Add(pause)) != nil {
			break // answered overloaded until the timeout: that is the outcome
		}
		p.count(func(s *Summary) { s.Retries++ })
	}
	rtt := time.Since(start)
	if err != nil {
		kind, msg := ErrClient, err.Error()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			kind, msg = ErrNoResponders, "no node serves "+p.cfg.Subject
		case errors.Is(err, nats.ErrMaxPayload):
			kind = ErrMaxPayload
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			kind, msg = ErrTimeout, fmt.Sprintf("no answer within %v (--timeout)", p.cfg.Timeout)
		}
		p.failed(req.ID, kind, msg)
		return
	}
	p.count(func(s *Summary) {
		switch {
		case unreadable != nil:
			p.failLocked(s, req.ID, ErrClient, "unreadable reply: "+unreadable.Error())
		case e != nil:
			p.failLocked(s, req.ID, string(e.Err.Code), e.Err.Message)
		default:
			s.addPlan(plan, rtt)
			if p.cfg.OnPlan != nil {
				p.cfg.OnPlan(plan, rtt)
			}
		}
	})
}

// The pauses before a request answered overloaded is sent again
// (Config.RetryOverloaded).
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = time.Second
)

// exchange sends the request once (or submits it as a job) and waits for
// the answer: a plan, an Error, a transport error, or an unreadable reply.
func (p *player) exchange(ctx context.Context, req *msgs.InferRequest, data []byte) (plan *msgs.Plan, e *msgs.Error, err, unreadable error) {
	if p.cfg.Jobs != nil {
		if err = p.cfg.Jobs.Submit(ctx, req); err == nil {
			plan, e, err = p.cfg.Jobs.Wait(ctx, req.ID)
		}
		return plan, e, err, nil
	}
	m, err := p.nc.RequestWithContext(ctx, p.cfg.Subject, data)
	if err != nil {
		return nil, nil, err, nil
	}
	plan, e, unreadable = msgs.DecodeReply(m.Data)
	return plan, e, nil, unreadable
}

// failed counts a failed request and reports it to OnError.
func (p *player) failed(id, code, msg string) {
	p.count(func(s *Summary) { p.failLocked(s, id, code, msg) })
}

// failLocked is failed with the summary's lock held.
func (p *player) failLocked(s *Summary, id, code, msg string) {
	s.fail(code, msg)
	if p.cfg.OnError != nil {
		p.cfg.OnError(id, code, msg)
	}
}

// count updates the summary under its lock.
func (p *player) count(f func(*Summary)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p.sum)
}

// sleepUntil waits until t or ctx's end.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
