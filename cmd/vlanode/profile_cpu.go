package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"vlanode/cuda"
	"vlanode/layering"
	"vlanode/residency"
	"vlanode/tensor"
	"vlanode/weights"
)

// cpuTiers are the token tiers profiled on the CPU.
var cpuTiers = []int{1, 4, 16, 64, 512}

// measureCPU profiles the CPU engine for the planner (paper 2's
// install-time profile, taken under contention): the MLP share of a
// VLM-shaped layer (4096 → 12288 → 4096, bf16, 302 MB, read in place from
// host memory allocated as the executor's blobs are) through the engine's
// kernels at each token tier, alone and while pinned host-to-device copies
// run on the GPU (the rates the planner uses), the copy rate meanwhile,
// and one hand-off of activations each way through a backend.Exchange.
// With copies in flight each tier is timed on the whole share and on half
// of it (the first 6144 intermediate columns, as a split hands the CPU):
// the two give the tier's bandwidth (their difference) and its cost per
// call (what is left).
func measureCPU(p *residency.Profile, threads int, log io.Writer) error {
	// Five layers' weights (1.5 GB), taken in turn: more than the host's
	// last-level cache, as a decode reads a different layer each call.
	sb, err := newShareBench(threads, 5, true)
	if err != nil {
		return err
	}
	defer sb.close()
	engine := sb.engine
	const h, n = shareHidden, shareInter
	bytes := int64(3 * n * h * 2)
	// time1 is the median time of the share [0, hi) over rows rows.
	time1 := func(rows, hi int) (float64, error) {
		reps := 15
		if rows >= 512 {
			reps = 5
		}
		return sb.time(rows, hi, reps)
	}
	sweep := func(hi int) (map[int]float64, error) {
		out := map[int]float64{}
		for _, rows := range cpuTiers {
			ms, err := time1(rows, hi)
			if err != nil {
				return nil, fmt.Errorf("the CPU's MLP share at %d rows: %w", rows, err)
			}
			out[rows] = ms
		}
		return out, nil
	}
	alone, err := sweep(n)
	if err != nil {
		return err
	}
	cp, err := startCopier(386 << 20)
	if err != nil {
		return fmt.Errorf("copies in flight: %w", err)
	}
	busy, err := sweep(n)
	var half map[int]float64
	if err == nil {
		half, err = sweep(n / 2)
	}
	copyGBps, cerr := cp.stop()
	if err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("copies in flight: %w", cerr)
	}
	hop, err := measureHandoff()
	if err != nil {
		return fmt.Errorf("hand-off: %w", err)
	}
	c := &residency.CPUProfile{Threads: engine.KernelThreads(), H2DBusyGBps: round1(copyGBps), HandoffMs: math.Round(hop*1e4) / 1e4}
	var aloneText []string
	for _, rows := range cpuTiers {
		flops := 2 * float64(rows) * 3 * n * h
		r := fitCPURate(rows, bytes, flops, busy[rows], half[rows])
		c.Rates = append(c.Rates, r)
		aloneText = append(aloneText, fmt.Sprintf("%d rows %.1f GB/s %.3f TFLOP/s", rows,
			float64(bytes)/alone[rows]/1e6, flops/alone[rows]/1e9))
		fmt.Fprintf(log, "vlanode profile: CPU MLP share, %d rows: alone %.2f ms (%.1f GB/s); with copies in flight %.2f ms (%.1f GB/s), half of it %.2f ms: %.1f GB/s %.3f TFLOP/s and %.3f ms a call\n",
			rows, alone[rows], float64(bytes)/alone[rows]/1e6, busy[rows], float64(bytes)/busy[rows]/1e6, half[rows], r.GBps, r.TFLOPs, r.CallMs)
	}
	c.Source = fmt.Sprintf("vlanode profile, %s: the CPU engine (%d pinned kernel threads, %s) computing a 4096 → 12288 → 4096 "+
		"bf16 MLP share (302 MB read in place from the executor's kind of host memory, five layers' in turn, 1.5 GB, more than the last-level cache; median of 15 calls, 5 at 512 rows) "+
		"while pinned 386 MiB host-to-device copies ran; rates and call_ms from the whole share and its first half (6144 of 12288 columns), "+
		"which differ by half the bytes and FLOPs (alone, the whole share: %s); h2d_busy_gbps: those copies meanwhile; handoff_ms: half the median round trip of a "+
		"4096-value exchange (Send, engine Wait and Post, Receive with add, Sync) over 200",
		time.Now().UTC().Format("2006-01-02"), engine.KernelThreads(), engine.KernelPath(1), joinComma(aloneText))
	if old := p.CPU; old != nil && old.HandoffRowMs > 0 {
		// Not measured here: what each further row of a hand-off costs in
		// the executor stays as the profile had it.
		c.HandoffRowMs = old.HandoffRowMs
		c.Source += fmt.Sprintf("; handoff_row_ms %g kept from the profile before", old.HandoffRowMs)
	}
	p.CPU = c
	return nil
}

