package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"vlanode/cuda"
	"vlanode/engine"
	"vlanode/msgs"
	"vlanode/node"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/vision"
)

// alpamayoSpec is serve's engine: an Alpamayo-R1 checkpoint (--model) on
// the backend --device names, within serve's --budget.
func alpamayoSpec() engineSpec {
	var mf modelFlags
	var lf layerFlags
	var vlm string
	var maxPixels int
	var hostPre bool
	return engineSpec{
		flags: func(fs *flag.FlagSet) {
			mf.register(fs)
			lf.register(fs)
			fs.StringVar(&vlm, "vlm", "", "the VLM's config folder, overriding the checkpoint's vlm_name_or_path")
			fs.IntVar(&maxPixels, "max-request-pixels", engine.DefaultMaxRequestPixels,
				"most pixels one request's frames may hold (sum of width × height); more: bad_request before any is decoded")
			fs.BoolVar(&hostPre, "host-preprocess", false, "resize, normalize and patchify frames on the CPU even when the model is on CUDA (default: on the GPU there)")
		},
		build: func(ctx context.Context, env engineEnv) (node.Engine, error) {
			if err := mf.check(); err != nil {
				return nil, err
			}
			if err := lf.check(); err != nil {
				return nil, err
			}
			if maxPixels < 1 {
				return nil, usagef("--max-request-pixels must be at least 1")
			}
			s := &servedModel{
				spec: budgetSpec{dir: mf.dir, vlm: vlm, device: mf.device, threads: mf.threads, ordinal: max(env.GPU, 0), layers: lf},
				name: filepath.Base(filepath.Clean(mf.dir)), settings: []engine.Setting{engine.MaxRequestPixels(maxPixels), engine.PreprocessOnHost(hostPre)},
				log: logWriter{env.Log},
			}
			if err := s.load(env.BudgetBytes); err != nil {
				return nil, err
			}
			return s, nil
		},
	}
}

// servedModel is the engine serve runs: the model loaded within a budget,
// which Rebudget changes while the node serves. Close releases the
// engine's preprocessing memory, the model, the executor and the backend
// when the node stops.
type servedModel struct {
	spec     budgetSpec // what to load; its budget is the one loaded
	name     string
	settings []engine.Setting
	log      io.Writer

	mu  sync.RWMutex // Infer reads; Rebudget and Close write
	eng *engine.Alpamayo
	bm  *budgeted
	// broken says why no model is loaded: neither the new budget nor the
	// old one could be loaded again.
	broken error

	// info is what Info returns: the model, the budget it was loaded
	// within and its plan's summary, replaced once a load is done, so
	// that Status never waits for a re-plan.
	info atomic.Pointer[node.EngineInfo]
}

var (
	_ node.Rebudgeter   = (*servedModel)(nil)
	_ node.FrameChecker = (*servedModel)(nil)
)

// load plans for budget, loads the model and wraps it; mu is held (or
// the model is not shared yet).
func (s *servedModel) load(budget uint64) error {
	sp := s.spec
	sp.budget = int64(budget)
	plan, mode, err := planBudgeted(sp)
	if err != nil {
		return err
	}
	bm, err := loadPlanned(sp, plan, mode, s.log)
	if err != nil {
		return err
	}
	eng, err := engine.NewAlpamayo(bm.model, s.name, budget, s.settings...)
	if err != nil {
		return errors.Join(err, bm.Close())
	}
	s.spec, s.eng, s.bm, s.broken = sp, eng, bm, nil
	info := eng.Info()
	info.Plan = planSummary(bm)
	s.info.Store(&info)
	return nil
}

// unload releases the loaded model and everything it holds on the
// device; mu is held.
func (s *servedModel) unload() error {
	if s.eng == nil {
		return nil
	}
	err := errors.Join(s.eng.Close(), s.bm.Close())
	s.eng, s.bm = nil, nil
	return err
}

