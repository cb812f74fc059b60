package cuda

import (
	"errors"
	"strings"
	"testing"

	"vlanode/cuda/driver"
	"vlanode/residency"
)

// fakeMemory is device memory without a device: it hands out addresses
// and remembers which are live.
type fakeMemory struct {
	next  driver.DevicePtr
	live  map[driver.DevicePtr]int64
	fail  error // returned by the next MemAlloc
	calls int
}

func newFakeMemory() *fakeMemory {
	return &fakeMemory{next: 1 << 32, live: map[driver.DevicePtr]int64{}}
}

func (f *fakeMemory) MemAlloc(n int64) (driver.DevicePtr, error) {
	f.calls++
	if err := f.fail; err != nil {
		f.fail = nil
		return 0, err
	}
	p := f.next
	f.next += driver.DevicePtr(roundUp(n, 256))
	f.live[p] = n
	return p, nil
}

func (f *fakeMemory) MemFree(p driver.DevicePtr) error {
	if _, ok := f.live[p]; !ok {
		return errors.New("fake: free of an unknown pointer")
	}
	delete(f.live, p)
	return nil
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

func TestAccountedSize(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{0, 0}, {1, 256}, {256, 256}, {257, 512}, {1000, 1024},
		{mib - 1, mib}, {mib, 2 * mib}, {2 * mib, 2 * mib}, {3 * mib, 4 * mib}, {2*mib + 1, 4 * mib},
	} {
		if got := accountedSize(c.n); got != c.want {
			t.Errorf("accountedSize(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestAllocatorAccounting(t *testing.T) {
	mem := newFakeMemory()
	a, err := newAllocator(mem, 16*mib, 100*mib)
	if err != nil {
		t.Fatal(err)
	}
	x, err := a.alloc("activations", 1000)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := a.alloc("kv-cache", 3*mib)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.charge(PurposeCUBLAS, 5*mib); err != nil {
		t.Fatal(err)
	}
	r := a.report()
	if r.InUse != 1024+4*mib+5*mib || r.Bytes("activations") != 1024 || r.Bytes("kv-cache") != 4*mib || r.Bytes(PurposeCUBLAS) != 5*mib {
		t.Errorf("report after allocating:\n%v", r)
	}
	if err := a.free(kv); err != nil {
		t.Fatal(err)
	}
	if err := a.free(kv); err == nil {
		t.Error("double free is not an error")
	}
	a.uncharge(PurposeCUBLAS, 5*mib)
	r = a.report()
	// The freed block stays on the device, cached.
	if r.InUse != 1024+4*mib || r.Peak != 1024+9*mib || r.Bytes("kv-cache") != 0 || r.Bytes(PurposeCached) != 4*mib || len(mem.live) != 2 {
		t.Errorf("report after freeing:\n%v", r)
	}
	for _, p := range r.Purposes {
		if p.Purpose == "kv-cache" && (p.Peak != 4*mib || p.Blocks != 0) {
			t.Errorf("kv-cache account %+v", p)
		}
		if p.Purpose == "activations" && p.Blocks != 1 {
			t.Errorf("activations account %+v", p)
		}
	}
	if err := a.freeAll(); err != nil {
		t.Fatal(err)
	}
	if x.live || len(mem.live) != 0 || a.report().InUse != 0 {
		t.Errorf("freeAll left %d blocks, %d bytes", len(mem.live), a.report().InUse)
	}
}

// TestAllocatorCache: a freed block serves the next allocation of its
// size without the driver, as a new block (the old one stays freed);
// freeNow bypasses the cache; an allocation the cache would push over the
// budget first returns the cached blocks to the driver.
func TestAllocatorCache(t *testing.T) {
	mem := newFakeMemory()
	a, err := newAllocator(mem, 16*mib, 100*mib) // the cache holds 4 MiB
	if err != nil {
		t.Fatal(err)
	}
	x, err := a.alloc("activations", 3*mib) // costs 4 MiB
	if err != nil {
		t.Fatal(err)
	}
	if err := a.free(x); err != nil {
		t.Fatal(err)
	}
	calls := mem.calls
	y, err := a.alloc("scratch", 3*mib)
	if err != nil {
		t.Fatal(err)
	}
	if y.ptr != x.ptr || mem.calls != calls || y == x || x.live || !y.live {
		t.Errorf("reuse: ptr %#x of %#x, %d driver calls, old block live %v", y.ptr, x.ptr, mem.calls-calls, x.live)
	}
	if r := a.report(); r.InUse != 4*mib || r.Bytes("scratch") != 4*mib || r.Bytes(PurposeCached) != 0 {
		t.Errorf("after reuse:\n%v", r)
	}
	if err := a.free(y); err != nil {
		t.Fatal(err)
	}
	// 14 MiB more fit the budget only without the 4 cached.
	z, err := a.alloc("weights", 13*mib)
	if err != nil {
		t.Fatalf("allocation the cache was in the way of: %v", err)
	}
	if r := a.report(); r.InUse != 14*mib || r.Bytes(PurposeCached) != 0 || len(mem.live) != 1 {
		t.Errorf("after the flush:\n%v", r)
	}
	if _, err := a.alloc("kv-cache", 3*mib); !errors.Is(err, ErrOverBudget) {
		t.Errorf("over the budget with nothing cached: %v", err)
	}
	if err := a.freeNow(z); err != nil {
		t.Fatal(err)
	}
	if r := a.report(); r.InUse != 0 || len(mem.live) != 0 {
		t.Errorf("freeNow kept memory:\n%v", r)
	}
}

// TestAllocatorCacheCap: the cache holds a quarter of the limit at most;
// a block larger than that goes straight back, and one that would pass it
// empties the cache first.
func TestAllocatorCacheCap(t *testing.T) {
	if got := cacheCap(100 * gib); got != cacheCapMax {
		t.Errorf("cacheCap(100 GiB) = %d, want %d", got, int64(cacheCapMax))
	}
	mem := newFakeMemory()
	a, err := newAllocator(mem, 16*mib, 100*mib) // cap 4 MiB
	if err != nil {
		t.Fatal(err)
	}
	big, err := a.alloc("weights", 5*mib) // costs 6 MiB
	if err != nil {
		t.Fatal(err)
	}
	if err := a.free(big); err != nil {
		t.Fatal(err)
	}
	if r := a.report(); r.InUse != 0 || len(mem.live) != 0 {
		t.Errorf("a block over the cap was cached:\n%v", r)
	}
	x, _ := a.alloc("activations", 3*mib) // 4 MiB each
	y, _ := a.alloc("activations", 3*mib+1)
	if err := a.free(x); err != nil {
		t.Fatal(err)
	}
	if r := a.report(); r.Bytes(PurposeCached) != 4*mib {
		t.Errorf("after caching x:\n%v", r)
	}
	if err := a.free(y); err != nil { // 4 + 4 MiB would pass the cap: x goes back first
		t.Fatal(err)
	}
	if r := a.report(); r.Bytes(PurposeCached) != 4*mib || len(mem.live) != 1 || r.InUse != 4*mib {
		t.Errorf("after caching y:\n%v", r)
	}
	if err := a.freeAll(); err != nil || len(mem.live) != 0 {
		t.Errorf("freeAll: %v, %d blocks left", err, len(mem.live))
	}
}

func TestAllocatorOverBudget(t *testing.T) {
	mem := newFakeMemory()
	a, err := newAllocator(mem, 10*mib, 100*mib)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.alloc("weights", 5*mib); err != nil { // costs 6 MiB
		t.Fatal(err)
	}
	calls := mem.calls
	_, err = a.alloc("kv-cache", 5*mib)
	want := `cuda: allocating 6.0 MiB for "kv-cache" would exceed the budget: 6.0 of 10.0 MiB in use`
	if err == nil || err.Error() != want {
		t.Fatalf("over budget: %v\nwant %s", err, want)
	}
	var be *BudgetError
	if !errors.Is(err, ErrOverBudget) || !errors.As(err, &be) || be.Purpose != "kv-cache" {
		t.Errorf("error %v does not match ErrOverBudget / *BudgetError", err)
	}
	if mem.calls != calls {
		t.Error("the device was asked for memory over the budget")
	}
	if r := a.report(); r.InUse != 6*mib || r.Bytes("kv-cache") != 0 {
		t.Errorf("a refused allocation changed the accounts:\n%v", r)
	}
	if _, err := a.alloc("kv-cache", 4*mib); err != nil { // exactly fills the budget
		t.Errorf("allocating up to the budget: %v", err)
	}
	if err := a.charge(PurposeKernels, 1); !errors.Is(err, ErrOverBudget) {
		t.Errorf("charging past the budget: %v", err)
	}
}

func TestAllocatorUnlimited(t *testing.T) {
	a, err := newAllocator(newFakeMemory(), 0, 4*gib)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.charge(PurposeContext, gib/2); err != nil {
		t.Fatal(err)
	}
	_, err = a.alloc("weights", 4*gib)
	want := `cuda: allocating 4.0 GiB for "weights" would exceed the device's memory: 0.5 of 4.0 GiB in use`
	if err == nil || err.Error() != want {
		t.Errorf("over the device: %v\nwant %s", err, want)
	}
	if r := a.report(); r.Budget != 0 || r.Limit != 4*gib || !strings.Contains(r.String(), "no budget") {
		t.Errorf("report:\n%v", r)
	}
}

func TestAllocatorBadBudget(t *testing.T) {
	if _, err := newAllocator(newFakeMemory(), 200*gib, 140*gib); err == nil || !strings.Contains(err.Error(), "200.0 GiB is more than the device's 140.0 GiB") {
		t.Errorf("budget over the device: %v", err)
	}
	if _, err := newAllocator(newFakeMemory(), -1, 140*gib); err == nil {
		t.Error("negative budget accepted")
	}
}

func TestAllocatorDeviceFailure(t *testing.T) {
	mem := newFakeMemory()
	a, _ := newAllocator(mem, 0, gib)
	mem.fail = &driver.Error{Lib: driver.LibCUDA, Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	_, err := a.alloc("dfb", 10*mib)
	if err == nil || !strings.Contains(err.Error(), `allocating 10.0 MiB for "dfb"`) || !errors.Is(err, &driver.Error{Lib: driver.LibCUDA, Code: driver.ErrOutOfMemory}) {
		t.Errorf("device failure: %v", err)
	}
	if a.report().InUse != 0 {
		t.Error("a failed allocation stayed counted")
	}
}

func TestAllocatorZeroBytes(t *testing.T) {
	mem := newFakeMemory()
	a, _ := newAllocator(mem, mib, gib)
	b, err := a.alloc("activations", 0)
	if err != nil || b.ptr != 0 || mem.calls != 0 {
		t.Fatalf("zero-byte block: %v %v, %d device calls", b, err, mem.calls)
	}
	if err := a.free(b); err != nil {
		t.Error(err)
	}
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {512, "512 B"}, {1536, "1.5 KiB"}, {3 * mib / 2, "1.5 MiB"}, {1288490189, "1.2 GiB"}, {2 << 40, "2.0 TiB"},
	} {
		if got := formatBytes(c.n); got != c.want {
			t.Errorf("formatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	for _, c := range []struct {
		n, total int64
		want     string
	}{
		{3328599654, 4 * gib, "3.1 of 4.0 GiB"},
		{1230 * mib, 1250 * mib, "1.20 of 1.22 GiB"},
		{4 * gib, 4 * gib, "4.0 of 4.0 GiB"},
		{100, 200, "100 of 200 B"},
	} {
		if got := formatOf(c.n, c.total); got != c.want {
			t.Errorf("formatOf(%d, %d) = %q, want %q", c.n, c.total, got, c.want)
		}
	}
}

func TestReportString(t *testing.T) {
	a, _ := newAllocator(newFakeMemory(), gib, 2*gib)
	a.charge(PurposeContext, 300*mib)
	a.alloc("weights", 100*mib)
	s := a.report().String()
	for _, want := range []string{"400.0 MiB in use", "budget 1.0 GiB", "cuda-context", "weights", "100.0 MiB"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}

// The planner counts the row products' scratch (residency.RowProductsBytes):
// their three buffers at their largest, as the allocator accounts them.
func TestRowsScratchPlanned(t *testing.T) {
	ws := max(scratchMin, accountedSize(rowsMaxSlots*rowsTileFloats*4))
	out := max(scratchMin, accountedSize(rowsMaxM*rowsCounters*rowsBN*2))
	count := accountedSize(rowsCounters * 4)
	if got := ws + out + count; got > residency.RowProductsBytes {
		t.Errorf("the row products keep up to %d bytes; the planner counts %d", got, residency.RowProductsBytes)
	}
	if RowsScratchBytes > residency.RowProductsBytes {
		t.Errorf("RowsScratchBytes %d > residency.RowProductsBytes %d", RowsScratchBytes, residency.RowProductsBytes)
	}
}

// TestAllocatorPeakReset checks the peak an inference reports: after
// resetPeak it is the bytes in use then, and it rises with what is
// allocated later even once freed.
func TestAllocatorPeakReset(t *testing.T) {
	a, err := newAllocator(newFakeMemory(), 0, 100*mib)
	if err != nil {
		t.Fatal(err)
	}
	w, err := a.alloc("weights", 8*mib)
	if err != nil {
		t.Fatal(err)
	}
	x, err := a.alloc("activations", 4*mib)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.freeNow(x); err != nil {
		t.Fatal(err)
	}
	if got := a.peakBytes(); got != 12*mib {
		t.Fatalf("peak before the reset %d, want %d", got, 12*mib)
	}
	a.resetPeak()
	if got := a.peakBytes(); got != 8*mib {
		t.Fatalf("peak after the reset %d, want the %d in use", got, 8*mib)
	}
	kv, err := a.alloc("kv-cache", 2*mib)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.freeNow(kv); err != nil {
		t.Fatal(err)
	}
	if got := a.peakBytes(); got != 10*mib {
		t.Fatalf("peak %d, want %d", got, 10*mib)
	}
	_ = w
}