// fitCPURate is a tier's rate from the times of a share of bytes and
// flops (whole) and of its half (half), ms: the half the bytes and FLOPs
// they differ by take whole−half, and the rest of a call is its fixed cost.
// Two medians under copy contention are noisy (on the H200's host, 4 rows
// once gave whole 4.30 ms and half 3.52 ms: 2.7 ms a call, 193 GB/s):
// a fixed cost below zero or above a quarter of the whole call is taken
// for noise, and the tier keeps the whole share's rate and no fixed cost.
func fitCPURate(rows int, bytes int64, flops, whole, half float64) residency.CPURate {
	r := residency.CPURate{Rows: rows}
	d := whole - half
	if c := 2*half - whole; d <= 0 || c < 0 || c > whole/4 {
		d = whole / 2
	}
	r.GBps = round1(float64(bytes) / 2 / d / 1e6)
	r.TFLOPs = math.Round(flops/2/d/1e9*1000) / 1000
	r.CallMs = math.Round(max(0, whole-2*d)*1e4) / 1e4
	return r
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ", "
		}
		out += v
	}
	return out
}

// copier keeps pinned host-to-device copies running on a GPU of its own
// backend until stopped, counting what they moved.
type copier struct {
	stopFlag atomic.Bool
	done     sync.WaitGroup
	bytes    int64
	elapsed  time.Duration
	err      error
}

// startCopier starts copies of size bytes, back to back.
func startCopier(size int64) (*copier, error) {
	c := &copier{}
	ready := make(chan error, 1)
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		be, err := cuda.New()
		if err != nil {
			ready <- err
			return
		}
		defer be.Close()
		dev := be.NewDFBDevice()
		defer dev.Close()
		buf, err := cuda.HostAlloc(size)
		if err != nil {
			ready <- err
			return
		}
		defer cuda.HostFree(buf)
		blob := &weights.Blob{Name: "copier", Data: buf}
		slot, err := dev.AllocSlot(size)
		if err == nil {
			err = dev.PinHost(blob)
		}
		var st layering.Stream
		if err == nil {
			st, err = dev.NewStream("copier")
		}
		ready <- err
		if err != nil {
			return
		}
		start := time.Now()
		for !c.stopFlag.Load() {
			if err := dev.CopyAsync(slot, blob, st); err != nil {
				c.err = err
				return
			}
			if err := dev.Synchronize(); err != nil {
				c.err = err
				return
			}
			c.bytes += size
		}
		c.elapsed = time.Since(start)
	}()
	if err := <-ready; err != nil {
		c.done.Wait()
		return nil, err
	}
	time.Sleep(50 * time.Millisecond) // copies under way
	return c, nil
}

// stop ends the copies and returns their rate in GB/s.
func (c *copier) stop() (float64, error) {
	c.stopFlag.Store(true)
	c.done.Wait()
	if c.err != nil {
		return 0, c.err
	}
	if c.elapsed <= 0 {
		return 0, fmt.Errorf("no copy ran")
	}
	return float64(c.bytes) / c.elapsed.Seconds() / 1e9, nil
}

// measureHandoff is one hand-off each way, in ms: half the median round
// trip of a 4096-value exchange on the GPU with a host goroutine posting.
func measureHandoff() (float64, error) {
	be, err := cuda.New()
	if err != nil {
		return 0, err
	}
	defer be.Close()
	x, err := be.Alloc("activations", tensor.F32, 1, 4096)
	if err != nil {
		return 0, err
	}
	defer be.Free(x)
	ex, err := be.NewExchange(4096, 4096)
	if err != nil {
		return 0, err
	}
	defer ex.Close()
	var ms []float64
	for i := range 220 {
		start := time.Now()
		t, err := ex.Send(x)
		if err != nil {
			return 0, err
		}
		errc := make(chan error, 1)
		go func() {
			if err := ex.Wait(context.Background(), t); err != nil {
				errc <- err
				return
			}
			errc <- ex.Post(t)
		}()
		if err := ex.Receive(x, t, true); err != nil {
			return 0, err
		}
		if err := be.Sync(); err != nil {
			return 0, err
		}
		if err := <-errc; err != nil {
			return 0, err
		}
		if i >= 20 {
			ms = append(ms, float64(time.Since(start))/1e6)
		}
	}
	sort.Float64s(ms)
	return ms[len(ms)/2] / 2, nil
}
