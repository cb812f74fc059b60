package cuda

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// Benchmark machinery: GPU time from CUDA events on the backend's stream,
// the median of b.N samples after a warm-up, each sample covering enough
// repetitions of the op (at least benchSampleTime of GPU time) that the
// events' resolution does not matter. A spin kernel runs before each
// sample's start event so that the host's launches are queued ahead of the
// GPU and the first repetition starts without a gap.

const (
	benchSampleTime = 300 * time.Microsecond
	benchSpinNs     = 200_000 // vla_spin before each sample
	benchWarmup     = 3
)

// gpuTimer is a pair of timing events on a backend.
type gpuTimer struct {
	be          *Backend
	start, stop driver.Event
}

func newGPUTimer(b testing.TB, be *Backend) *gpuTimer {
	tm := &gpuTimer{be: be}
	err := be.run(func(g *gpu) (err error) {
		if tm.start, err = g.drv.EventCreate(driver.EventDefault); err != nil {
			return err
		}
		tm.stop, err = g.drv.EventCreate(driver.EventDefault)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = be.run(func(g *gpu) error {
			return errors.Join(g.drv.EventDestroy(tm.start), g.drv.EventDestroy(tm.stop))
		})
	})
	return tm
}

// sample times reps runs of fn, in GPU time per run.
func (tm *gpuTimer) sample(reps int, fn func() error) (time.Duration, error) {
	err := tm.be.run(func(g *gpu) error {
		g.args.Reset()
		g.args.U64(benchSpinNs)
		if err := g.launch("spin", g.k.spin, driver.Dim3{1, 1, 1}, block1D(1), 0); err != nil {
			return err
		}
		return g.drv.EventRecord(tm.start, g.stream)
	})
	if err != nil {
		return 0, err
	}
	for i := 0; i < reps; i++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	var ms float32
	err = tm.be.run(func(g *gpu) error {
		if err := g.drv.EventRecord(tm.stop, g.stream); err != nil {
			return err
		}
		if err := g.drv.EventSynchronize(tm.stop); err != nil {
			return err
		}
		ms, err = g.drv.EventElapsed(tm.start, tm.stop)
		return err
	})
	return time.Duration(float64(ms) * 1e6 / float64(reps)), err
}

// benchWork is what one run of a benchmarked op must do at least.
type benchWork struct {
	bytes float64 // that must move through device memory
	flops float64
}

// benchRow is one line of the summary table printed after the run.
type benchRow struct {
	name                 string
	us, gbs, tflops      float64
	us2                  float64 // a second run's time (-test.count 2), 0 if none
	byteFloor, flopFloor float64 // µs
	ratio                float64 // time / max(floors)
}

var (
	benchMu   sync.Mutex
	benchRows []benchRow
)

// gpuBench times fn (b.N samples, median) and reports the time, the
// achieved rates and the ratio to the floor set by the ceilings measured in
// this run.
func gpuBench(b *testing.B, be *Backend, w benchWork, fn func() error) time.Duration {
	b.Helper()
	tm := newGPUTimer(b, be)
	for i := 0; i < benchWarmup; i++ {
		if err := fn(); err != nil {
			b.Fatal(err)
		}
	}
	one, err := tm.sample(1, fn)
	if err != nil {
		b.Fatal(err)
	}
	reps := int(min(max(benchSampleTime/max(one, time.Nanosecond), 1), 200))
	b.ResetTimer()
	samples := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		d, err := tm.sample(reps, fn)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, d)
	}
	b.StopTimer()
	slices.Sort(samples)
	med := samples[len(samples)/2]
	report(b, med, w, reps)
	return med
}

