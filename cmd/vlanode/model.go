package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/device"
	"vlanode/models/qwen3"
	"vlanode/models/qwen3vl"
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

// loadedModel is a model with what keeps it alive: a Qwen3 text model
// (model) or a Qwen3-VL model (vl).
type loadedModel struct {
	be    backend.Backend
	ck    *safetensors.Checkpoint
	model *qwen3.Model
	vl    *qwen3vl.Model
}

// vocab is the model's vocabulary size.
func (l *loadedModel) vocab() int {
	if l.vl != nil {
		return l.vl.Config.Text.VocabSize
	}
	return l.model.Config.VocabSize
}

func (l *loadedModel) Close() {
	if l.model != nil {
		l.model.Close()
	}
	if l.vl != nil {
		l.vl.Close()
	}
	if l.ck != nil {
		l.ck.Close()
	}
	if l.be != nil {
		l.be.Close()
	}
}

// loadModel opens the backend and the checkpoint and binds a Qwen3 text
// model (for the commands that run token ids only).
func (f *modelFlags) loadModel(log io.Writer) (*loadedModel, error) {
	return f.load(log, []string{"qwen3"})
}

// loadAnyModel is loadModel for every model_type eval runs: qwen3 and
// qwen3_vl.
func (f *modelFlags) loadAnyModel(log io.Writer) (*loadedModel, error) {
	return f.load(log, []string{"qwen3", "qwen3_vl"})
}

func (f *modelFlags) load(log io.Writer, accept []string) (*loadedModel, error) {
	mt, err := configs.ReadModelType(f.dir)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(accept, mt) {
		if slices.Contains(configs.SupportedModelTypes, mt) {
			return nil, fmt.Errorf("%s: model_type %q: this command runs %v", f.dir, mt, accept)
		}
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
	var c *configs.Qwen3
	switch mt {
	case "qwen3":
		if l.model, err = qwen3.Load(l.be, f.dir, l.ck); err == nil {
			c = l.model.Config
		}
	case "qwen3_vl":
		if l.vl, err = qwen3vl.Load(l.be, f.dir, l.ck); err == nil {
			c = l.vl.Config.Text
		}
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	fmt.Fprintf(log, "vlanode: loaded %s (%s, %d layers, hidden %d, vocab %d) in %v\n",
		f.dir, mt, c.NumHiddenLayers, c.HiddenSize, c.VocabSize, time.Since(start).Round(time.Millisecond))
	return l, nil
}
