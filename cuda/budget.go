package cuda

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"vlanode/cuda/driver"
)

// Purposes of the memory the backend takes for itself. Callers name their
// own ("weights", "kv-cache", "activations", "dfb", ...).
const (
	PurposeContext   = "cuda-context"     // the primary context (and anything else on the GPU at start)
	PurposeCUBLAS    = "cublas"           // the cuBLAS handle and the kernels it loads
	PurposeWorkspace = "cublas-workspace" // the workspace given to cuBLAS
	PurposeKernels   = "kernels"          // vlanode's kernel module
	PurposeScratch   = "scratch"          // the backend's own scratch buffers
	// PurposeCached is freed blocks the allocator keeps for the next
	// allocation of the same size (see allocator).
	PurposeCached = "cached"
)

// Allocation granularity, as accounted. cuMemAlloc aligns every block to
// at least 256 bytes and maps large ones in 2 MiB pages, so the budget
// counts a block as its size rounded up to 256 bytes, or to 2 MiB from
// largeBlock on: what the device gives up, not what was asked.
const (
	smallGranule = 256
	largeGranule = 2 << 20
	largeBlock   = 1 << 20
)

// accountedSize is what a block of n bytes costs the budget.
func accountedSize(n int64) int64 {
	switch {
	case n <= 0:
		return 0
	case n >= largeBlock:
		return roundUp(n, largeGranule)
	default:
		return roundUp(n, smallGranule)
	}
}

// roundUp rounds n up to a multiple of m.
func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// deviceMemory is what the allocator needs of a device: *driver.Driver on
// a GPU (with a context current), a fake in tests.
type deviceMemory interface {
	MemAlloc(bytes int64) (driver.DevicePtr, error)
	MemFree(p driver.DevicePtr) error
}

// block is one device allocation, shared by a tensor and its views.
type block struct {
	ptr     driver.DevicePtr
	bytes   int64 // asked for
	cost    int64 // accounted
	purpose string
	live    bool
	host    unsafe.Pointer // a HostTable's page-locked memory (not the allocator's)
}

// account is the memory of one purpose.
type account struct {
	bytes, peak int64
	blocks      int
}

// allocator hands out every device byte the backend uses and keeps it
// within the budget, per purpose. Its methods are safe for concurrent use;
// the driver calls happen on whatever goroutine calls alloc and free (the
// backend's CUDA thread).
//
// A freed block stays on the device, counted under PurposeCached, and the
// next allocation of the same size takes it: cuMemFree waits for the whole
// device, so freeing an inference's per-step tensors while a layering
// executor's copies are in flight stalled the host until they landed (the
// copy stream then idled at every decode step). Work queued before the
// free and the new owner's work share the backend's stream, so the reuse
// is ordered; memory other streams write (DFB slots) is freed only after
// those streams are synchronized. When an allocation would pass the budget,
// the cached blocks go back to the driver first, so they never cost an
// allocation the budget allows.
type allocator struct {
	mem    deviceMemory
	budget int64 // as configured; 0 = unlimited
	limit  int64 // the bytes allowed: the budget, or the device's memory
	// quiesce, when set, waits until no queued work may use memory about
	// to go back to the driver (the backend's stream synchronized): a
	// block is freed into the cache while work queued before the free
	// may still use it.
	quiesce func() error

	mu       sync.Mutex
	inUse    int64 // live and cached bytes, as accounted
	peak     int64
	accounts map[string]*account
	blocks   map[*block]struct{}
	cache    map[int64][]cachedBlock // by bytes asked for
}

// cacheCapMax bounds the cache (the standard workload keeps 1.9 GB of
// freed blocks at its peak without a budget, 0.7 at 4G).
const cacheCapMax = 4 << 30

// cacheCap is the most the cache holds for a limit of limit bytes.
func cacheCap(limit int64) int64 { return min(limit/4, cacheCapMax) }

// cachedBlock is device memory of a freed block, kept for reuse.
type cachedBlock struct {
	ptr         driver.DevicePtr
	bytes, cost int64
}