// report adds the metrics of one benchmark and its summary row.
func report(b *testing.B, med time.Duration, w benchWork, reps int) {
	us := float64(med.Nanoseconds()) / 1e3
	row := benchRow{name: b.Name(), us: us}
	b.ReportMetric(us, "gpu-us/op")
	c := deviceCeilings
	if w.bytes > 0 {
		row.gbs = w.bytes / us / 1e3
		b.ReportMetric(row.gbs, "GB/s")
		if c.byteGBs > 0 {
			row.byteFloor = w.bytes / c.byteGBs / 1e3
		}
	}
	if w.flops > 0 {
		row.tflops = w.flops / us / 1e6
		b.ReportMetric(row.tflops, "TFLOP/s")
		if c.tflops > 0 {
			row.flopFloor = w.flops / c.tflops / 1e6
		}
	}
	if floor := max(row.byteFloor, row.flopFloor); floor > 0 {
		row.ratio = us / floor
		b.ReportMetric(floor, "floor-us")
		b.ReportMetric(row.ratio, "x-floor")
	}
	b.Logf("%s: %.2f µs (median of %d samples of %d reps); %.0f GB/s, %.1f TFLOP/s; floor %.2f µs (bytes %.2f, flops %.2f); %.2f× the floor",
		b.Name(), us, b.N, reps, row.gbs, row.tflops, max(row.byteFloor, row.flopFloor), row.byteFloor, row.flopFloor, row.ratio)
	if b.N == 1 {
		return // the probe run before the real b.N
	}
	benchMu.Lock()
	defer benchMu.Unlock()
	if i := slices.IndexFunc(benchRows, func(r benchRow) bool { return r.name == row.name }); i >= 0 {
		benchRows[i].us2 = us // a repeat: keep both times
	} else {
		benchRows = append(benchRows, row)
	}
}

// printBenchTable prints the summary of the benchmarks that ran.
func printBenchTable() {
	benchMu.Lock()
	defer benchMu.Unlock()
	if len(benchRows) == 0 {
		return
	}
	var sb strings.Builder
	c := deviceCeilings
	fmt.Fprintf(&sb, "\n== GPU benchmark summary (ceilings: copy %.0f GB/s, read %.0f GB/s, bf16 GEMM %.1f TFLOP/s; byte floor at %.0f GB/s)\n",
		c.copyGBs, c.readGBs, c.tflops, c.byteGBs)
	fmt.Fprintf(&sb, "| benchmark | µs | µs (repeat) | GB/s | TFLOP/s | byte floor µs | FLOP floor µs | × floor |\n|---|---|---|---|---|---|---|---|\n")
	rows := append([]benchRow(nil), benchRows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %.2f | %.2f | %.0f | %.1f | %.2f | %.2f | %.2f |\n", strings.TrimPrefix(r.name, "Benchmark"), r.us, r.us2, r.gbs, r.tflops, r.byteFloor, r.flopFloor, r.ratio)
	}
	fmt.Fprint(os.Stdout, sb.String())
}

// ceilings are the device's measured limits (BenchmarkGPUCeilings).
type ceilings struct {
	copyGBs, readGBs float64 // device-to-device copy (read + write), read-only stream
	byteGBs          float64 // the larger: what a streaming kernel can reach
	tflops           float64 // cuBLAS bf16 GEMM, float32 accumulation
}

var (
	deviceCeilings ceilings
	ceilingsOnce   sync.Once
)

// needCeilings measures the ceilings once per process, so that every
// benchmark's floor comes from this run even when run alone.
func needCeilings(b *testing.B, be *Backend) {
	ceilingsOnce.Do(func() {
		c := &deviceCeilings
		c.copyGBs = measureCopy(b, be)
		c.readGBs = measureRead(b, be)
		c.byteGBs = max(c.copyGBs, c.readGBs)
		c.tflops = measureGEMM(b, be)
		b.Logf("ceilings: copy %.0f GB/s, read %.0f GB/s, bf16 GEMM %.1f TFLOP/s", c.copyGBs, c.readGBs, c.tflops)
	})
}

// ceilingBytes is the buffer size of the byte ceilings: many times the L2.
const ceilingBytes = 2 << 30

