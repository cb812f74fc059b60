package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"vlanode/node/ingest"
)

// startFlushTimeout bounds the round trip that confirms the subscriptions
// when Start's context has no deadline.
const startFlushTimeout = 10 * time.Second

// abandonAfter is how long Shutdown waits, once the grace period is over
// and the inference in flight was cancelled, for the engine to return
// before it answers the request and stops without it.
const abandonAfter = 500 * time.Millisecond

// ErrInferenceAbandoned is part of Shutdown's error when the engine did not
// return from a cancelled inference: it may still be running, so its owner
// must not free what it uses (vlanode serve exits without closing it).
var ErrInferenceAbandoned = errors.New("the inference in flight did not stop when cancelled and was left running")

// Node serves one Engine over NATS. Create it with Start; stop it with
// Shutdown.
type Node struct {
	opts   Options
	log    *slog.Logger
	now    func() time.Time
	engine Engine
	info   EngineInfo // read once at start

	emb        *embedded // nil with an external server
	nc         *nats.Conn
	closed     chan struct{} // closed when nc is closed for good
	svc        *service
	framesSub  *nats.Subscription
	maxPayload int64

	store *ingest.Store
	sched *scheduler
	m     *nodeMetrics
	jobs  *jobRunner // nil without WithJobs

	metricsLn  net.Listener
	metricsSrv *http.Server
	httpLn     net.Listener // the HTTP API (http.go); nil without one
	httpSrv    *http.Server
	httpSeq    atomic.Uint64 // ids of HTTP requests that bring none
	httpBodies chan struct{} // one token per body being read and decoded (httpBodySlots)
	started    time.Time

	hardCtx    context.Context // cancelled when in-flight work must stop
	hardCancel context.CancelFunc
	workerDone chan struct{}
	running    atomic.Pointer[job] // the job the worker runs, or nil
	statusStop chan struct{}
	statusDone chan struct{}

	// Budget changes (control.go). gate is held for reading by the worker
	// around each inference and for writing by a budget change; ctlMu
	// serializes the changes. Lock order: ctlMu, then gate.
	gate         sync.RWMutex
	ctlMu        sync.Mutex
	budget       atomic.Uint64 // the engine's budget now; 0: unlimited
	auto         atomic.Bool   // the budget follows the GPU's free memory
	controlSub   *nats.Subscription
	autoStop     chan struct{} // closed to stop the auto loop
	autoDone     chan struct{} // closed when the auto loop has stopped (at once without one)
	autoStopOnce sync.Once

	closing      atomic.Bool // set when Shutdown starts: new requests are refused
	gpuFailing   atomic.Bool // the last GPU read failed (logged once)
	warned       sync.Map    // frame-rejection reasons already logged at warn level
	shutdownOnce sync.Once
	shutdownErr  error
}

