package replay

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natstest "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
	"vlanode/node"
)

// batchingNode answers vla.gpu-a.infer as a node that batches would: each
// request in its own goroutine after delay, so that requests in flight at
// once are answered at once. It answers each id's first request overloaded
// when overloadFirst is set, and counts the most requests in flight.
type batchingNode struct {
	delay         time.Duration
	overloadFirst bool

	inflight, most atomic.Int32
	mu             sync.Mutex
	seen           map[string]int
}

func (b *batchingNode) serve(t *testing.T, nc *nats.Conn) {
	b.seen = map[string]int{}
	sub, err := nc.Subscribe(node.InferSubject("gpu-a"), func(m *nats.Msg) {
		req, err := msgs.DecodeInferRequest(m.Data)
		if err != nil {
			t.Errorf("bad request: %v", err)
			return
		}
		b.mu.Lock()
		b.seen[req.ID]++
		first := b.seen[req.ID] == 1
		b.mu.Unlock()
		if b.overloadFirst && first {
			data, _ := msgs.Marshal(msgs.NewError(req.ID, msgs.CodeOverloaded, "queue full"))
			m.Respond(data)
			return
		}
		go func() {
			now := b.inflight.Add(1)
			for most := b.most.Load(); now > most && !b.most.CompareAndSwap(most, now); most = b.most.Load() {
			}
			time.Sleep(b.delay)
			b.inflight.Add(-1)
			p := &msgs.Plan{V: msgs.Version, ID: req.ID, Node: "gpu-a", Model: "replay-test", StampNs: req.Frames[len(req.Frames)-1].StampNs,
				Trajectory: msgs.Trajectory{DT: 0.1}, Reasoning: "ok"}
			data, err := msgs.Marshal(p)
			if err != nil {
				t.Errorf("plan: %v", err)
				return
			}
			m.Respond(data)
		}()
	})
	require.NoError(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
}

// folderClips are clips of the folders under dir.
func folderClips(t *testing.T, dir string) []Clip {
	t.Helper()
	dirs, err := ClipFolders(dir, testInfo.Cameras)
	require.NoError(t, err)
	var clips []Clip
	for _, d := range dirs {
		clips = append(clips, Clip{Name: filepath.Base(d), Open: func(context.Context) (Source, error) {
			return OpenFolder(d, FolderConfig{Info: testInfo})
		}})
	}
	return clips
}

// clipSet writes n clips of 2 frames a camera (one request each) and one
// clip without ego.csv (which the model needs) under one folder.
func clipSet(t *testing.T, n int) string {
	t.Helper()
	root := t.TempDir()
	for i := range n {
		require.NoError(t, os.Rename(writeClip(t, 2), filepath.Join(root, "clip-"+string(rune('a'+i)))))
	}
	broken := writeClip(t, 2)
	require.NoError(t, os.Remove(filepath.Join(broken, EgoFile)))
	require.NoError(t, os.Rename(broken, filepath.Join(root, "clip-zz-no-ego")))
	require.NoError(t, os.Mkdir(filepath.Join(root, "notes"), 0o755)) // not a clip: skipped
	return root
}

// TestPlayManyKeepsClipsInFlight: Concurrency clips play at once, so a node
// that answers requests in flight together sees that many at once and the
// run takes about clips/Concurrency answer times; a clip that cannot be
// opened is reported by name and the others go on; every plan and error
// reaches the callbacks with its clip, under distinct ids.
func TestPlayManyKeepsClipsInFlight(t *testing.T) {
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	srv := natstest.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	const clips, delay = 8, 300 * time.Millisecond
	for _, c := range []struct {
		name        string
		concurrency int
		overload    bool
	}{{"serial", 1, false}, {"four at once", 4, false}, {"four at once, overloaded first", 4, true}} {
		t.Run(c.name, func(t *testing.T) {
			bn := &batchingNode{delay: delay, overloadFirst: c.overload}
			bn.serve(t, nc)
			var plansByClip = map[string]int{}
			ids := map[string]bool{}
			var failed []ClipFailure
			sum, err := PlayMany(context.Background(), nc, folderClips(t, clipSet(t, clips)), ManyConfig{
				Clip:        Config{Node: "gpu-a", Info: testInfo, Explicit: true, Fast: true, RetryOverloaded: true},
				Concurrency: c.concurrency,
				OnPlan: func(clip string, p *msgs.Plan, _ time.Duration) {
					plansByClip[clip]++
					ids[p.ID] = true
				},
				OnClipFailed: func(f ClipFailure) { failed = append(failed, f) },
			})
			require.NoError(t, err)
			assert.Equal(t, clips+1, sum.Clips)
			assert.Equal(t, clips, sum.Plans, "errors: %v", sum.Distinct)
			assert.Equal(t, 0, sum.ErrorCount())
			assert.Len(t, plansByClip, clips)
			assert.Len(t, ids, clips, "ids distinct across clips")
			require.Len(t, sum.FailedClips, 1)
			assert.Equal(t, "clip-zz-no-ego", sum.FailedClips[0].Clip)
			assert.Contains(t, sum.FailedClips[0].Error, "has no ego.csv")
			assert.Equal(t, sum.FailedClips, failed)
			assert.Equal(t, int32(c.concurrency), bn.most.Load(), "requests in flight at once")
			want := time.Duration(clips/c.concurrency) * delay
			assert.GreaterOrEqual(t, sum.Elapsed, want)
			assert.Less(t, sum.Elapsed, want+delay*3/2, "the clips overlap")
			assert.InDelta(t, float64(clips)/sum.Elapsed.Seconds(), sum.PlansPerSecond(), 1e-9)
			if c.overload {
				assert.Equal(t, clips, sum.Retries)
			} else {
				assert.Zero(t, sum.Retries)
			}
		})
	}
}

// TestPlayManyThroughNode: clips played at once into a real node whose
// queue holds one request: without retries the requests it sheds fail,
// each reported with its clip; with RetryOverloaded every one is answered.
func TestPlayManyThroughNode(t *testing.T) {
	opts := natstest.DefaultTestOptions
	opts.Port = -1
	srv := natstest.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	n, err := node.Start(ctx, slowEngine{d: 30 * time.Millisecond}, node.WithName("gpu-a"), node.WithNATSURL(srv.ClientURL()),
		node.WithQueueBound(1))
	require.NoError(t, err)
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	info := discover(t, nc)

	root := t.TempDir()
	for i := range 5 {
		require.NoError(t, os.Rename(writeClip(t, 4), filepath.Join(root, "clip-"+string(rune('a'+i)))))
	}
	for _, retry := range []bool{false, true} {
		var errs []string
		sum, err := PlayMany(context.Background(), nc, folderClips(t, root), ManyConfig{
			Clip:        Config{Node: "gpu-a", Info: info, Explicit: true, Fast: true, RetryOverloaded: retry, Timeout: waitFor},
			Concurrency: 5,
			OnError:     func(clip, _, code, _ string) { errs = append(errs, clip+" "+code) },
		})
		require.NoError(t, err)
		assert.Equal(t, 15, sum.Requests)
		if !retry {
			assert.Positive(t, sum.Errors["overloaded"], "a queue of one sheds requests of five clips at once")
			assert.Equal(t, 15, sum.Plans+sum.ErrorCount())
			assert.Len(t, errs, sum.ErrorCount())
			assert.Regexp(t, `^clip-[a-e] overloaded$`, errs[0])
			continue
		}
		assert.Equal(t, 15, sum.Plans, "errors: %v", sum.Distinct)
		assert.Positive(t, sum.Retries)
		assert.Empty(t, errs)
	}
}