// Info describes the model, the budget it serves within and the plan's
// summary; during a re-plan, those of the model that was loaded.
func (s *servedModel) Info() node.EngineInfo { return *s.info.Load() }

// Infer runs one inference (node.Engine).
func (s *servedModel) Infer(ctx context.Context, obs *node.Observation) (*msgs.Plan, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.eng == nil {
		return nil, fmt.Errorf("no model is loaded: %w", s.broken)
	}
	return s.eng.Infer(ctx, obs)
}

// DeviceBytes is the device memory the model's backend counts against its
// budget now (context, weights, slots, caches); 0 on the CPU backend.
func (s *servedModel) DeviceBytes() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.bm == nil {
		return 0
	}
	if cb, ok := s.bm.be.(*cuda.Backend); ok {
		return uint64(max(cb.Usage().InUse, 0))
	}
	return 0
}

// CheckFrame checks a frame without decoding it (node.FrameChecker).
func (s *servedModel) CheckFrame(f *msgs.Frame) error { return vision.CheckFrame(f) }

// Rebudget re-plans the model for a new budget (node.Rebudgeter). It plans
// first, so that a budget the model cannot run within is refused before
// anything changes; then it releases the model and everything it holds
// on the device (the backend with its context included: the device
// memory in use drops to none, within the old budget and the new), and
// loads the checkpoint again with the new plan, the backend's allocator
// limited to the new budget. If that fails it loads the old budget again.
// The checkpoint's weights are memory-mapped and stay in the page cache,
// so the reload reads them from memory, not from disk.
func (s *servedModel) Rebudget(ctx context.Context, budget uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spec
	sp.budget = int64(budget)
	if _, _, err := planBudgeted(sp); err != nil {
		return fmt.Errorf("%w: %w", node.ErrUnsupported, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	old := uint64(s.spec.budget)
	start := time.Now()
	if err := s.unload(); err != nil {
		fmt.Fprintf(s.log, "vlanode: releasing the model for a budget change: %v\n", err)
	}
	err := s.load(budget)
	if err == nil {
		fmt.Fprintf(s.log, "vlanode: re-planned from %s to %s in %v\n", budgetText(int64(old)), budgetText(int64(budget)), time.Since(start).Round(time.Millisecond))
		return nil
	}
	if errBack := s.load(old); errBack != nil {
		s.broken = fmt.Errorf("loading within %s failed (%w), and within the old %s too (%w)", budgetText(int64(budget)), err, budgetText(int64(old)), errBack)
		info := *s.info.Load()
		info.Plan = nil // no plan is loaded
		s.info.Store(&info)
		return s.broken
	}
	return fmt.Errorf("loading within %s: %w; serving within %s again", budgetText(int64(budget)), err, budgetText(int64(old)))
}

// Close releases the engine's preprocessing memory, the model, the
// executor and the backend.
func (s *servedModel) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unload()
}

// planSummary is the Status's summary of a loaded plan.
func planSummary(b *budgeted) *msgs.PlanSummary {
	sum := &msgs.PlanSummary{Mode: b.mode.String()}
	if b.be.Name() == "cuda" { // the plan predicts the profiled GPU's time
		sum.PredictedMs = b.plan.TotalMs
	}
	for _, u := range b.plan.Units {
		switch u.Weights {
		case placement.Resident:
			sum.ResidentBytes += uint64(u.Bytes)
		case placement.Streamed:
			sum.StreamedBytes += uint64(u.Bytes)
		case placement.Host:
			sum.HostBytes += uint64(u.Bytes)
		}
	}
	for p, n := range b.plan.Bytes {
		switch p {
		case residency.PurposeSlots, residency.PurposeKV, residency.PurposeActivations, residency.PurposeWorkspaces, residency.PurposeContext:
			sum.FixedBytes += uint64(n)
		}
	}
	return sum
}

// logWriter turns the backend's log lines into structured log records.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		w.log.Info(strings.TrimPrefix(line, "vlanode: "))
	}
	return len(p), nil
}
