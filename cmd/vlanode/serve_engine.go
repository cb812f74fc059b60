package main

import (
	"context"
	"flag"
	"log/slog"
	"path/filepath"
	"strings"

	"vlanode/backend"
	"vlanode/device"
	"vlanode/engine"
	"vlanode/models/alpamayo"
	"vlanode/node"
)

// alpamayoSpec is serve's engine: an Alpamayo-R1 checkpoint (--model) on
// the backend --device names, within serve's --budget.
func alpamayoSpec() engineSpec {
	var mf modelFlags
	var vlm string
	return engineSpec{
		flags: func(fs *flag.FlagSet) {
			mf.register(fs)
			fs.StringVar(&vlm, "vlm", "", "the VLM's config folder, overriding the checkpoint's vlm_name_or_path")
		},
		build: func(ctx context.Context, env engineEnv) (node.Engine, error) {
			if err := mf.check(); err != nil {
				return nil, err
			}
			be, err := device.Open(mf.device, device.Options{
				Threads: mf.threads, Ordinal: max(env.GPU, 0), Budget: int64(env.BudgetBytes),
			}, logWriter{env.Log})
			if err != nil {
				return nil, err
			}
			m, err := alpamayo.Load(be, mf.dir, alpamayo.LoadOptions{VLM: vlm})
			if err != nil {
				be.Close()
				return nil, err
			}
			eng, err := engine.NewAlpamayo(m, filepath.Base(filepath.Clean(mf.dir)), env.BudgetBytes)
			if err != nil {
				m.Close()
				be.Close()
				return nil, err
			}
			return &servedModel{Alpamayo: eng, model: m, be: be}, nil
		},
	}
}

// servedModel is the engine serve runs; Close releases the model and the
// backend when the node stops.
type servedModel struct {
	*engine.Alpamayo
	model *alpamayo.Model
	be    backend.Backend
}

func (s *servedModel) Close() error {
	s.model.Close()
	return s.be.Close()
}

// logWriter turns the backend's log lines into structured log records.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		w.log.Info(strings.TrimPrefix(line, "vlanode: "))
	}
	return len(p), nil
}
