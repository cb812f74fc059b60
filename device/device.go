// Package device opens the compute backend a user asks for by name:
// "cpu", "cuda", or "auto" (CUDA when a driver and a GPU are found, else
// the CPU backend, saying which).
package device

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/cuda"
)

// Names are the accepted device names.
var Names = []string{"cpu", "cuda", "auto"}

// Options configure the backend.
type Options struct {
	// Threads is the CPU backend's thread count (0: all cores).
	Threads int
	// Ordinal is the CUDA device index.
	Ordinal int
	// Budget caps the CUDA backend's device memory in bytes (0: none).
	Budget int64
}

// Valid reports whether name is a device name.
func Valid(name string) bool {
	for _, n := range Names {
		if n == name {
			return true
		}
	}
	return false
}

// Open starts the backend name (see Names) and writes one line to log
// saying which backend runs and why.
func Open(name string, o Options, log io.Writer) (backend.Backend, error) {
	switch name {
	case "cpu":
		return openCPU(o, log, "")
	case "cuda":
		if err := cuda.Available(); err != nil {
			return nil, fmt.Errorf("--device cuda: %w", err)
		}
		return openCUDA(o, log)
	case "auto":
		if err := cuda.Available(); err != nil {
			return openCPU(o, log, fmt.Sprintf(" (auto: %v)", err))
		}
		return openCUDA(o, log)
	default:
		return nil, fmt.Errorf("unknown device %q (want one of %v)", name, Names)
	}
}

func openCPU(o Options, log io.Writer, why string) (backend.Backend, error) {
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	be, err := cpu.New(cpu.WithThreads(threads))
	if err != nil {
		return nil, fmt.Errorf("starting the cpu backend: %w", err)
	}
	fmt.Fprintf(log, "vlanode: cpu backend, %d threads%s\n", threads, why)
	return be, nil
}

func openCUDA(o Options, log io.Writer) (backend.Backend, error) {
	opts := []cuda.Option{cuda.WithDevice(o.Ordinal)}
	if o.Budget > 0 {
		opts = append(opts, cuda.WithBudget(o.Budget))
	}
	be, err := cuda.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the cuda backend: %w", err)
	}
	d := be.Device()
	fmt.Fprintf(log, "vlanode: cuda backend on device %d: %s (sm_%d, %.1f GiB; %s, %s)\n",
		d.Ordinal, d.Name, d.ComputeCapability, float64(d.TotalMemory)/(1<<30), d.Driver, d.CUBLAS)
	if !strings.HasPrefix(d.CUBLASLt, "lib") {
		fmt.Fprintf(log, "vlanode: no cuBLASLt (%s): biases are added by separate kernels, which is slower\n", d.CUBLASLt)
	}
	return be, nil
}