// Start connects to NATS (or starts an embedded server), subscribes to the
// node's subjects, registers the micro service and starts serving engine.
// ctx bounds the start only.
func Start(ctx context.Context, engine Engine, opts ...Option) (*Node, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	info := engine.Info()
	if err := info.validate(); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	store, err := ingest.New(ingest.Config{
		Cameras: info.Cameras, FramesPerCamera: info.FramesPerCamera, Period: info.FramePeriod,
		Tolerance: o.SyncTolerance, StaleAfter: o.StaleAfter, Capacity: o.RingCapacity,
		MaxBytes: o.RingBytes, MaxSkew: o.MaxFrameSkew,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n := &Node{
		opts: o, log: o.Logger.With("node", o.Name), now: o.now, engine: engine, info: info,
		closed: make(chan struct{}), store: store, sched: newScheduler(o.QueueBound),
		m: newNodeMetrics(info.Cameras), workerDone: make(chan struct{}),
		statusStop: make(chan struct{}), statusDone: make(chan struct{}),
		autoStop: make(chan struct{}), autoDone: make(chan struct{}),
	}
	close(n.autoDone) // until startControl starts the auto loop
	n.budget.Store(info.BudgetBytes)
	n.hardCtx, n.hardCancel = context.WithCancel(context.Background())
	if err := n.start(ctx); err != nil {
		n.abort()
		return nil, err
	}
	return n, nil
}

// start brings the parts up in order; abort undoes what was started.
func (n *Node) start(ctx context.Context) error {
	url := n.opts.NATSURL
	if url == "" {
		emb, err := startEmbedded(&n.opts)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		n.emb, url = emb, emb.url()
		n.log.Info("embedded NATS server started", "listen", emb.listenAddr(), "url", url, "jetstream", true)
	}
	if err := n.connect(ctx, url); err != nil {
		return err
	}
	n.maxPayload = n.effectiveMaxPayload()
	sub, err := n.nc.Subscribe(FramesSubject(n.opts.Name, "*"), n.onFrame)
	if err != nil {
		return fmt.Errorf("node: subscribing to frames: %w", err)
	}
	if err := sub.SetPendingLimits(n.pendingLimits()); err != nil {
		return fmt.Errorf("node: subscribing to frames: %w", err)
	}
	n.framesSub = sub
	if err := n.startMetrics(); err != nil {
		return err
	}
	go n.work()
	if err := n.register(); err != nil {
		return err
	}
	if err := n.startControl(); err != nil {
		return err
	}
	n.started = n.now()
	if err := n.startHTTP(); err != nil {
		return err
	}
	if n.opts.Jobs != nil {
		if err := n.startJobs(ctx); err != nil {
			return err
		}
	}
	fctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		fctx, cancel = context.WithTimeout(ctx, startFlushTimeout)
	}
	defer cancel()
	if err := n.nc.FlushWithContext(fctx); err != nil {
		return fmt.Errorf("node: subscribing: %w", err)
	}
	go n.statusLoop()
	n.m.budget.Set(float64(n.info.BudgetBytes))
	n.log.Info("serving", "model", n.info.Model, "cameras", n.info.Cameras,
		"frames_per_camera", n.info.FramesPerCamera, "frame_period", n.info.FramePeriod,
		"max_payload", n.maxPayload, "queue_bound", n.opts.QueueBound, "gpu", n.opts.GPU != nil)
	return nil
}

// connect opens the connection: reconnecting forever, logging state changes.
func (n *Node) connect(ctx context.Context, url string) error {
	opts, err := n.opts.Auth.NATSOptions()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	opts = append(opts,
		nats.Name("vlanode "+n.opts.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(n.opts.ReconnectWait),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if !n.closing.Load() {
				n.log.Warn("disconnected from NATS; replies are buffered until it is back", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { n.log.Info("reconnected to NATS", "url", c.ConnectedUrlRedacted()) }),
		nats.ClosedHandler(func(*nats.Conn) { close(n.closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			n.log.Error("NATS error", "subject", subj, "err", err)
		}),
	)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("node: connecting to %s: %w", url, err)
	}
	n.nc = nc
	return ctx.Err()
}

// Pending limits: what each subscription (frames, and each infer endpoint)
// may hold that its handler has not taken yet. Handlers only decode and
// queue, so this fills only under a flood; past it NATS drops messages
// (a slow consumer, logged) rather than the node growing without bound.
const (
	pendingPayloads = 4       // bytes: this many of the largest message
	pendingMsgs     = 1 << 16 // messages
)

func (n *Node) pendingLimits() (msgs, bytes int) {
	return pendingMsgs, int(pendingPayloads * n.maxPayload)
}

// effectiveMaxPayload returns the request size limit: the option, bounded by
// the server's max_payload.
func (n *Node) effectiveMaxPayload() int64 {
	server := n.nc.MaxPayload()
	if n.opts.MaxPayload == 0 || n.opts.MaxPayload > server {
		if n.opts.MaxPayload > server {
			n.log.Warn("the server's max_payload is below --max-payload; it refuses larger messages", "server", server, "max_payload", n.opts.MaxPayload)
		}
		return server
	}
	return n.opts.MaxPayload
}

// startMetrics serves the metrics over HTTP when an address was given.
func (n *Node) startMetrics() error {
	if n.opts.MetricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", n.opts.MetricsAddr)
	if err != nil {
		return fmt.Errorf("node: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", n.m.reg)
	n.metricsLn = ln
	n.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := n.metricsSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("metrics server stopped", "err", err)
		}
	}()
	n.log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return nil
}

// URL returns the URL of the NATS server the node uses (the embedded one's
// when it started one).
func (n *Node) URL() string {
	if n.emb != nil {
		return n.emb.url()
	}
	return n.nc.ConnectedUrl()
}

// ListenAddr returns the address the embedded server listens on, or "" with
// an external server.
func (n *Node) ListenAddr() string {
	if n.emb == nil {
		return ""
	}
	return n.emb.listenAddr()
}

// Name returns the node's name.
func (n *Node) Name() string { return n.opts.Name }

// MetricsAddr returns the address metrics are served on, or "".
func (n *Node) MetricsAddr() string {
	if n.metricsLn == nil {
		return ""
	}
	return n.metricsLn.Addr().String()
}

// MaxPayload returns the largest request the node takes, in bytes.
func (n *Node) MaxPayload() int64 { return n.maxPayload }

// Shutdown stops the node gracefully: it stops taking requests (those that
// arrive are answered overloaded, so that a client can try another node),
// answers the waiting ones overloaded, lets the one in flight finish and
// sends its reply, then drains the connection and stops the embedded server.
// When ctx ends first, the in-flight inference is cancelled (its request is
// still answered) and Shutdown returns ctx's error after cleaning up; if the
// engine has not returned abandonAfter later, the request is answered
// without it and the error includes ErrInferenceAbandoned. Jobs taken from
// the jobs queue have their answers stored, or go back to the queue.
// Calling it again returns the first call's result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown(ctx) })
	return n.shutdownErr
}

func (n *Node) shutdown(ctx context.Context) error {
	n.closing.Store(true)
	n.log.Info("shutting down: no new requests; finishing the one in flight")
	n.stopControl()
	var errs []error
	if n.jobs != nil {
		n.jobs.stop() // no new jobs
	}
	if err := n.svc.stop(); err != nil { // unsubscribes the infer endpoints
		errs = append(errs, fmt.Errorf("stopping the micro service: %w", err))
	}
	for _, j := range n.sched.close() {
		n.shed(j, shedShutdown, fmt.Sprintf("node %s is shutting down; retry on another node", n.opts.Name))
	}
	n.m.queueDepth.Set(0)
	select {
	case <-n.workerDone:
	case <-ctx.Done():
		n.log.Warn("shutdown: grace period over; cancelling the inference in flight")
		n.hardCancel()
		errs = append(errs, ctx.Err())
		select {
		case <-n.workerDone: // the worker answered the cancelled request
		case <-time.After(abandonAfter):
			// The engine does not return: answer its request and leave it.
			n.log.Error("shutdown: the inference in flight did not stop when cancelled; leaving it", "after", abandonAfter)
			if j := n.running.Load(); j != nil {
				n.stopped(j, context.Canceled)
			}
			errs = append(errs, ErrInferenceAbandoned)
		}
	}
	if err := n.stopJobs(ctx); err != nil && ctx.Err() == nil {
		errs = append(errs, err)
	}
	if n.httpSrv != nil {
		// Every request is answered by now; let the handlers write.
		if err := n.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping the HTTP API: %w", err))
		}
	}
	close(n.statusStop)
	<-n.statusDone
	n.closeConn(ctx)
	n.abort()
	n.log.Info("stopped")
	return errors.Join(errs...)
}

