package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"vlanode/backend"
	"vlanode/tensor"
)

// The GPU tests share one Backend (opening one costs a cuBLAS handle and
// the kernels); tests of opening and budgets make their own. Without a
// GPU every one of them says so and skips.

var (
	testCacheDir string // kernel cache of this test process
	sharedOnce   sync.Once
	shared       *Backend
	sharedErr    error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vlanode-cuda-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testCacheDir = dir
	code := m.Run()
	printBenchTable()
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the shared backend:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// needGPU skips the test, loudly, when CUDA cannot be used here.
func needGPU(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("SKIPPED: no CUDA driver/GPU on this machine: %v", err)
	}
}

// gpuBackend returns the shared Backend.
func gpuBackend(t testing.TB) *Backend {
	t.Helper()
	needGPU(t)
	sharedOnce.Do(func() { shared, sharedErr = New(WithKernelCache(testCacheDir)) })
	if sharedErr != nil {
		t.Fatalf("New: %v", sharedErr)
	}
	return shared
}

// deviceFree is cuMemGetInfo's free bytes.
func deviceFree(t *testing.T, b *Backend) int64 {
	t.Helper()
	var free int64
	err := b.run(func(g *gpu) (err error) {
		free, _, err = g.drv.MemInfo()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return free
}

// ---- helpers ----

func randVals(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// upload makes an F32 activation tensor holding vals.
func upload(t *testing.T, b *Backend, vals []float32, shape ...int) backend.Tensor {
	t.Helper()
	x, err := b.Alloc("activations", tensor.F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Upload(x, vals); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free(x) })
	return x
}

// alloc makes a zeroed F32 tensor.
func alloc(t *testing.T, b *Backend, shape ...int) backend.Tensor {
	t.Helper()
	x, err := b.Alloc("activations", tensor.F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free(x) })
	return x
}

// weight makes a weight of type dt from vals and returns it with the
// values it holds after rounding to dt.
func weight(t *testing.T, b *Backend, dt tensor.DType, vals []float32, shape ...int) (backend.Tensor, []float32) {
	t.Helper()
	data, err := tensor.FromF32(dt, vals)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Weight("weights", dt, shape, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free(w) })
	held := make([]float32, len(vals))
	if err := tensor.ToF32(held, dt, data); err != nil {
		t.Fatal(err)
	}
	return w, held
}

