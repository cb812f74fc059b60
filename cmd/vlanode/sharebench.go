package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/cuda"
	"vlanode/tensor"
)

// The MLP share the CPU engine is measured on: a VLM-shaped layer's
// (4096 → 12288 → 4096, bf16, 302 MB).
const shareHidden, shareInter = 4096, 12288

// shareBench times the CPU engine's MLP share of VLM-shaped layers whose
// weights lie in pinned host memory allocated as the executor's blobs are,
// taken in turn so that every call reads its weights from memory.
type shareBench struct {
	engine            *cpu.Backend
	closeEngine       func() error
	blobs             [][]byte
	gates, ups, downs []backend.Tensor
	rng               *rand.Rand
}

// newShareBench starts a CPU engine of threads kernel threads (0: the
// engine's default) and fills layers layers' weights: with normal values
// (random, as measureCPU has always taken them) or, when !random, with one
// MiB of them repeated (a probe's fill, 20 times faster; the kernels' time
// does not depend on the values).
func newShareBench(threads, layers int, random bool) (*shareBench, error) {
	engine, closeEngine, err := newCPUEngine(threads)
	if err != nil {
		return nil, err
	}
	sb := &shareBench{engine: engine, closeEngine: closeEngine, rng: rand.New(rand.NewPCG(3, 4))}
	pattern := make([]byte, 1<<20)
	for i := 0; i < len(pattern); i += 2 {
		v := tensor.F32ToBF16(float32(sb.rng.NormFloat64() * 0.02))
		pattern[i], pattern[i+1] = byte(v), byte(v>>8)
	}
	weight := func(rows, cols int) (backend.Tensor, error) {
		b, err := cuda.HostAlloc(int64(rows * cols * 2))
		if err != nil {
			return nil, err
		}
		sb.blobs = append(sb.blobs, b)
		if random {
			for i := 0; i < len(b); i += 2 {
				v := tensor.F32ToBF16(float32(sb.rng.NormFloat64() * 0.02))
				b[i], b[i+1] = byte(v), byte(v>>8)
			}
		} else {
			for i := 0; i < len(b); i += len(pattern) {
				copy(b[i:], pattern)
			}
		}
		return engine.Weight("weights", tensor.BF16, []int{rows, cols}, b)
	}
	for range layers {
		g, err := weight(shareInter, shareHidden)
		if err == nil {
			sb.gates = append(sb.gates, g)
			var u backend.Tensor
			if u, err = weight(shareInter, shareHidden); err == nil {
				sb.ups = append(sb.ups, u)
				var d backend.Tensor
				if d, err = weight(shareHidden, shareInter); err == nil {
					sb.downs = append(sb.downs, d)
				}
			}
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("the CPU share's weights: %w", err), sb.close())
		}
	}
	return sb, nil
}

// time is the median time, ms, of reps calls of the share [0, hi) of the
// intermediate dimension over rows rows, after two untimed ones, each call
// on the next layer's weights.
func (sb *shareBench) time(rows, hi, reps int) (float64, error) {
	x, err := sb.engine.Alloc("x", tensor.F32, rows, shareHidden)
	if err != nil {
		return 0, err
	}
	defer sb.engine.Free(x)
	y, err := sb.engine.Alloc("y", tensor.F32, rows, shareHidden)
	if err != nil {
		return 0, err
	}
	defer sb.engine.Free(y)
	xs := make([]float32, rows*shareHidden)
	for i := range xs {
		xs[i] = float32(sb.rng.NormFloat64())
	}
	if err := sb.engine.Upload(x, xs); err != nil {
		return 0, err
	}
	layers := len(sb.gates)
	var t []float64
	for i := range reps + 2 {
		l := i % layers
		start := time.Now()
		if err := sb.engine.MLPShare(y, x, sb.gates[l], sb.ups[l], sb.downs[l], 0, hi); err != nil {
			return 0, err
		}
		if i >= 2 {
			t = append(t, float64(time.Since(start))/1e6)
		}
	}
	sort.Float64s(t)
	return t[len(t)/2], nil
}

// close frees the weights and stops the engine.
func (sb *shareBench) close() error {
	err := sb.closeEngine()
	for _, b := range sb.blobs {
		cuda.HostFree(b)
	}
	sb.blobs = nil
	return err
}

// hostProbe is a short measure of the CPU engine's read rate from pinned
// host memory now: the one-row MLP share (the decode's tier) alone and
// while pinned host-to-device copies run, as the executor's decode shares
// run. On the H200's host (a KVM guest) the engine's rate in the executor
// moved between 42 and 91 GB/s from one load to the next a minute apart
// (bench/results/budgets.md run 34); the probe says what the host gives
// at the moment it is taken.
type hostProbe struct {
	// AloneGBps and BusyGBps are the share's weights read per second,
	// 10⁹ bytes/s, alone and with copies in flight; CopyGBps the copies'
	// rate meanwhile.
	AloneGBps float64 `json:"alone_gbps"`
	BusyGBps  float64 `json:"busy_gbps"`
	CopyGBps  float64 `json:"copy_gbps"`
	// Seconds is what the probe took, allocation included.
	Seconds float64 `json:"s"`
}

// probeLayers is the probe's layers (1.2 GB): four times the GPU host's
// 300 MiB last-level cache.
const probeLayers = 4

// probeHost measures hostProbe with a CPU engine of threads kernel
// threads: nine calls alone and nine with copies in flight (medians),
// about a second with the allocation.
func probeHost(threads int) (hostProbe, error) {
	start := time.Now()
	sb, err := newShareBench(threads, probeLayers, false)
	if err != nil {
		return hostProbe{}, err
	}
	defer sb.close()
	bytes := float64(3 * shareInter * shareHidden * 2)
	alone, err := sb.time(1, shareInter, 9)
	if err != nil {
		return hostProbe{}, fmt.Errorf("the CPU's MLP share: %w", err)
	}
	cp, err := startCopier(386 << 20)
	if err != nil {
		return hostProbe{}, fmt.Errorf("copies in flight: %w", err)
	}
	busy, err := sb.time(1, shareInter, 9)
	copyGBps, cerr := cp.stop()
	if err != nil {
		return hostProbe{}, fmt.Errorf("the CPU's MLP share with copies in flight: %w", err)
	}
	if cerr != nil {
		return hostProbe{}, fmt.Errorf("copies in flight: %w", cerr)
	}
	return hostProbe{AloneGBps: round1(bytes / alone / 1e6), BusyGBps: round1(bytes / busy / 1e6), CopyGBps: round1(copyGBps),
		Seconds: time.Since(start).Seconds()}, nil
}

func (h hostProbe) String() string {
	return fmt.Sprintf("the CPU engine's one-row MLP share read %.1f GB/s alone, %.1f GB/s with copies in flight (copies %.1f GB/s; probe %.1f s)",
		h.AloneGBps, h.BusyGBps, h.CopyGBps, h.Seconds)
}
