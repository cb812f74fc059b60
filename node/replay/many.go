package replay

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/schollz/progressbar/v3"

	"vlanode/msgs"
)

// Clip is one clip of a replay over many: its name (in summaries and in
// every plan's record) and how to open it.
type Clip struct {
	Name string
	Open func(ctx context.Context) (Source, error)
}

// ManyConfig says how to play many clips into one node.
type ManyConfig struct {
	// Clip is how each clip is played. Its Progress, IDPrefix, OnPlan and
	// OnError are PlayMany's: each clip gets the prefix c<index>- so that
	// ids stay distinct across clips.
	Clip Config
	// Concurrency is the number of clips played at once (0 means 1). A
	// clip played as fast as answered keeps one request in flight, so a
	// node sees up to Concurrency requests at once.
	Concurrency int
	// Progress, when set, shows one bar over the clips, with the plans
	// received and the clips failed, redrawn at most twice a second.
	Progress io.Writer
	// OnPlan and OnError are called, serialized across every clip, with
	// each plan received and each request failed, and the clip's name.
	OnPlan  func(clip string, plan *msgs.Plan, rtt time.Duration)
	OnError func(clip, id, code, message string)
	// OnClipFailed is called, serialized with OnPlan, when a clip cannot
	// be opened or stops early.
	OnClipFailed func(f ClipFailure)
}

// PlayMany plays clips into one node, Concurrency at a time, and returns
// their summaries merged, with the run's wall time. A clip that cannot be
// opened, or that stops early, is recorded in Summary.FailedClips and the
// others go on; PlayMany itself fails only when ctx ends.
func PlayMany(ctx context.Context, nc *nats.Conn, clips []Clip, cfg ManyConfig) (*Summary, error) {
	workers := max(cfg.Concurrency, 1)
	total := newSummary(cfg.Clip)
	total.Clips = len(clips)
	var mu sync.Mutex // serializes the callbacks and guards total and bar
	var bar *progressbar.ProgressBar
	if cfg.Progress != nil {
		bar = progressbar.NewOptions(len(clips),
			progressbar.OptionSetWriter(cfg.Progress),
			progressbar.OptionSetDescription("replay"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("clips"),
			progressbar.OptionThrottle(500*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(cfg.Progress) }),
		)
	}
	live := &liveCounts{}
	describe := func() {
		if bar != nil {
			bar.Describe(fmt.Sprintf("replay: %d plans, %d errors, %d clips failed", live.plans, live.errors, len(total.FailedClips)))
		}
	}
	failClip := func(name string, err error) {
		f := ClipFailure{Clip: name, Error: err.Error()}
		total.FailedClips = append(total.FailedClips, f)
		if cfg.OnClipFailed != nil {
			cfg.OnClipFailed(f)
		}
		describe()
	}

	start := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sum, err := playClip(ctx, nc, clips[i], i, cfg, &mu, live, describe)
				mu.Lock()
				if sum != nil {
					total.merge(sum)
					if total.Mode == "" {
						total.Mode = sum.Mode
					}
				}
				if err != nil && ctx.Err() == nil {
					failClip(clips[i].Name, err)
				}
				if bar != nil {
					bar.Add(1)
				}
				describe()
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range clips {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	total.Elapsed = time.Since(start)
	if bar != nil && !bar.IsFinished() {
		bar.Finish()
	}
	return total, ctx.Err()
}

// liveCounts are the plans and failed requests so far, for the progress
// bar (the summaries merge as each clip ends).
type liveCounts struct{ plans, errors int }

// playClip opens and plays clip i; callbacks, live and describe are used
// with mu held.
func playClip(ctx context.Context, nc *nats.Conn, clip Clip, i int, cfg ManyConfig, mu *sync.Mutex, live *liveCounts, describe func()) (*Summary, error) {
	src, err := clip.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	c := cfg.Clip
	c.Progress = nil
	c.IDPrefix = fmt.Sprintf("c%d-", i)
	c.OnPlan = func(p *msgs.Plan, rtt time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		live.plans++
		if cfg.OnPlan != nil {
			cfg.OnPlan(clip.Name, p, rtt)
		}
		describe()
	}
	c.OnError = func(id, code, msg string) {
		mu.Lock()
		defer mu.Unlock()
		live.errors++
		if cfg.OnError != nil {
			cfg.OnError(clip.Name, id, code, msg)
		}
		describe()
	}
	return Play(ctx, nc, src, c)
}