func download(t *testing.T, b *Backend, x backend.Tensor) []float32 {
	t.Helper()
	v, err := b.Download(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// roundTo rounds float32 values to dt and back, as MatMul rounds x.
func roundTo(dt tensor.DType, vals []float32) []float32 {
	out := make([]float32, len(vals))
	for i, v := range vals {
		switch dt {
		case tensor.BF16:
			out[i] = tensor.BF16ToF32(tensor.F32ToBF16(v))
		case tensor.F16:
			out[i] = tensor.F16ToF32(tensor.F32ToF16(v))
		default:
			out[i] = v
		}
	}
	return out
}

// closeTo checks got against want elementwise: |got-want| <= atol +
// rtol·|want|, or tol[i] when tol is given. It reports the worst element.
func closeTo(t *testing.T, what string, got []float32, want []float64, atol, rtol float64, tol []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, at, bad := 0.0, -1, 0
	for i := range got {
		lim := atol + rtol*math.Abs(want[i])
		if tol != nil {
			lim = tol[i]
		}
		e := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(float64(got[i])) {
			e = math.Inf(1)
		}
		if e > lim {
			bad++
		}
		if e/math.Max(lim, 1e-30) > worst {
			worst, at = e/math.Max(lim, 1e-30), i
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off; worst at %d: got %v, want %v (%.2f× the tolerance)", what, bad, len(got), at, got[at], want[at], worst)
	}
}

func exactly(t *testing.T, what string, got, want []float32) {
	t.Helper()
	w := make([]float64, len(want))
	for i, v := range want {
		w[i] = float64(v)
	}
	closeTo(t, what, got, w, 0, 0, nil)
}

// ---- device, memory and lifecycle ----

func TestGPUDevice(t *testing.T) {
	b := gpuBackend(t)
	d, k := b.Device(), b.Kernels()
	t.Logf("device %d: %s, sm_%d, %d SMs, %s; %s; %s; %s", d.Ordinal, d.Name, d.ComputeCapability, d.SMs, formatBytes(d.TotalMemory), d.Driver, d.CUBLAS, d.NVRTC)
	t.Logf("kernels: %s, %d bytes, from cache %v, compiled in %v, options %v", k.Arch, k.CubinBytes, k.FromCache, k.CompileTime, k.Options)
	if k.CacheError != "" {
		t.Errorf("kernel cache: %s", k.CacheError)
	}
	if dump := os.Getenv("VLANODE_DUMP_CUBIN"); dump != "" { // for cuobjdump on the GPU machine
		data, err := os.ReadFile(k.CacheFile)
		if err == nil {
			err = os.WriteFile(dump, data, 0o644)
		}
		if err != nil {
			t.Errorf("dumping the CUBIN: %v", err)
		}
	}
	r := b.Usage()
	t.Logf("usage:\n%v", r)
	for _, p := range []string{PurposeContext, PurposeCUBLAS, PurposeWorkspace, PurposeKernels} {
		if r.Bytes(p) <= 0 {
			t.Errorf("nothing counted for %q", p)
		}
	}
	if b.Name() != "cuda" {
		t.Errorf("Name() = %q", b.Name())
	}
}

func TestGPUUploadDownload(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(1, 1))
	vals := randVals(r, 6*70, 1)
	x := upload(t, b, vals, 6, 70)
	exactly(t, "round trip", download(t, b, x), vals)

	rows, err := b.Rows(x, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	exactly(t, "rows view", download(t, b, rows), vals[2*70:5*70])
	flat, err := b.Reshape(rows, 210)
	if err != nil || flat.Shape()[0] != 210 {
		t.Fatalf("reshape: %v %v", flat, err)
	}
	if _, err := b.Rows(x, 5, 2); err == nil {
		t.Error("rows past the end accepted")
	}
	if _, err := b.Reshape(x, 7, 7); err == nil {
		t.Error("reshape to another size accepted")
	}

	// Larger than the first staging buffer, so it grows.
	big := randVals(r, 3<<20, 1)
	y := upload(t, b, big, 3<<20)
	exactly(t, "3M values", download(t, b, y), big)
	// In pieces (uploadPiece): two whole ones and a partial one, at their
	// offsets.
	pieces := randVals(r, (2*uploadPiece+4096)/4, 1)
	exactly(t, "pieces", download(t, b, upload(t, b, pieces, len(pieces))), pieces)

	// Many uploads, of sizes from a few bytes to a third of the staging
	// ring, with no wait between them: the ring wraps around and each
	// waits only for the copies whose bytes it takes, and at most
	// stagingMaxPending copies are pending. Every tensor gets its values.
	var ts []backend.Tensor
	var want [][]float32
	for i := range 3 * stagingMaxPending {
		n := 1 + r.IntN(int(stagingGrain/12))
		if i%7 == 0 {
			n = 1 + r.IntN(8)
		}
		v := randVals(r, n, 1)
		ts, want = append(ts, upload(t, b, v, n)), append(want, v)
	}
	for i := range ts {
		exactly(t, fmt.Sprintf("upload %d of the ring", i), download(t, b, ts[i]), want[i])
	}

	// A fresh allocation is zeroed, even where a freed one lay.
	z, err := b.Alloc("activations", tensor.F32, 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(z)
	exactly(t, "zeroed", download(t, b, z), make([]float32, 3<<20))
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestGPUErrors(t *testing.T) {
	b := gpuBackend(t)
	x := alloc(t, b, 4, 8)
	w, _ := weight(t, b, tensor.BF16, make([]float32, 8*8), 8, 8)
	wf, _ := weight(t, b, tensor.F32, make([]float32, 4*8), 4, 8)
	bf, err := b.Alloc("activations", tensor.BF16, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(bf)
	other := &Tensor{dt: tensor.F32, shape: []int{4, 8}}
	for name, err := range map[string]error{
		"read-only dst": b.Add(wf, x, x),
		"bf16 operand":  b.Add(x, bf, x),
		"foreign":       b.Add(x, other, x),
		"nil":           b.Add(x, nil, x),
		"shape":         b.MatMul(alloc(t, b, 4, 7), x, w, nil),
		"overlap":       b.MatMul(x, x, w, nil),
		"upload size":   b.Upload(x, make([]float32, 3)),
		"alloc dtype":   func() error { _, err := b.Alloc("x", tensor.I64, 3); return err }(),
		"weight bytes":  func() error { _, err := b.Weight("x", tensor.F32, []int{3}, make([]byte, 4)); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.HasPrefix(err.Error(), "cuda: ") {
			t.Errorf("%s: %q does not start with \"cuda: \"", name, err)
		}
	}
	y, _ := b.Alloc("activations", tensor.F32, 4, 8)
	b.Free(y)
	b.Free(y) // harmless
	if err := b.Add(y, x, x); err == nil || !strings.Contains(err.Error(), "was freed") {
		t.Errorf("use after free: %v", err)
	}
	if err := b.Sync(); err != nil {
		t.Errorf("sync after frees: %v", err)
	}
}

func TestGPUCloseTwice(t *testing.T) {
	needGPU(t)
	b, err := New(WithKernelCache(testCacheDir))
	if err != nil {
		t.Fatal(err)
	}
	x, err := b.Alloc("activations", tensor.F32, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil { // frees x too
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := b.Sync(); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close: %v", err)
	}
	if _, err := b.Download(x); !errors.Is(err, ErrClosed) {
		t.Errorf("Download after Close: %v", err)
	}
}

func TestGPUKernelCache(t *testing.T) {
	needGPU(t)
	dir := t.TempDir()
	b1, err := New(WithKernelCache(dir))
	if err != nil {
		t.Fatal(err)
	}
	k1 := b1.Kernels()
	b1.Close()
	if k1.FromCache || k1.CacheFile == "" || k1.CacheError != "" {
		t.Fatalf("first open: %+v", k1)
	}
	t.Logf("compiled %s in %v", k1.Arch, k1.CompileTime)
	b2, err := New(WithKernelCache(dir))
	if err != nil {
		t.Fatal(err)
	}
	k2 := b2.Kernels()
	b2.Close()
	if !k2.FromCache || k2.CacheFile != k1.CacheFile {
		t.Errorf("second open did not use the cache: %+v", k2)
	}
	// A damaged entry is rebuilt.
	if err := os.WriteFile(k1.CacheFile, []byte("\x7fELF damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	b3, err := New(WithKernelCache(dir))
	if err != nil {
		t.Fatalf("open with a damaged cache entry: %v", err)
	}
	defer b3.Close()
	if b3.Kernels().FromCache {
		t.Error("a damaged cache entry was used")
	}
	x := upload(t, b3, []float32{1, 2}, 2)
	if err := b3.Add(x, x, x); err != nil {
		t.Fatal(err)
	}
	exactly(t, "kernels after rebuild", download(t, b3, x), []float32{2, 4})
}

func TestGPUBudget(t *testing.T) {
	base := gpuBackend(t)
	total := base.Device().TotalMemory

	_, err := New(WithKernelCache(testCacheDir), WithBudget(1<<20))
	if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), `"cuda-context"`) {
		t.Errorf("New with a 1 MiB budget: %v", err)
	}
	if _, err := New(WithKernelCache(testCacheDir), WithBudget(total+1)); err == nil || !strings.Contains(err.Error(), "more than the device") {
		t.Errorf("New with a budget over the device: %v", err)
	}

	// A budget a little above what opening takes (the context charge counts
	// the shared backend's memory too).
	var b *Backend
	for k := int64(1); k <= 8 && b == nil; k++ {
		b, err = New(WithKernelCache(testCacheDir), WithBudget(base.Usage().InUse+k*512<<20))
	}
	if err != nil {
		t.Fatalf("no budget up to 4 GiB over the shared backend's opens a backend: %v", err)
	}
	defer b.Close()
	r := b.Usage()
	room := r.Limit - r.InUse
	t.Logf("budget %s, %s free after opening:\n%v", formatBytes(r.Limit), formatBytes(room), r)
	halfBytes := 2 * (room / 4)
	half, err := b.Alloc("kv-cache", tensor.BF16, int(room/4)) // about room/2 bytes
	if err != nil {
		t.Fatalf("allocating half the room: %v", err)
	}
	_, err = b.Alloc("kv-cache", tensor.BF16, int(room/2)) // room bytes: too much now
	var be *BudgetError
	if !errors.As(err, &be) || be.Purpose != "kv-cache" || !strings.Contains(err.Error(), `for "kv-cache" would exceed the budget`) {
		t.Fatalf("over the budget: %v", err)
	}
	t.Logf("refused as expected: %v", err)
	if got := b.Usage().Bytes("kv-cache"); got != accountedSize(halfBytes) {
		t.Errorf("kv-cache counts %d bytes, want %d", got, accountedSize(halfBytes))
	}
	b.Free(half)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	again, err := b.Alloc("kv-cache", tensor.BF16, int(room/4))
	if err != nil {
		t.Fatalf("allocating after a free: %v", err)
	}
	b.Free(again)
	if p := b.Usage(); p.Bytes("kv-cache") != 0 || p.Peak < r.InUse+accountedSize(halfBytes) {
		t.Errorf("after freeing:\n%v", p)
	}
}

// TestGPUFreeOrdered frees a tensor while queued work still reads it and
// takes its block again at once (Free does not wait; the allocator's
// cache hands the block over): the new owner's upload, queued after that
// work, must not reach it first.
func TestGPUFreeOrdered(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(5, 9))
	const n = 1 << 22 // 16 MB: many blocks of adds
	xv, yv := randVals(r, n, 1), randVals(r, n, 1)
	y := upload(t, b, yv, n)
	raw, err := b.Alloc("activations", tensor.F32, n)
	if err != nil {
		t.Fatal(err)
	}
	noErrs(t, b.Upload(raw, xv))
	for range 8 {
		noErrs(t, b.Add(y, y, raw)) // y += x, eight times, reading raw
	}
	b.Free(raw)
	again, err := b.Alloc("activations", tensor.F32, n) // the same block, from the cache
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(again)
	noErrs(t, b.Upload(again, make([]float32, n)))
	want := make([]float32, n)
	for i := range want {
		want[i] = yv[i]
		for range 8 {
			want[i] += xv[i] // float32 adds in the kernel's order
		}
	}
	sameBits(t, "y + 8x", download(t, b, y), want)
}

// TestGPUAccounting compares what the budget counts with what the device
// gave up (cuMemGetInfo) for a mix of block sizes.
func TestGPUAccounting(t *testing.T) {
	b := gpuBackend(t)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	free0, used0 := deviceFree(t, b), b.Usage().InUse
	var ts []backend.Tensor
	for _, c := range []struct{ n, elems int }{{300, 1 << 10}, {20, 3 << 18}, {1, 25 << 20}, {50, 5000}} {
		for i := 0; i < c.n; i++ {
			x, err := b.Alloc("accounting", tensor.F32, c.elems)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, x)
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	measured, counted := free0-deviceFree(t, b), b.Usage().InUse-used0
	t.Logf("%d blocks: the device gave up %s, the budget counts %s", len(ts), formatBytes(measured), formatBytes(counted))
	const slack = 4 << 20 // one partly used pool chunk of small blocks
	if counted+slack < measured {
		t.Errorf("the budget undercounts: %d bytes counted, %d taken", counted, measured)
	}
	for _, x := range ts {
		b.Free(x)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := b.Usage().Bytes("accounting"); got != 0 {
		t.Errorf("%d bytes still counted after freeing", got)
	}
}

// TestGPUBudgetCoversDevice runs after the op tests: everything the device
// gave up since the shared backend opened (cuBLAS's lazily loaded GEMM
// kernels included) must be counted in its budget.
func TestGPUBudgetCoversDevice(t *testing.T) {
	b := gpuBackend(t)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	used := b.Device().TotalMemory - deviceFree(t, b)
	counted := b.Usage().InUse
	t.Logf("the device has %s in use; the budget counts %s:\n%v", formatBytes(used), formatBytes(counted), b.Usage())
	const slack = 64 << 20 // other backends of this test process may have left a little behind
	if counted+slack < used {
		t.Errorf("the budget undercounts the device by %s", formatBytes(used-counted))
	}
}