// newAllocator makes an allocator over mem. budget 0 means the device's
// whole memory (deviceTotal).
func newAllocator(mem deviceMemory, budget, deviceTotal int64) (*allocator, error) {
	if budget < 0 {
		return nil, fmt.Errorf("cuda: negative budget %d", budget)
	}
	if budget > deviceTotal {
		return nil, fmt.Errorf("cuda: the budget of %s is more than the device's %s", formatBytes(budget), formatBytes(deviceTotal))
	}
	limit := budget
	if budget == 0 {
		limit = deviceTotal
	}
	return &allocator{
		mem: mem, budget: budget, limit: limit,
		accounts: map[string]*account{},
		blocks:   map[*block]struct{}{},
		cache:    map[int64][]cachedBlock{},
	}, nil
}

// ErrOverBudget matches every *BudgetError with errors.Is.
var ErrOverBudget = errors.New("cuda: over the memory budget")

// BudgetError is an allocation refused because it would exceed the budget.
type BudgetError struct {
	Purpose   string
	Request   int64 // bytes asked for, as accounted
	InUse     int64 // bytes in use before the request
	Limit     int64 // bytes allowed
	Unlimited bool  // the limit is the device's memory, not a budget
}

func (e *BudgetError) Error() string {
	what := "the budget"
	if e.Unlimited {
		what = "the device's memory"
	}
	return fmt.Sprintf("cuda: allocating %s for %q would exceed %s: %s in use",
		formatBytes(e.Request), e.Purpose, what, formatOf(e.InUse, e.Limit))
}

// Is makes errors.Is(err, ErrOverBudget) true.
func (e *BudgetError) Is(target error) bool { return target == ErrOverBudget }

// reserve counts cost bytes against purpose, or refuses. Call with mu held.
func (a *allocator) reserve(purpose string, cost int64) error {
	if cost > a.limit-a.inUse {
		return &BudgetError{Purpose: purpose, Request: cost, InUse: a.inUse, Limit: a.limit, Unlimited: a.budget == 0}
	}
	a.inUse += cost
	a.peak = max(a.peak, a.inUse)
	acc := a.accounts[purpose]
	if acc == nil {
		acc = &account{}
		a.accounts[purpose] = acc
	}
	acc.bytes += cost
	acc.peak = max(acc.peak, acc.bytes)
	return nil
}

// release returns cost bytes of purpose. Call with mu held.
func (a *allocator) release(purpose string, cost int64) {
	a.inUse -= cost
	if acc := a.accounts[purpose]; acc != nil {
		acc.bytes -= cost
	}
}