// closeConn drains the connection and waits for it to close (or for ctx):
// every subscription handles what it was delivered (a use_latest request
// waiting on a barrier is queued and answered), and buffered replies are
// sent.
func (n *Node) closeConn(ctx context.Context) {
	if err := n.nc.Drain(); err != nil {
		n.nc.Close()
	}
	select {
	case <-n.closed:
	case <-ctx.Done():
		n.nc.Close()
	}
}

// abort releases whatever start acquired; it is safe on a partial start.
func (n *Node) abort() {
	n.hardCancel()
	n.stopControl()
	if n.svc != nil {
		n.svc.stop()
	}
	if n.sched != nil {
		for _, j := range n.sched.close() {
			n.shed(j, shedShutdown, "node stopped")
		}
	}
	if n.nc != nil && !n.nc.IsClosed() {
		n.nc.Close()
	}
	if n.metricsSrv != nil {
		n.metricsSrv.Close()
	}
	if n.httpSrv != nil {
		n.httpSrv.Close()
	}
	if n.emb != nil {
		n.emb.shutdown()
	}
}

// Run serves until ctx ends, then shuts down, allowing grace for the
// in-flight inference.
func (n *Node) Run(ctx context.Context, grace time.Duration) error {
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return n.Shutdown(sctx)
}
