package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"path/filepath"
	"strings"

	"vlanode/engine"
	"vlanode/msgs"
	"vlanode/node"
)

// alpamayoSpec is serve's engine: an Alpamayo-R1 checkpoint (--model) on
// the backend --device names, within serve's --budget.
func alpamayoSpec() engineSpec {
	var mf modelFlags
	var lf layerFlags
	var vlm string
	var maxPixels, samples int
	var hostPre bool
	return engineSpec{
		flags: func(fs *flag.FlagSet) {
			mf.register(fs)
			lf.register(fs)
			fs.StringVar(&vlm, "vlm", "", "the VLM's config folder, overriding the checkpoint's vlm_name_or_path")
			fs.IntVar(&maxPixels, "max-request-pixels", engine.DefaultMaxRequestPixels,
				"most pixels one request's frames may hold (sum of width × height); more: bad_request before any is decoded")
			fs.IntVar(&samples, "samples", 1, "trajectory samples a request may ask for (num_traj_samples) that the plan holds for each request of a batch; more are refused as unsupported (an unlimited budget takes up to 16)")
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
			if samples < 1 || samples > msgs.MaxTrajSamples {
				return nil, usagef("--samples must be 1 to %d", msgs.MaxTrajSamples)
			}
			bm, err := loadBudgeted(budgetSpec{
				dir: mf.dir, vlm: vlm, device: mf.device, threads: mf.threads, ordinal: max(env.GPU, 0),
				budget: int64(env.BudgetBytes), layers: lf, batch: max(env.MaxBatch, 1), samples: samples,
			}, logWriter{env.Log})
			if err != nil {
				return nil, err
			}
			capacity := engine.Capacity{Batch: bm.batch, Samples: samples, Unlimited: env.BudgetBytes == 0}
			eng, err := engine.NewAlpamayo(bm.model, filepath.Base(filepath.Clean(mf.dir)), env.BudgetBytes,
				engine.MaxRequestPixels(maxPixels), engine.PreprocessOnHost(hostPre), engine.PlanCapacity(capacity))
			if err != nil {
				return nil, errors.Join(err, bm.Close())
			}
			return &servedModel{Alpamayo: eng, bm: bm}, nil
		},
	}
}

// servedModel is the engine serve runs; Close releases the engine's
// preprocessing memory, the model, the executor and the backend when the
// node stops.
type servedModel struct {
	*engine.Alpamayo
	bm *budgeted
}

func (s *servedModel) Close() error { return errors.Join(s.Alpamayo.Close(), s.bm.Close()) }

// logWriter turns the backend's log lines into structured log records.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		w.log.Info(strings.TrimPrefix(line, "vlanode: "))
	}
	return len(p), nil
}