// alloc returns a block of at least bytes bytes for purpose; it MUST be
// released with free. A zero-byte block has no device memory.
func (a *allocator) alloc(purpose string, bytes int64) (*block, error) {
	if bytes < 0 {
		return nil, fmt.Errorf("cuda: allocating %d bytes for %q", bytes, purpose)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b := &block{bytes: bytes, cost: accountedSize(bytes), purpose: purpose, live: true}
	if l := a.cache[bytes]; bytes > 0 && len(l) > 0 {
		// A new block over cached memory: a tensor of the old block still
		// sees it freed.
		c := l[len(l)-1]
		a.cache[bytes] = l[:len(l)-1]
		a.release(PurposeCached, c.cost)
		a.accounts[PurposeCached].blocks--
		if err := a.reserve(purpose, c.cost); err != nil {
			return nil, err // cannot happen: the same bytes were just released
		}
		b.ptr = c.ptr
		a.blocks[b] = struct{}{}
		a.accounts[purpose].blocks++
		return b, nil
	}
	if err := a.reserve(purpose, b.cost); err != nil {
		if a.accounts[PurposeCached] == nil || a.accounts[PurposeCached].bytes == 0 {
			return nil, err
		}
		if ferr := a.flush(); ferr != nil {
			return nil, errors.Join(err, ferr)
		}
		if err := a.reserve(purpose, b.cost); err != nil {
			return nil, err
		}
	}
	if bytes > 0 {
		p, err := a.mem.MemAlloc(bytes)
		if err != nil {
			a.release(purpose, b.cost)
			return nil, fmt.Errorf("cuda: allocating %s for %q (%s in use): %w", formatBytes(bytes), purpose, formatOf(a.inUse, a.limit), err)
		}
		b.ptr = p
	}
	a.blocks[b] = struct{}{}
	a.accounts[purpose].blocks++
	return b, nil
}

// free releases a block into the cache. Freeing a dead block is an
// error.
func (a *allocator) free(b *block) error {
	return a.release1(b, true)
}

// freeNow releases a block's memory to the driver at once (cuMemFree).
func (a *allocator) freeNow(b *block) error {
	return a.release1(b, false)
}

func (a *allocator) release1(b *block, keep bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.blocks[b]; !ok || !b.live {
		return fmt.Errorf("cuda: freeing a block of %q that is not live", b.purpose)
	}
	b.live = false
	delete(a.blocks, b)
	a.release(b.purpose, b.cost)
	a.accounts[b.purpose].blocks--
	if b.bytes == 0 {
		return nil
	}
	if keep && b.cost <= cacheCap(a.limit) {
		var flushErr error
		if acc := a.accounts[PurposeCached]; acc != nil && acc.bytes+b.cost > cacheCap(a.limit) {
			flushErr = a.flush()
		}
		if err := a.reserve(PurposeCached, b.cost); err == nil { // the bytes just released
			a.accounts[PurposeCached].blocks++
			a.cache[b.bytes] = append(a.cache[b.bytes], cachedBlock{ptr: b.ptr, bytes: b.bytes, cost: b.cost})
			return flushErr
		}
	}
	if a.quiesce != nil {
		if err := a.quiesce(); err != nil {
			return err
		}
	}
	if err := a.mem.MemFree(b.ptr); err != nil {
		return fmt.Errorf("cuda: freeing %s of %q: %w", formatBytes(b.bytes), b.purpose, err)
	}
	return nil
}

// flush returns the cached blocks to the driver. Call with mu held.
func (a *allocator) flush() error {
	if len(a.cache) == 0 {
		return nil
	}
	if a.quiesce != nil {
		if err := a.quiesce(); err != nil {
			return err
		}
	}
	var errs []error
	for n, l := range a.cache {
		for _, c := range l {
			if err := a.mem.MemFree(c.ptr); err != nil {
				errs = append(errs, fmt.Errorf("cuda: freeing %s of cached memory: %w", formatBytes(c.bytes), err))
			}
			a.release(PurposeCached, c.cost)
			a.accounts[PurposeCached].blocks--
		}
		delete(a.cache, n)
	}
	return errors.Join(errs...)
}

// freeAll releases every live block (at Close).
func (a *allocator) freeAll() error {
	a.mu.Lock()
	blocks := make([]*block, 0, len(a.blocks))
	for b := range a.blocks {
		blocks = append(blocks, b)
	}
	a.mu.Unlock()
	var errs []error
	for _, b := range blocks {
		errs = append(errs, a.freeNow(b))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return errors.Join(append(errs, a.flush())...)
}

// charge counts bytes for purpose that the device gave up outside the
// allocator (the context, cuBLAS's own memory, kernel modules).
func (a *allocator) charge(purpose string, bytes int64) error {
	if bytes <= 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reserve(purpose, bytes)
}

// uncharge returns bytes counted with charge.
func (a *allocator) uncharge(purpose string, bytes int64) {
	if bytes <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.release(purpose, bytes)
}

// resetPeak makes the bytes in use now the peak (the per-purpose peaks
// keep counting from the start).
func (a *allocator) resetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.peak = a.inUse
}

// peakBytes is the most bytes counted at once since the last resetPeak.
func (a *allocator) peakBytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peak
}

// report is a snapshot of the accounts.
func (a *allocator) report() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := Report{Budget: a.budget, Limit: a.limit, InUse: a.inUse, Peak: a.peak}
	for p, acc := range a.accounts {
		r.Purposes = append(r.Purposes, PurposeUsage{Purpose: p, Bytes: acc.bytes, Peak: acc.peak, Blocks: acc.blocks})
	}
	r.sort()
	return r
}
