package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/device"
	"vlanode/models/qwen3"
	"vlanode/safetensors"
)

// modelFlags are the flags of every command that runs a model.
type modelFlags struct {
	dir     string
	device  string
	threads int
}

func (f *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "model", "", "model directory (config.json and safetensors)")
	fs.StringVar(&f.device, "device", "auto", "compute device: cpu, cuda, or auto (cuda when a driver and a GPU are found)")
	fs.IntVar(&f.threads, "threads", runtime.NumCPU(), "threads of the cpu backend")
}

func (f *modelFlags) check() error {
	if f.dir == "" {
		return usagef("--model is required")
	}
	if f.threads <= 0 {
		return usagef("--threads must be positive")
	}
	if !device.Valid(f.device) {
		return usagef("unknown --device %q (want one of %v)", f.device, device.Names)
	}
	return nil
}

// openBackend starts the compute backend the flags name.
func (f *modelFlags) openBackend(log io.Writer) (backend.Backend, error) {
	return device.Open(f.device, device.Options{Threads: f.threads}, log)
}

// loadedModel is a text model with what keeps it alive.
type loadedModel struct {
	be    backend.Backend
	ck    *safetensors.Checkpoint
	model *qwen3.Model
}

func (l *loadedModel) Close() {
	if l.model != nil {
		l.model.Close()
	}
	if l.ck != nil {
		l.ck.Close()
	}
	if l.be != nil {
		l.be.Close()
	}
}

// loadModel opens the backend and the checkpoint and binds the model.
func (f *modelFlags) loadModel(log io.Writer) (*loadedModel, error) {
	mt, err := configs.ReadModelType(f.dir)
	if err != nil {
		return nil, err
	}
	if mt != "qwen3" {
		return nil, configs.UnknownArchitecture(f.dir, mt)
	}
	l := &loadedModel{}
	if l.be, err = f.openBackend(log); err != nil {
		return nil, err
	}
	start := time.Now()
	if l.ck, err = safetensors.Open(f.dir); err != nil {
		l.Close()
		return nil, err
	}
	if l.model, err = qwen3.Load(l.be, f.dir, l.ck); err != nil {
		l.Close()
		return nil, err
	}
	c := l.model.Config
	fmt.Fprintf(log, "vlanode: loaded %s (qwen3, %d layers, hidden %d, vocab %d) in %v\n",
		f.dir, c.NumHiddenLayers, c.HiddenSize, c.VocabSize, time.Since(start).Round(time.Millisecond))
	return l, nil
}