// medianOf runs a timer over fn n times and returns the median per run.
func medianOf(b *testing.B, be *Backend, n int, fn func() error) time.Duration {
	tm := newGPUTimer(b, be)
	for i := 0; i < benchWarmup; i++ {
		if err := fn(); err != nil {
			b.Fatal(err)
		}
	}
	var s []time.Duration
	for i := 0; i < n; i++ {
		d, err := tm.sample(3, fn)
		if err != nil {
			b.Fatal(err)
		}
		s = append(s, d)
	}
	slices.Sort(s)
	return s[len(s)/2]
}

func measureCopy(b *testing.B, be *Backend) float64 {
	src := devRandom(b, be, tensor.F32, 1, ceilingBytes/4)
	dst := devRandom(b, be, tensor.F32, 1, ceilingBytes/4)
	defer be.Free(src)
	defer be.Free(dst)
	d := medianOf(b, be, 9, func() error { return be.Copy(dst, src) })
	return 2 * ceilingBytes / d.Seconds() / 1e9
}

func measureRead(b *testing.B, be *Backend) float64 {
	src := devRandom(b, be, tensor.F32, 1, ceilingBytes/4)
	sink := devRandom(b, be, tensor.F32, 1, 64)
	defer be.Free(src)
	defer be.Free(sink)
	s, k := src.(*Tensor), sink.(*Tensor)
	n4 := int64(ceilingBytes / 16)
	d := medianOf(b, be, 9, func() error {
		return be.run(func(g *gpu) error {
			g.args.Reset()
			g.args.Ptr(k.ptr).Ptr(s.ptr).U64(uint64(n4))
			return g.elementwise("read stream", g.k.readStream, n4)
		})
	})
	return ceilingBytes / d.Seconds() / 1e9
}

// gemmCeilingN is the size of the ceiling GEMM (N×N×N, bf16 in, float32
// accumulation and output).
const gemmCeilingN = 8192

func measureGEMM(b *testing.B, be *Backend) float64 {
	const n = gemmCeilingN
	a := devRandom(b, be, tensor.BF16, 1, n, n)
	x := devRandom(b, be, tensor.BF16, 1, n, n)
	c := devRandom(b, be, tensor.F32, 1, n, n)
	defer be.Free(a)
	defer be.Free(x)
	defer be.Free(c)
	at, xt, ct := a.(*Tensor), x.(*Tensor), c.(*Tensor)
	d := medianOf(b, be, 9, func() error {
		return be.run(func(g *gpu) error {
			s := rowMajorXWt(n, n, n)
			return g.blas.GemmEx(g.handle, &driver.Gemm{
				TransA: s.transA, TransB: s.transB, M: s.m, N: s.n, K: s.k, Alpha: 1,
				A: at.ptr, AType: driver.R16BF, LDA: s.lda, B: xt.ptr, BType: driver.R16BF, LDB: s.ldb,
				C: ct.ptr, CType: driver.R32F, LDC: s.ldc, Compute: driver.Compute32F, Algo: driver.GemmDefault,
			})
		})
	})
	return 2 * n * n * n / d.Seconds() / 1e12
}

// devRandom allocates a tensor and fills it on the device with uniform
// values in [-scale, scale).
func devRandom(b testing.TB, be *Backend, dt tensor.DType, scale float32, shape ...int) backend.Tensor {
	b.Helper()
	t, err := be.Alloc("bench", dt, shape...)
	if err != nil {
		b.Fatal(err)
	}
	ct := t.(*Tensor)
	seed := uint32(len(shape)*7919) ^ uint32(ct.ptr>>8)
	err = be.run(func(g *gpu) error {
		n := ct.elements()
		g.args.Reset()
		g.args.Ptr(ct.ptr).I32(dtypeCode(dt)).U64(uint64(n)).U32(seed).F32(scale)
		return g.elementwise("fill random", g.k.fillRandom, n)
	})
	if err != nil {
		b.Fatal(err)
	}
	return t
}
