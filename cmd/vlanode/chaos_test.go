package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"vlanode/engine"
	"vlanode/msgs"
	"vlanode/node"
)

// The chaos test (issue 34): the tiny synthetic Alpamayo-R1 on the CPU
// backend behind a node on a real in-process NATS server, under bad inputs
// of every class interleaved with valid requests, a frames flood, node
// restarts, and then jobs through node and server restarts. It checks that
// nothing crashes, that every request is answered (or refused by NATS: no
// responders while the node restarts) exactly once with an answer its class
// allows, that every job is answered exactly once, and that the heap stays
// within the node's stated budget (docs/node.md, "Memory") for the
// scenario's limits.
const (
	chaosPayload   = 2 << 20 // the node's max payload; the server's is twice that
	chaosRingBytes = 1 << 20 // frame data each camera keeps
	chaosQueue     = 4       // the node's queue bound
	chaosLive      = 6 * time.Second
	chaosAnswer    = 60 * time.Second // a request's answer may take this long at worst
	chaosJobs      = 6
)

// chaosHeapBudget is what the live heap may grow by over the scenario: the
// node's budget for its limits (docs/node.md, "Memory": 29 × max payload +
// 4 cameras × ring bytes + 37 MiB), and as much again for the in-process
// server and the test's own clients.
const chaosHeapBudget = 2 * ((12+12+chaosQueue+1)*chaosPayload + 4*chaosRingBytes + 37<<20)

// chaosRSSGrowth is the resident set's growth issue 34 allows for a bad
// input (300 MB); the Go runtime keeps up to twice the live heap, and the
// in-process server and the test's clients share the process.
const chaosRSSGrowth = 300e6

func TestChaos(t *testing.T) {
	eng := tinyEngine(t)
	frames, ego := tinyObservation(t)
	srv, sopts := chaosServer(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nodeOpts := []node.Option{
		node.WithName("chaos"), node.WithNATSURL(srv.ClientURL()), node.WithMaxPayload(chaosPayload),
		node.WithQueueBound(chaosQueue), node.WithFrameLimits(0, chaosRingBytes), node.WithReconnectWait(20 * time.Millisecond),
		node.WithJobs(node.JobsConfig{AckWait: time.Second}), node.WithLogger(log),
	}
	n := startChaosNode(t, eng, nodeOpts)
	mem := watchMemory(t)

	// Live: requests, bad inputs, a frames flood and node restarts.
	l := &ledger{}
	nc := chaosConn(t, srv.ClientURL())
	ctx, stop := context.WithTimeout(context.Background(), chaosLive)
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	run(func() { robot(ctx, t, chaosConn(t, srv.ClientURL()), frames) })
	poison := poisonedFrames(t, frames)
	run(func() { floodFrames(ctx, t, chaosConn(t, srv.ClientURL()), frames, poison) })
	for i := range 2 {
		run(func() { validRequests(ctx, l, nc, i, frames, ego) })
	}
	cases := badCases(t, frames, ego)
	run(func() { badRequests(ctx, t, l, nc, cases) })
	for _, at := range []time.Duration{chaosLive / 3, 2 * chaosLive / 3} {
		time.Sleep(time.Until(mem.start.Add(at)))
		restartNode(t, &n, eng, nodeOpts)
	}
	wg.Wait()
	stop()
	l.check(t, nc)
	t.Logf("live: %s", l.summary())
	assert.Positive(t, l.count("use_latest plan"), "use_latest planned through the flood")
	assert.Positive(t, l.count("explicit plan"))

	// Jobs: through a node restart and a server restart, each answered once.
	jobsThroughRestarts(t, &n, eng, nodeOpts, &srv, sopts, frames, ego)

	heap, rss := mem.stop()
	t.Logf("the live heap grew by at most %.1f MiB (budget %.1f MiB), the resident set by %.1f MiB", mib(heap), mib(chaosHeapBudget), mib(rss))
	assert.Less(t, heap, uint64(chaosHeapBudget), "the live heap stays within the node's budget")
	assert.Less(t, rss, uint64(chaosRSSGrowth), "the resident set grows less than issue 34 allows")
}

// tinyEngine loads the tiny synthetic Alpamayo-R1 on the CPU backend, as
// serve would.
func tinyEngine(t *testing.T) node.Engine {
	t.Helper()
	spec := alpamayoSpec()
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	spec.flags(fs)
	require.NoError(t, fs.Parse([]string{"--model", tinyAlpamayo(t), "--device", "cpu", "--threads", "2"}))
	eng, err := spec.build(context.Background(), engineEnv{GPU: -1, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { eng.(io.Closer).Close() })
	return eng
}

// chaosServer runs a NATS server with JetStream on disk, its max payload
// twice the node's (so that the node's own limit answers larger requests).
func chaosServer(t *testing.T) (*server.Server, *server.Options) {
	t.Helper()
	opts := natstest.DefaultTestOptions
	opts.Port, opts.JetStream, opts.StoreDir, opts.MaxPayload = -1, true, t.TempDir(), 2*chaosPayload
	srv := natstest.RunServer(&opts)
	opts.Port = srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { srv.Shutdown() })
	return srv, &opts
}

func chaosConn(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func startChaosNode(t *testing.T, eng node.Engine, opts []node.Option) *node.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, eng, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { n.Shutdown(context.Background()) }) // a second Shutdown is harmless
	return n
}

