package kern

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Benchmarks stream their weights from an arena larger than the last-level
// cache, one matrix (or MLP shard) after another, so each call reads its
// weights from DRAM as the executor's calls will. They report GB/s of
// weights read and TFLOP/s (2·M·N·K per product).
//
//	go test -run '^$' -bench . -benchtime 20x ./cpu/kern
//
// BenchmarkSweep is the GPU host's table (scripts/gpu/cpukern.sh): the
// 4096 → 12288 projection at every -kern.rows × -kern.threads × -kern.paths
// (× -kern.prefetch, when it lists more than the default).
var (
	arenaMiB    = flag.Int("kern.arena-mib", 1024, "MiB of bf16 weights the benchmarks rotate through (above the L3 cache)")
	sweepRows   = flag.String("kern.rows", "1,4,16,32,64,512", "BenchmarkSweep: rows of x")
	sweepThread = flag.String("kern.threads", "", "BenchmarkSweep: worker counts (default: one per physical core)")
	sweepPaths  = flag.String("kern.paths", "auto", "BenchmarkSweep: paths (auto, scalar, avx2, avx512, amx)")
	sweepPF     = flag.String("kern.prefetch", "0", "BenchmarkSweep: software prefetch distances in columns (0: the path's own, -1: none)")
	benchThread = flag.Int("kern.bench-threads", 0, "BenchmarkGEMV, GEMM, MLP: workers (0: one per physical core)")
)

// The Qwen3-8B / Alpamayo VLM MLP: hidden 4096, intermediate 12288.
const (
	hidden       = 4096
	intermediate = 12288
)

var (
	arenaOnce sync.Once
	arena     []uint16
)

// weightArena is the benchmarks' weights: random bf16 of magnitude
// 2⁻⁷..2⁻⁶, filled once per process.
func weightArena() []uint16 {
	arenaOnce.Do(func() {
		arena = make([]uint16, *arenaMiB<<19)
		s := uint64(0x9e3779b97f4a7c15)
		for i := 0; i+4 <= len(arena); i += 4 {
			s ^= s << 13
			s ^= s >> 7
			s ^= s << 17
			v := s&0x80ff80ff80ff80ff | 0x3c003c003c003c00
			arena[i], arena[i+1], arena[i+2], arena[i+3] = uint16(v), uint16(v>>16), uint16(v>>32), uint16(v>>48)
		}
	})
	return arena
}

// matrices carves as many disjoint [rows, cols] matrices as the arena holds
// (at least one).
func matrices(b *testing.B, rows, cols int) []Weights {
	a := weightArena()
	size := rows * cols
	var out []Weights
	for off := 0; off+size <= len(a); off += size {
		w, err := NewWeights(a[off:off+size], rows, cols)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		b.Fatalf("a [%d, %d] matrix does not fit a %d MiB arena (-kern.arena-mib)", rows, cols, *arenaMiB)
	}
	return out
}

