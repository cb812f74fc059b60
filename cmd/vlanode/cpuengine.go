package main

import (
	"errors"
	"fmt"
	"runtime"

	"vlanode/cpu"
	"vlanode/cpu/kern"
)

// newCPUEngine starts the CPU engine's backend: the bf16 kernels on
// threads pinned workers (0: every core but two, which stay with the Go
// runtime and the CUDA driver's threads), and a small Go pool for the rest
// of a share's ops (the norm, the copies). The returned function closes
// both.
func newCPUEngine(threads int) (*cpu.Backend, func() error, error) {
	if threads <= 0 {
		threads = max(1, runtime.NumCPU()-2)
	}
	pool, err := kern.NewPool(kern.Options{Threads: threads})
	if err != nil {
		return nil, nil, fmt.Errorf("the CPU engine's kernels: %w", err)
	}
	be, err := cpu.New(cpu.WithThreads(2), cpu.WithKernels(pool))
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("the CPU engine: %w", err), pool.Close())
	}
	return be, func() error { return errors.Join(be.Close(), pool.Close()) }, nil
}