// restartNode stops *n gracefully (the waiting requests are answered
// overloaded, the running one finishes) and starts another on the same
// engine.
func restartNode(t *testing.T, n **node.Node, eng node.Engine, opts []node.Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, (*n).Shutdown(ctx))
	*n = startChaosNode(t, eng, opts)
}

// robot publishes the four cameras at 10 Hz, stamped now, until ctx ends.
func robot(ctx context.Context, t *testing.T, nc *nats.Conn, frames []msgs.Frame) {
	tick := time.NewTicker(engine.FramePeriod)
	defer tick.Stop()
	for seq := uint64(1); ctx.Err() == nil; seq++ {
		now := time.Now().UnixNano()
		for c, cam := range engine.Cameras {
			f := frames[c*engine.FramesPerCamera]
			f.Camera, f.StampNs, f.Seq = cam, now, seq
			publish(t, nc, node.FramesSubject("chaos", cam), &f)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// floodFrames publishes, every 400 ms, 32 frames a camera stamped an hour
// ahead, and frames of every other kind the node drops: not msgpack, an
// unknown camera, a camera that is not the subject's, a stale sequence
// number, more data than a camera keeps, and the poisoned frames, stamped
// now (kept, they would reach use_latest requests).
func floodFrames(ctx context.Context, t *testing.T, nc *nats.Conn, frames, poison []msgs.Frame) {
	tick := time.NewTicker(400 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		now := time.Now().UnixNano()
		for c, cam := range engine.Cameras {
			subject := node.FramesSubject("chaos", cam)
			for i := range 32 {
				f := frames[c*engine.FramesPerCamera]
				f.Camera, f.StampNs = cam, now+int64(time.Hour)+int64(i)*int64(engine.FramePeriod)
				publish(t, nc, subject, &f)
			}
			assert.NoError(t, nc.Publish(subject, []byte("not msgpack")))
			wrong := frames[0]
			wrong.Camera, wrong.StampNs = "rear_fisheye", now
			publish(t, nc, node.FramesSubject("chaos", "rear_fisheye"), &wrong)
			wrong.Camera = engine.Cameras[(c+1)%len(engine.Cameras)]
			publish(t, nc, subject, &wrong)
			old := frames[0]
			old.Camera, old.StampNs, old.Seq = cam, now, 1
			publish(t, nc, subject, &old)
			big := msgs.Frame{Camera: cam, StampNs: now, Encoding: msgs.EncodingMono8, Width: 1024, Height: 1025, Data: make([]byte, 1024*1025)}
			publish(t, nc, subject, &big)
			for _, f := range poison {
				f.Camera, f.StampNs = cam, now
				publish(t, nc, subject, &f)
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// publish publishes v; it runs on the scenario's goroutines, so it reports
// a failure without stopping the test there.
func publish(t *testing.T, nc *nats.Conn, subject string, v any) {
	assert.NoError(t, nc.Publish(subject, mustMarshal(v)))
}

// validRequests sends valid requests, explicit and use_latest in turn,
// until ctx ends.
func validRequests(ctx context.Context, l *ledger, nc *nats.Conn, client int, frames []msgs.Frame, ego []msgs.EgoPose) {
	for i := 0; ctx.Err() == nil; i++ {
		id := fmt.Sprintf("valid-%d-%d", client, i)
		req := &msgs.InferRequest{ID: id, EgoHistory: ego, MaxReasoningTokens: 2}
		if i%2 == 0 {
			req.Frames = frames
			l.ask(nc, "explicit", id, mustMarshal(req), "plan")
		} else {
			req.UseLatest = true
			l.ask(nc, "use_latest", id, mustMarshal(req), "plan", string(msgs.CodeUnsupported))
		}
	}
}

// badRequests sends the bad inputs of every class, in turn, until ctx ends
// (at least once each).
func badRequests(ctx context.Context, t *testing.T, l *ledger, nc *nats.Conn, cases []badCase) {
	for i := 0; i == 0 || ctx.Err() == nil; i++ {
		for _, c := range cases {
			l.ask(nc, c.class, fmt.Sprintf("%s-%d", c.class, i), c.data, c.want...)
		}
		// A message without a reply subject is not answered: nothing to check
		// but that the node lives on.
		assert.NoError(t, nc.Publish(node.AnyInferSubject, cases[0].data))
	}
}

type badCase struct {
	class string
	data  []byte
	want  []string // the outcomes this class may get (besides restarts')
}

func badCases(t *testing.T, frames []msgs.Frame, ego []msgs.EgoPose) []badCase {
	valid := func() *msgs.InferRequest {
		return &msgs.InferRequest{ID: "r", Frames: append([]msgs.Frame(nil), frames...), EgoHistory: append([]msgs.EgoPose(nil), ego...), MaxReasoningTokens: 2}
	}
	bad := string(msgs.CodeBadRequest)
	edit := func(f func(r *msgs.InferRequest)) []byte { r := valid(); f(r); return mustMarshal(r) }
	// withKey adds key, holding value (msgpack), to an encoded request map.
	withKey := func(b []byte, key string, value []byte) []byte {
		out := append([]byte{b[0] + 1}, b[1:]...)
		out = append(out, 0xd9, byte(len(key)))
		return append(append(out, key...), value...)
	}
	repeated := func(n int, v byte) []byte {
		out := make([]byte, 5, 5+n)
		out[0] = 0xdd
		binary.BigEndian.PutUint32(out[1:], uint32(n))
		return append(out, bytes.Repeat([]byte{v}, n)...)
	}
	base := mustMarshal(valid())
	room := chaosPayload - len(base) - 64
	deep := []byte{0x82, 0xa1, 'v', 0x01, 0xa2, 'i', 'd'}
	for range 40 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0x01)
	idInt, err := msgpack.Marshal(map[string]any{"v": 1, "id": 7, "use_latest": true, "ego_history": []any{}})
	require.NoError(t, err)
	headerBomb, oneBitBomb, jpegBomb := pngHeaderBomb(t), pngOneBitBomb(t), jpegTruncatedBomb(t)
	return []badCase{
		{"malformed", []byte{0xc1}, []string{bad}},
		{"not a map", []byte{0x93, 1, 2, 3}, []string{bad}},
		{"unknown key of empty maps", withKey(base, "junk", repeated(room, 0x80)), []string{"plan"}},
		{"unknown key of empty arrays", withKey(base, "junk", repeated(room, 0x90)), []string{"plan"}},
		{"known key of empty maps", withKey(mustMarshal(&msgs.InferRequest{ID: "r", UseLatest: true}), "frames", repeated(room, 0x80)), []string{bad}},
		{"nested too deep", deep, []string{bad}},
		{"id not a string", idInt, []string{bad}},
		{"wrong version", []byte{0x81, 0xa1, 'v', 0x02}, []string{string(msgs.CodeUnsupported)}},
		{"NaN in ego", edit(func(r *msgs.InferRequest) { r.EgoHistory[3].XYZ[1] = math.NaN() }), []string{bad}},
		{"ego count", edit(func(r *msgs.InferRequest) { r.EgoHistory = r.EgoHistory[1:] }), []string{bad}},
		{"frames and use_latest", edit(func(r *msgs.InferRequest) { r.UseLatest = true }), []string{bad}},
		{"frame count", edit(func(r *msgs.InferRequest) { r.Frames = r.Frames[1:] }), []string{bad}},
		{"corrupt png", edit(func(r *msgs.InferRequest) { r.Frames[5].Data = []byte("not a png at all") }), []string{bad}},
		{"truncated png", edit(func(r *msgs.InferRequest) { r.Frames[6].Data = r.Frames[6].Data[:40] }), []string{bad}},
		{"png size lie", edit(func(r *msgs.InferRequest) { r.Frames[7].Width, r.Frames[7].Height = 100, 100 }), []string{bad}},
		// Decoder bombs, refused before anything is decoded: msgs refuses a
		// width over 16,384, vision a header that differs from the declared
		// size and a JPEG without its end-of-image marker.
		{"png header 60000x60000 in a 128x96 frame", edit(func(r *msgs.InferRequest) {
			r.Frames[9].Width, r.Frames[9].Height, r.Frames[9].Data = 128, 96, headerBomb
		}), []string{bad}},
		{"1-bit png bomb 30000x30000", edit(func(r *msgs.InferRequest) {
			r.Frames[10].Width, r.Frames[10].Height, r.Frames[10].Data = 30000, 30000, oneBitBomb
		}), []string{bad}},
		{"jpeg 16384x16384 truncated", edit(func(r *msgs.InferRequest) {
			f := &r.Frames[11]
			f.Encoding, f.Width, f.Height, f.Data = msgs.EncodingJPEG, 16384, 16384, jpegBomb
		}), []string{bad}},
		{"png header differs from the declared size", edit(func(r *msgs.InferRequest) {
			r.Frames[12].Data = pngHeaderShrunk(t, r.Frames[12].Data, 96, 54)
		}), []string{bad}},
		{"over the node's max payload", withKey(base, "pad", append([]byte{0xc6, 0, 0x21, 0, 0}, make([]byte, 0x210000)...)), []string{bad}},
		{"deadline 1 ms", edit(func(r *msgs.InferRequest) { r.DeadlineMs = 1 }), []string{string(msgs.CodeDeadlineExceeded)}},
	}
}

func mustMarshal(v any) []byte {
	b, err := msgs.Marshal(v)
	if err != nil {
		panic(err) // the test's own messages are valid
	}
	return b
}

// ledger records every request's outcome and keeps its inbox subscription
// open, to look for a second reply at the end.
type ledger struct {
	mu       sync.Mutex
	outcomes map[string]int // "class outcome"
	failures []string
	subs     []*nats.Subscription
	replies  []chan *nats.Msg // each sub's, its first reply taken
}

// ask sends data as a request with an inbox of its own, waits for the one
// answer, and checks it against want (an Error's code, or "plan"); a node
// that is restarting may also answer overloaded, or NATS no responders.
func (l *ledger) ask(nc *nats.Conn, class, id string, data []byte, want ...string) {
	inbox := nc.NewInbox()
	replies := make(chan *nats.Msg, 2) // a second reply is all the check needs to see
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err == nil {
		err = nc.PublishRequest(node.AnyInferSubject, inbox, data)
	}
	var m *nats.Msg
	if err == nil {
		select {
		case m = <-replies:
		case <-time.After(chaosAnswer):
			err = errors.New("timed out")
		}
	}
	outcome := ""
	switch {
	case err != nil:
		l.fail("%s %s: no answer: %v", class, id, err)
		return
	case m.Header.Get("Status") == "503":
		outcome = "no_responders"
		time.Sleep(20 * time.Millisecond) // the node is restarting: as a client would, wait a little
	default:
		_, e, err := msgs.DecodeReply(m.Data)
		switch {
		case err != nil:
			l.fail("%s %s: unreadable answer: %v", class, id, err)
			return
		case e != nil:
			outcome = string(e.Err.Code)
			if e.ID != msgs.RequestID(data) {
				l.fail("%s %s: answer for id %q", class, id, e.ID)
			}
		default:
			outcome = "plan"
		}
	}
	ok := outcome == "no_responders" || outcome == string(msgs.CodeOverloaded)
	for _, w := range want {
		ok = ok || outcome == w
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.outcomes == nil {
		l.outcomes = map[string]int{}
	}
	l.outcomes[class+" "+outcome]++
	l.subs = append(l.subs, sub)
	l.replies = append(l.replies, replies)
	if !ok {
		l.failures = append(l.failures, fmt.Sprintf("%s %s: got %s, want %v", class, id, outcome, want))
	}
}

func (l *ledger) fail(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, fmt.Sprintf(format, a...))
}

func (l *ledger) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.outcomes[key]
}

// check requires every request answered as its class allows, and none
// answered twice.
func (l *ledger) check(t *testing.T, nc *nats.Conn) {
	t.Helper()
	require.NoError(t, nc.Flush())
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.subs {
		assert.Empty(t, l.replies[i], "a second answer on %s", s.Subject)
		s.Unsubscribe()
	}
	assert.Empty(t, l.failures)
}

func (l *ledger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.outcomes))
	for k := range l.outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %d; ", k, l.outcomes[k])
	}
	return b.String()
}

// jobsThroughRestarts submits jobs, restarts the node without grace (its
// job in flight goes back to the queue) and then the server (the streams
// are on disk), submits more, and requires each answered exactly once.
func jobsThroughRestarts(t *testing.T, n **node.Node, eng node.Engine, opts []node.Option, srv **server.Server, sopts *server.Options, frames []msgs.Frame, ego []msgs.EgoPose) {
	nc := chaosConn(t, (*srv).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*chaosAnswer)
	defer cancel()
	jc, err := node.NewJobClient(ctx, nc, "chaos")
	require.NoError(t, err)
	defer jc.Close()
	submit := func(i int) string {
		id := jc.ID(strconv.Itoa(i))
		require.NoError(t, jc.Submit(ctx, &msgs.InferRequest{ID: id, Frames: frames, EgoHistory: ego, MaxReasoningTokens: 2}))
		return id
	}
	var ids []string
	for i := range chaosJobs / 2 {
		ids = append(ids, submit(i))
	}
	hard, stop := context.WithCancel(context.Background())
	stop()
	(*n).Shutdown(hard) // no grace: what runs is handed back
	*n = startChaosNode(t, eng, opts)

	(*srv).Shutdown()
	(*srv).WaitForShutdown()
	*srv = natstest.RunServer(sopts)
	t.Cleanup((*srv).Shutdown)
	for i := chaosJobs / 2; i < chaosJobs; i++ {
		ids = append(ids, submit(i))
	}
	for _, id := range ids {
		p, e, err := jc.Wait(ctx, id)
		require.NoError(t, err, id)
		require.Nil(t, e, "job %s: %+v", id, e)
		assert.Equal(t, id, p.ID)
	}
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, node.ResultsStream)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(node.ResultsPrefix+"chaos.>"))
	require.NoError(t, err)
	for _, id := range ids {
		assert.Equal(t, uint64(1), info.State.Subjects[node.ResultSubject(id)], "one answer stored for %s", id)
	}
	require.NoError(t, (*n).Shutdown(ctx))
}

// memWatch samples the live heap (as of each garbage collection) and the
// resident set while the scenario runs.
type memWatch struct {
	start           time.Time
	heap0, rss0     uint64
	heapMax, rssMax atomic.Uint64
	done            chan struct{}
	wg              sync.WaitGroup
}

func watchMemory(t *testing.T) *memWatch {
	t.Helper()
	runtime.GC()
	w := &memWatch{start: time.Now(), heap0: liveHeap(), rss0: rss(), done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			setMax(&w.heapMax, liveHeap())
			setMax(&w.rssMax, rss())
			select {
			case <-tick.C:
			case <-w.done:
				return
			}
		}
	}()
	return w
}

// stop returns how much the heap in use and the resident set grew at most.
func (w *memWatch) stop() (heap, rss uint64) {
	close(w.done)
	w.wg.Wait()
	grow := func(max, base uint64) uint64 {
		if max < base {
			return 0
		}
		return max - base
	}
	return grow(w.heapMax.Load(), w.heap0), grow(w.rssMax.Load(), w.rss0)
}

func setMax(a *atomic.Uint64, v uint64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// liveHeap returns the heap the last garbage collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// rss returns the process's resident set in bytes (Linux), or 0.
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