func benchPool(b *testing.B, path Path, threads int) *Pool {
	b.Helper()
	if path != Auto {
		if err := Supported(path); err != nil {
			b.Skipf("SKIPPED: %v", err)
		}
	}
	cpus, _, err := CPUOrder()
	if err != nil {
		b.Fatal(err)
	}
	if threads > len(cpus) {
		b.Skipf("SKIPPED: %d threads asked for, this machine has %d CPUs", threads, len(cpus))
	}
	p, err := NewPool(Options{Path: path, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

func randX(m, k int) []float32 {
	r := rand.New(rand.NewPCG(uint64(m), uint64(k)))
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// benchGEMM times y = x·Wᵀ over ws in turn.
func benchGEMM(b *testing.B, pool *Pool, m int, ws []Weights) {
	n, k := ws[0].Rows, ws[0].Cols
	op := GEMM{X: randX(m, k), Y: make([]float32, m*n), M: m}
	for i := 0; i < 2; i++ { // grow scratch, fault pages in
		op.W = ws[i%len(ws)]
		if err := pool.MatMul(op); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		op.W = ws[i%len(ws)]
		if err := pool.MatMul(op); err != nil {
			b.Fatal(err)
		}
	}
	report(b, float64(ws[0].Bytes()), 2*float64(m)*float64(n)*float64(k))
}

func report(b *testing.B, bytes, flops float64) {
	s := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(bytes/s/1e9, "GB/s")
	b.ReportMetric(flops/s/1e12, "TFLOP/s")
}

// BenchmarkGEMV: one row through the VLM MLP's projections — up (4096 →
// 12288), down (12288 → 4096) and half of down's columns (the CPU's share
// of a column-split down projection).
func BenchmarkGEMV(b *testing.B) {
	b.Run("up-4096x12288", func(b *testing.B) {
		benchGEMM(b, benchPool(b, Auto, *benchThread), 1, matrices(b, intermediate, hidden))
	})
	downs := matrices(b, hidden, intermediate)
	b.Run("down-12288x4096", func(b *testing.B) {
		benchGEMM(b, benchPool(b, Auto, *benchThread), 1, downs)
	})
	b.Run("down-cols-6144of12288x4096", func(b *testing.B) {
		half := make([]Weights, len(downs))
		for i, w := range downs {
			half[i], _ = w.ColRange(0, intermediate/2)
		}
		benchGEMM(b, benchPool(b, Auto, *benchThread), 1, half)
	})
}

// BenchmarkGEMM: 4 to 64 rows through up and down.
func BenchmarkGEMM(b *testing.B) {
	ups, downs := matrices(b, intermediate, hidden), matrices(b, hidden, intermediate)
	for _, m := range []int{4, 16, 32, 64} {
		b.Run(fmt.Sprintf("up-4096x12288/rows=%d", m), func(b *testing.B) {
			benchGEMM(b, benchPool(b, Auto, *benchThread), m, ups)
		})
		b.Run(fmt.Sprintf("down-12288x4096/rows=%d", m), func(b *testing.B) {
			benchGEMM(b, benchPool(b, Auto, *benchThread), m, downs)
		})
	}
}

// BenchmarkMLP: the fused shard of half the VLM MLP (rows [0, 6144) of gate
// and up, the same columns of down): 151 MB of weights per call.
func BenchmarkMLP(b *testing.B) {
	const r = intermediate / 2
	a := weightArena()
	per := 3 * r * hidden
	var shards []MLP
	for off := 0; off+per <= len(a); off += per {
		gate, _ := NewWeights(a[off:off+r*hidden], r, hidden)
		up, _ := NewWeights(a[off+r*hidden:off+2*r*hidden], r, hidden)
		down := Weights{Data: a[off+2*r*hidden : off+per], Rows: hidden, Cols: r, Stride: r}
		shards = append(shards, MLP{Gate: gate, Up: up, Down: down})
	}
	if len(shards) == 0 {
		b.Fatalf("an MLP shard does not fit a %d MiB arena", *arenaMiB)
	}
	for _, m := range []int{1, 4, 16, 32, 64} {
		b.Run(fmt.Sprintf("shard-6144of12288/rows=%d", m), func(b *testing.B) {
			pool := benchPool(b, Auto, *benchThread)
			x, y := randX(m, hidden), make([]float32, m*hidden)
			run := func(i int) {
				op := shards[i%len(shards)]
				op.X, op.Y, op.M = x, y, m
				if err := pool.MLP(op); err != nil {
					b.Fatal(err)
				}
			}
			run(0)
			run(1)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run(i)
			}
			report(b, 3*float64(r)*hidden*2, 2*3*float64(m)*float64(r)*hidden)
		})
	}
}

// BenchmarkCall: the fixed cost of a call — waking the workers, packing x,
// a barrier, finishing — on a product too small to matter (1 × 64 × 64).
func BenchmarkCall(b *testing.B) {
	w, err := NewWeights(weightArena()[:64*64], 64, 64)
	if err != nil {
		b.Fatal(err)
	}
	benchGEMM(b, benchPool(b, Auto, *benchThread), 1, []Weights{w})
}

// BenchmarkCore: one worker on each path with weights that stay in its L2
// cache (256 × 2048, 1 MiB): the compute-bound rate of a core per rows of
// x, the ceiling below which memory bandwidth decides.
func BenchmarkCore(b *testing.B) {
	a := weightArena()
	w, err := NewWeights(a[:256*2048], 256, 2048)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range AllPaths() {
		for _, m := range []int{1, 4, 16, 64, 512} {
			if p == Scalar && m > 16 {
				continue // seconds a call
			}
			b.Run(fmt.Sprintf("path=%v/rows=%d", p, m), func(b *testing.B) {
				benchGEMM(b, benchPool(b, p, 1), m, []Weights{w})
			})
		}
	}
}

// BenchmarkSweep: the 4096 → 12288 projection (cpu_coexec_probe.py's
// shape) at every rows × threads × paths of the flags.
func BenchmarkSweep(b *testing.B) {
	rows, err := ints(*sweepRows)
	if err != nil {
		b.Fatal(err)
	}
	threads, err := ints(*sweepThread)
	if err != nil {
		b.Fatal(err)
	}
	if len(threads) == 0 {
		_, cores, err := CPUOrder()
		if err != nil {
			b.Fatal(err)
		}
		threads = []int{cores}
	}
	var paths []Path
	for _, s := range strings.Split(*sweepPaths, ",") {
		p, err := ParsePath(strings.TrimSpace(s))
		if err != nil {
			b.Fatal(err)
		}
		paths = append(paths, p)
	}
	pfs, err := signedInts(*sweepPF)
	if err != nil {
		b.Fatal(err)
	}
	ws := matrices(b, intermediate, hidden)
	for _, p := range paths {
		for _, t := range threads {
			for _, pf := range pfs {
				for _, m := range rows {
					name := fmt.Sprintf("path=%v/threads=%d/rows=%d", p, t, m)
					if len(pfs) > 1 || pf != 0 {
						name = fmt.Sprintf("path=%v/threads=%d/prefetch=%d/rows=%d", p, t, pf, m)
					}
					b.Run(name, func(b *testing.B) {
						pool := benchPool(b, p, t)
						pool.prefetch = pf
						b.Logf("ran on path %v", pool.PathFor(m))
						benchGEMM(b, pool, m, ws)
					})
				}
			}
		}
	}
}

func signedInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("kern: %q is not a count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("kern: %q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}
