package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

// The reference is float64 over the same bf16-rounded x (tensor.F32ToBF16,
// Go code independent of the C kernels). Every path multiplies bf16 values
// exactly in float32 and rounds each addition, so an output of K products
// is within (K + 40)·2⁻²⁴·Σ|x·w| of the exact sum for any summation order
// (the 40 covers the lane reductions and the additions of bias and y), and
// the tolerance below is that bound. It is tight enough to catch an x left
// unrounded (an error of 2⁻⁹·Σ|x·w|) and, of course, any wrong index.
const unitRoundoff = 1.0 / (1 << 24)

func gamma(k int) float64 { return float64(k+40) * unitRoundoff }

func bf(v float32) float64 { return float64(tensor.BF16ToF32(tensor.F32ToBF16(v))) }

func randWeights(r *rand.Rand, n int) []uint16 {
	w := make([]uint16, n)
	for i := range w {
		w[i] = tensor.F32ToBF16(float32(r.NormFloat64() * 0.5))
	}
	return w
}

func randFloats(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// testPool opens a pool on path p with the given threads, or skips the test
// loudly when the CPU cannot run p.
func testPool(t *testing.T, p Path, threads int) *Pool {
	t.Helper()
	if err := Supported(p); err != nil {
		t.Skipf("SKIPPED: path %v cannot run on this machine: %v", p, err)
	}
	cpus, err := DefaultCPUs()
	require.NoError(t, err)
	for len(cpus) < threads { // oversubscribe small machines
		cpus = append(cpus, cpus[len(cpus)%len(cpus)])
	}
	pool, err := NewPool(Options{Path: p, CPUs: cpus[:threads], WorkerSpin: 20 * time.Microsecond})
	require.NoError(t, err)
	t.Cleanup(func() { pool.Close() })
	return pool
}

func TestFeatures(t *testing.T) {
	f := Detect()
	t.Logf("CPU features: %v", f)
	for _, p := range AllPaths() {
		if err := Supported(p); err != nil {
			t.Logf("path %-6v SKIPPED here: %v", p, err)
		} else {
			t.Logf("path %-6v runs here", p)
		}
	}
	pool, err := NewPool(Options{})
	require.NoError(t, err)
	defer pool.Close()
	t.Logf("%v; AMX refusal: %v", pool, pool.AMXError())
	for _, m := range []int{1, DefaultAMXMinRows - 1, DefaultAMXMinRows, 512} {
		want := AVX512
		switch {
		case f.AMX && pool.AMXError() == nil && m >= DefaultAMXMinRows:
			want = AMX
		case !f.AVX512 || !f.AVX512BF16:
			want = AVX2
			if !f.AVX2 {
				want = Scalar
			}
		}
		assert.Equal(t, want, pool.PathFor(m), "auto path for %d rows", m)
	}
}

// gemmCase is one product: shapes, the view W is cut as, and the extras.
type gemmCase struct {
	m, n, k    int
	view       string // "full", "rows" (a row range) or "cols" (a column range, odd offset)
	bias, acc  bool
	padX, padY int // extra elements per row of x and y
}

func (c gemmCase) String() string {
	return fmt.Sprintf("%dx%dx%d/%s/bias=%v/acc=%v", c.m, c.n, c.k, c.view, c.bias, c.acc)
}

// operands builds the case's operands from seed.
func (c gemmCase) operands(seed uint64) GEMM {
	r := rand.New(rand.NewPCG(seed, 1))
	rows, cols, r0, c0 := c.n, c.k, 0, 0
	switch c.view {
	case "rows":
		rows, r0 = c.n+7, 3
	case "cols":
		cols, c0 = c.k+13, 5
	}
	full := Weights{Data: randWeights(r, rows*cols), Rows: rows, Cols: cols, Stride: cols}
	w, err := full.RowRange(r0, r0+c.n)
	if err == nil {
		w, err = w.ColRange(c0, c0+c.k)
	}
	if err != nil {
		panic(err)
	}
	op := GEMM{M: c.m, W: w, LdX: c.k + c.padX, LdY: c.n + c.padY, Accumulate: c.acc}
	op.X = randFloats(r, (c.m-1)*op.LdX+c.k)
	op.Y = randFloats(r, (c.m-1)*op.LdY+c.n)
	if c.bias {
		op.Bias = randFloats(r, c.n)
	}
	return op
}

// refGEMM is the float64 reference and the tolerance of each output.
func refGEMM(op GEMM) (want, tol []float64) {
	n, k := op.W.Rows, op.W.Cols
	want, tol = make([]float64, op.M*n), make([]float64, op.M*n)
	for m := 0; m < op.M; m++ {
		for j := 0; j < n; j++ {
			var s, a float64
			for i := 0; i < k; i++ {
				p := bf(op.X[m*op.LdX+i]) * float64(tensor.BF16ToF32(op.W.Data[j*op.W.Stride+i]))
				s += p
				a += math.Abs(p)
			}
			if op.Bias != nil {
				s += float64(op.Bias[j])
				a += math.Abs(float64(op.Bias[j]))
			}
			if op.Accumulate {
				y0 := float64(op.Y[m*op.LdY+j])
				s += y0
				a += math.Abs(y0)
			}
			want[m*n+j], tol[m*n+j] = s, gamma(k)*a+1e-30
		}
	}
	return want, tol
}

// checkGEMM compares y with the reference, and the padding of y with its
// old values.
func checkGEMM(t *testing.T, op GEMM, y0 []float32, want, tol []float64) {
	t.Helper()
	n := op.W.Rows
	worst, at := 0.0, -1
	for m := 0; m < op.M; m++ {
		for j := 0; j < op.LdY; j++ {
			i := m*op.LdY + j
			if i >= len(op.Y) {
				break
			}
			if j >= n {
				require.Equal(t, y0[i], op.Y[i], "y[%d, %d] is padding and must not change", m, j)
				continue
			}
			if r := math.Abs(float64(op.Y[i])-want[m*n+j]) / tol[m*n+j]; r > worst || math.IsNaN(r) {
				worst, at = r, m*n+j
			}
		}
	}
	if worst > 1 || math.IsNaN(worst) {
		m, j := at/n, at%n
		t.Fatalf("y[%d, %d] = %v, want %v ± %.3g (error %.3g × the tolerance)", m, j,
			op.Y[m*op.LdY+j], want[at], tol[at], worst)
	}
}

var gemmShapes = [][3]int{ // m, n, k
	{1, 1, 1}, {1, 7, 33}, {1, 64, 256}, {1, 37, 100}, {2, 17, 31}, {3, 16, 32}, {4, 33, 65},
	{5, 50, 96}, {7, 9, 40}, {8, 24, 64}, {15, 18, 129}, {16, 32, 64}, {17, 40, 50}, {31, 20, 300},
	{33, 49, 70}, {64, 64, 128}, {65, 23, 257},
}

// gemmRun is a case with its operands and reference, computed once for
// every path.
type gemmRun struct {
	name      string
	op        GEMM
	y0        []float32
	want, tol []float64
	kc        int // the AMX K chunk to force, or 0
}

func newGEMMRun(c gemmCase, seed uint64, kc int) gemmRun {
	op := c.operands(seed)
	want, tol := refGEMM(op)
	return gemmRun{name: c.String(), op: op, y0: append([]float32(nil), op.Y...), want: want, tol: tol, kc: kc}
}

// runGEMM runs each case on every path the CPU has.
func runGEMM(t *testing.T, runs []gemmRun) {
	for _, p := range AllPaths() {
		t.Run(p.String(), func(t *testing.T) {
			pool := testPool(t, p, 2)
			for _, r := range runs {
				pool.amxKC = r.kc
				op := r.op
				op.Y = append([]float32(nil), r.y0...)
				require.NoError(t, pool.MatMul(op), r.name)
				t.Run(r.name, func(t *testing.T) { checkGEMM(t, op, r.y0, r.want, r.tol) })
			}
		})
	}
}

func TestMatMulPaths(t *testing.T) {
	var runs []gemmRun
	seed := uint64(0)
	for _, s := range gemmShapes {
		for _, view := range []string{"full", "rows", "cols"} {
			for v := 0; v < 4; v++ {
				seed++
				c := gemmCase{m: s[0], n: s[1], k: s[2], view: view, bias: v&1 != 0, acc: v&2 != 0,
					padX: int(seed % 3), padY: int(seed % 2)}
				runs = append(runs, newGEMMRun(c, seed, 0))
			}
		}
	}
	runGEMM(t, runs)
}

// TestMatMulLarge covers 512 rows (the AMX path in two K chunks, 1024 +
// 76 columns) and, with 64-column chunks forced, a column tail in the last.
func TestMatMulLarge(t *testing.T) {
	runGEMM(t, []gemmRun{
		newGEMMRun(gemmCase{m: 512, n: 20, k: 1100, view: "cols", bias: true}, 1000, 0),
		newGEMMRun(gemmCase{m: 40, n: 35, k: 300, view: "rows", acc: true}, 1001, 64),
	})
}

// mlpCase is one MLP shard: gate and up are row ranges [r0, r0+r) of
// [r0+r+3, k] matrices, down the column range [r0, r0+r) of [h, r0+r+3].
type mlpCase struct {
	m, k, r, h, r0 int
	acc            bool
}

func (c mlpCase) operands(seed uint64) MLP {
	rng := rand.New(rand.NewPCG(seed, 2))
	inter := c.r0 + c.r + 3
	mat := func(rows, cols int) Weights {
		w, err := NewWeights(randWeights(rng, rows*cols), rows, cols)
		if err != nil {
			panic(err)
		}
		return w
	}
	gate, up, down := mat(inter, c.k), mat(inter, c.k), mat(c.h, inter)
	op := MLP{M: c.m, LdX: c.k + 1, LdY: c.h, Accumulate: c.acc}
	var err error
	if op.Gate, err = gate.RowRange(c.r0, c.r0+c.r); err == nil {
		if op.Up, err = up.RowRange(c.r0, c.r0+c.r); err == nil {
			op.Down, err = down.ColRange(c.r0, c.r0+c.r)
		}
	}
	if err != nil {
		panic(err)
	}
	op.X = randFloats(rng, (c.m-1)*op.LdX+c.k)
	op.Y = randFloats(rng, c.m*c.h)
	return op
}

// refMLP is the float64 reference of an MLP shard and its tolerance. The
// kernels round h = silu(g)·u to bf16 after computing it in float32; from
// the error bounds of g and u (as in refGEMM) and of float32 silu (16 ulp
// here, generous), each h lies in an interval whose two ends round to bf16
// values lo ≤ h_bf16 ≤ hi; the reference takes bf16(h) and the tolerance adds
// |down|·(hi − lo), which is 0 unless h sits at a rounding boundary.
func refMLP(op MLP) (want, tol []float64) {
	k, r, h := op.Gate.Cols, op.Gate.Rows, op.Down.Rows
	const u = unitRoundoff
	want, tol = make([]float64, op.M*h), make([]float64, op.M*h)
	hm, hlo, hhi := make([]float64, r), make([]float64, r), make([]float64, r)
	for m := 0; m < op.M; m++ {
		for j := 0; j < r; j++ {
			var g, ag, v, av float64
			for i := 0; i < k; i++ {
				x := bf(op.X[m*op.LdX+i])
				pg := x * float64(tensor.BF16ToF32(op.Gate.Data[j*op.Gate.Stride+i]))
				pu := x * float64(tensor.BF16ToF32(op.Up.Data[j*op.Up.Stride+i]))
				g, ag, v, av = g+pg, ag+math.Abs(pg), v+pu, av+math.Abs(pu)
			}
			eg, eu := gamma(k)*ag, gamma(k)*av
			s := g / (1 + math.Exp(-g))
			es := 1.1*eg + 16*u*(math.Abs(s)+1.1*eg)
			hv := s * v
			eh := es*(math.Abs(v)+eu) + math.Abs(s)*eu + 2*u*(math.Abs(s)+es)*(math.Abs(v)+eu) + 1e-30
			hm[j], hlo[j], hhi[j] = bf(float32(hv)), bf(float32(hv-eh)), bf(float32(hv+eh))
		}
		for o := 0; o < h; o++ {
			var s, a, amb float64
			for j := 0; j < r; j++ {
				d := float64(tensor.BF16ToF32(op.Down.Data[o*op.Down.Stride+j]))
				s += d * hm[j]
				a += math.Abs(d) * math.Max(math.Abs(hlo[j]), math.Abs(hhi[j]))
				amb += math.Abs(d) * (hhi[j] - hlo[j])
			}
			if op.Accumulate {
				y0 := float64(op.Y[m*op.LdY+o])
				s += y0
				a += math.Abs(y0)
			}
			want[m*h+o], tol[m*h+o] = s, gamma(r)*a+amb+1e-30
		}
	}
	return want, tol
}

func checkMLP(t *testing.T, op MLP, want, tol []float64) {
	t.Helper()
	h := op.Down.Rows
	for m := 0; m < op.M; m++ {
		for o := 0; o < h; o++ {
			got, i := float64(op.Y[m*op.LdY+o]), m*h+o
			if !(math.Abs(got-want[i]) <= tol[i]) {
				t.Fatalf("y[%d, %d] = %v, want %v ± %.3g", m, o, got, want[i], tol[i])
			}
		}
	}
}

var mlpCases = []mlpCase{
	{m: 1, k: 64, r: 32, h: 48, r0: 0},
	{m: 1, k: 100, r: 37, h: 21, r0: 5},
	{m: 2, k: 33, r: 16, h: 17, r0: 3, acc: true},
	{m: 3, k: 96, r: 50, h: 16, r0: 16},
	{m: 8, k: 40, r: 15, h: 40, r0: 1},
	{m: 16, k: 128, r: 64, h: 64, r0: 32, acc: true},
	{m: 17, k: 70, r: 33, h: 30, r0: 7},
	{m: 33, k: 31, r: 17, h: 19, r0: 2},
	{m: 64, k: 128, r: 48, h: 32, r0: 0},
	{m: 65, k: 50, r: 20, h: 25, r0: 9, acc: true},
}

// mlpRun is an MLP case with its operands and reference, computed once.
type mlpRun struct {
	name      string
	op        MLP
	y0        []float32
	want, tol []float64
	kc        int // the AMX K chunk to force, or 0
}

func newMLPRun(c mlpCase, seed uint64, kc int) mlpRun {
	op := c.operands(seed)
	want, tol := refMLP(op)
	return mlpRun{name: fmt.Sprintf("%+v", c), op: op, y0: append([]float32(nil), op.Y...), want: want, tol: tol, kc: kc}
}

func runMLP(t *testing.T, runs []mlpRun) {
	for _, p := range AllPaths() {
		t.Run(p.String(), func(t *testing.T) {
			pool := testPool(t, p, 2)
			for _, r := range runs {
				pool.amxKC = r.kc
				op := r.op
				op.Y = append([]float32(nil), r.y0...)
				require.NoError(t, pool.MLP(op), r.name)
				t.Run(r.name, func(t *testing.T) { checkMLP(t, op, r.want, r.tol) })
			}
		})
	}
}

func TestMLPPaths(t *testing.T) {
	var runs []mlpRun
	for i, c := range mlpCases {
		runs = append(runs, newMLPRun(c, uint64(i), 0))
	}
	runMLP(t, runs)
}

// TestMLPLarge covers 512 rows (the AMX path's gate and up in two K
// chunks, 1024 + 6 columns) and, with 64-column chunks forced, both products
// chunked with column tails.
func TestMLPLarge(t *testing.T) {
	runMLP(t, []mlpRun{
		newMLPRun(mlpCase{m: 512, k: 1030, r: 40, h: 20, r0: 3}, 99, 0),
		newMLPRun(mlpCase{m: 20, k: 200, r: 150, h: 33, r0: 5, acc: true}, 100, 64),
	})
}

// TestDeterminism: every path gives the same bits twice and for 1, 2 and 3
// workers (the partition moves, each output's arithmetic does not), and
// whatever the software prefetch distance.
func TestDeterminism(t *testing.T) {
	g := gemmCase{m: 33, n: 101, k: 333, view: "cols", bias: true}.operands(7)
	mc := mlpCase{m: 17, k: 130, r: 70, h: 45, r0: 1}.operands(8)
	for _, p := range AllPaths() {
		t.Run(p.String(), func(t *testing.T) {
			var first, firstMLP []float32
			for i, threads := range []int{1, 2, 3, 3, 2, 2} {
				pool := testPool(t, p, threads)
				pool.prefetch = []int{0, 0, 0, 0, -1, 64}[i]
				op := g
				op.Y = make([]float32, len(g.Y))
				require.NoError(t, pool.MatMul(op))
				m := mc
				m.Y = make([]float32, len(mc.Y))
				require.NoError(t, pool.MLP(m))
				if first == nil {
					first, firstMLP = op.Y, m.Y
					continue
				}
				require.Equal(t, bits(first), bits(op.Y), "matmul with %d threads, prefetch %d", threads, pool.prefetch)
				require.Equal(t, bits(firstMLP), bits(m.Y), "mlp with %d threads, prefetch %d", threads, pool.prefetch)
			}
		})
	}
}

func bits(s []float32) []uint32 {
	b := make([]uint32, len(s))
	for i, v := range s {
		b[i] = math.Float32bits(v)
	}
	return b
}

func TestErrors(t *testing.T) {
	pool := testPool(t, Scalar, 1)
	w, err := NewWeights(make([]uint16, 12), 3, 4)
	require.NoError(t, err)
	x, y := make([]float32, 8), make([]float32, 6)
	ok := GEMM{Y: y, X: x, M: 2, W: w}
	require.NoError(t, pool.MatMul(ok))
	for _, c := range []struct {
		name string
		edit func(*GEMM)
		want string
	}{
		{"no rows", func(o *GEMM) { o.M = 0 }, "M = 0 rows"},
		{"too many rows", func(o *GEMM) { o.M = MaxRows + 1 }, "M = 4097 rows"},
		{"short x", func(o *GEMM) { o.X = x[:7] }, "x: [2, 4] with row pitch 4 needs 8 elements, has 7"},
		{"x pitch", func(o *GEMM) { o.LdX = 3 }, "x: row pitch 3 below its 4 columns"},
		{"short y", func(o *GEMM) { o.Y = y[:5] }, "y: [2, 3] with row pitch 3 needs 6 elements, has 5"},
		{"short bias", func(o *GEMM) { o.Bias = []float32{1, 2} }, "bias has 2 elements for 3 outputs"},
		{"y is x", func(o *GEMM) { o.Y = x }, "y overlaps an operand"},
		{"short w", func(o *GEMM) { o.W.Data = o.W.Data[:11] }, "w: [3, 4] with row pitch 4 needs 12 elements, data has 11"},
		{"no columns", func(o *GEMM) { o.W.Cols = 0 }, "K = 0"},
	} {
		op := ok
		c.edit(&op)
		assert.ErrorContains(t, pool.MatMul(op), c.want, c.name)
	}

	_, err = w.RowRange(2, 4)
	assert.ErrorContains(t, err, "rows [2, 4) of a 3-row matrix")
	_, err = w.ColRange(-1, 2)
	assert.ErrorContains(t, err, "columns [-1, 2) of a 4-column matrix")
	_, err = NewWeights(make([]uint16, 5), 2, 3)
	assert.ErrorContains(t, err, "needs 6 elements, data has 5")

	down, err := NewWeights(make([]uint16, 6), 2, 3)
	require.NoError(t, err)
	mlp := MLP{Y: make([]float32, 4), X: x, M: 2, Gate: w, Up: w, Down: down}
	require.NoError(t, pool.MLP(mlp))
	bad := mlp
	bad.Up, _ = w.RowRange(0, 2)
	assert.ErrorContains(t, pool.MLP(bad), "up [2, 4] differs from gate [3, 4]")
	bad = mlp
	bad.Down, _ = down.ColRange(0, 2)
	assert.ErrorContains(t, pool.MLP(bad), "down has 2 columns for 3 rows")

	_, err = NewPool(Options{Threads: 3, CPUs: []int{0}})
	assert.ErrorContains(t, err, "3 threads asked for, 1 CPUs")
	_, err = NewPool(Options{CPUs: []int{1 << 20}})
	assert.ErrorContains(t, err, "pinning a worker to CPU 1048576")
	_, err = ParsePath("sse")
	assert.ErrorContains(t, err, `unknown path "sse"`)

	require.NoError(t, pool.Close())
	assert.ErrorIs(t, pool.MatMul(ok), ErrClosed)
	assert.ErrorIs(t, pool.Close(), ErrClosed)
}

// TestCPUOrder reads a fake sysfs: CPUs 0-3 on cores 0, 1, 0, 1 of one
// package, CPUs 4-5 on node 1, CPU 6 without topology files.
func TestCPUOrder(t *testing.T) {
	dir := t.TempDir()
	write := func(cpu int, file, value string) {
		p := filepath.Join(dir, fmt.Sprintf("cpu%d", cpu), file)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(value+"\n"), 0o644))
	}
	for cpu, core := range []int{0, 1, 0, 1, 2, 3} {
		write(cpu, "topology/physical_package_id", "0")
		write(cpu, "topology/core_id", fmt.Sprint(core))
		node := 0
		if cpu >= 4 {
			node = 1
		}
		require.NoError(t, os.MkdirAll(filepath.Join(dir, fmt.Sprintf("cpu%d", cpu), fmt.Sprintf("node%d", node)), 0o755))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "cpu6"), 0o755))
	cpus, cores := orderCPUs(dir, []int{0, 1, 2, 3, 4, 5, 6})
	assert.Equal(t, []int{0, 1, 6, 4, 5, 2, 3}, cpus)
	assert.Equal(t, 5, cores)
	cpus, cores = orderCPUs(dir, []int{2, 3, 5})
	assert.Equal(t, []int{2, 3, 5}, cpus)
	assert.Equal(t, 3, cores)

	order, cores, err := CPUOrder()
	require.NoError(t, err)
	def, err := DefaultCPUs()
	require.NoError(t, err)
	assert.Equal(t, order[:cores], def)
	t.Logf("this machine: CPU order %v, %d physical cores", order, cores)
}
