// Package cpu is the reference compute backend: every op of
// backend.Backend in float32 arithmetic on the host, in parallel over a pool
// of worker goroutines owned by the Backend.
//
// Tensors live in ordinary Go memory. Weight aliases the caller's bytes when
// they are suitably aligned (zero-copy), so a checkpoint mapped into memory is
// used in place.
package cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"vlanode/backend"
	"vlanode/cpu/kern"
	"vlanode/tensor"
)

// ErrClosed is returned by every call on a closed Backend.
var ErrClosed = errors.New("cpu: backend closed")

// Option configures New.
type Option func(*options) error

type options struct {
	threads int
	kern    *kern.Pool
}

// WithKernels makes the backend compute MLP shares (MLPShare) with the
// pinned-thread bf16 kernels of pool (AMX, AVX-512-BF16 or AVX2, as the
// CPU has them): a CPU engine's backend. The caller keeps pool and MUST
// close it after the backend.
func WithKernels(pool *kern.Pool) Option {
	return func(o *options) error {
		if pool == nil {
			return fmt.Errorf("cpu: no kernel pool")
		}
		o.kern = pool
		return nil
	}
}

// WithThreads sets the number of threads (worker goroutines, the calling one
// included) that ops run on. The default is runtime.NumCPU().
func WithThreads(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("cpu: %d threads: need at least 1", n)
		}
		o.threads = n
		return nil
	}
}

// Backend is the cpu implementation of backend.Backend. Like every backend
// it serves one goroutine at a time; Usage may be called concurrently.
type Backend struct {
	kern    *kern.Pool // the bf16 kernels for MLPShare, when given (WithKernels)
	pool    *pool
	scratch *scratch
	closed  atomic.Bool

	mu      sync.Mutex       // guards the two maps
	usage   map[string]int64 // bytes by purpose: Alloc, copied and aliased Weight
	aliased map[string]int64 // the part of usage that aliases caller memory
}

var _ backend.Backend = (*Backend)(nil)

// New starts a Backend and its worker goroutines. Close stops them.
func New(opts ...Option) (*Backend, error) {
	o := options{threads: runtime.NumCPU()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Backend{
		kern:    o.kern,
		pool:    newPool(o.threads),
		scratch: newScratch(o.threads),
		usage:   map[string]int64{},
		aliased: map[string]int64{},
	}, nil
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Threads is the number of threads ops run on.
func (b *Backend) Threads() int { return len(b.scratch.bufs) }

// Close stops the worker goroutines. Tensors stay readable through
// Float32s, but every later call on b returns ErrClosed. Closing twice is
// harmless.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.pool.close()
	return nil
}

// Sync returns at once: every op has finished when it returns.
func (b *Backend) Sync() error {
	if b.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Usage returns the bytes held by live tensors from Alloc and Weight, by
// purpose. Weights that alias caller memory are included; AliasedUsage says
// how much of each purpose that is.
func (b *Backend) Usage() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.usage)
}

// AliasedUsage returns the bytes of live Weight tensors that alias the
// caller's memory instead of a copy, by purpose.
func (b *Backend) AliasedUsage() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.aliased)
}

// account adds delta bytes to purpose.
func (b *Backend) account(purpose string, delta int64, aliased bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	add := func(m map[string]int64) {
		m[purpose] += delta
		if m[purpose] == 0 {
			delete(m, purpose)
		}
	}
	add(b.usage)
	if aliased {
		add(b.aliased)
	}
}

// checkShape validates dimensions and returns the element count.
func checkShape(op string, dt tensor.DType, shape []int) (int, error) {
	switch dt {
	case tensor.F32, tensor.F16, tensor.BF16:
	default:
		return 0, fmt.Errorf("cpu: %s: unsupported dtype %v (F32, F16 or BF16)", op, dt)
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("cpu: %s: negative dimension in shape %v", op, shape)
		}
		if d > 0 && n > maxElements/d {
			return 0, fmt.Errorf("cpu: %s: shape %v is too large", op, shape)
		}
		n *= d
	}
	return n, nil
}

// maxElements bounds a tensor's element count so that byte sizes fit an int.
const maxElements = 1 << 48

// Alloc returns a zeroed F32, F16 or BF16 tensor.
func (b *Backend) Alloc(purpose string, dt tensor.DType, shape ...int) (backend.Tensor, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	n, err := checkShape("alloc", dt, shape)
	if err != nil {
		return nil, err
	}
	t := &Tensor{dt: dt, shape: append([]int(nil), shape...), owner: b, purpose: purpose}
	t.root = t
	if dt == tensor.F32 {
		t.f32 = make([]float32, n)
	} else {
		t.u16 = make([]uint16, n)
	}
	t.bytes = int64(n) * int64(dt.Size())
	b.account(purpose, t.bytes, false)
	return t, nil
}

// littleEndian is whether the host stores numbers as the checkpoint does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Weight makes a read-only F32, F16 or BF16 tensor from little-endian bytes.
// It aliases data when the host is little-endian and data is aligned for
// the element type; otherwise it copies.
func (b *Backend) Weight(purpose string, dt tensor.DType, shape []int, data []byte) (backend.Tensor, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	n, err := checkShape("weight", dt, shape)
	if err != nil {
		return nil, err
	}
	if len(data) != n*dt.Size() {
		return nil, fmt.Errorf("cpu: weight: %v%v needs %d bytes, got %d", dt, shape, n*dt.Size(), len(data))
	}
	t := &Tensor{dt: dt, shape: append([]int(nil), shape...), owner: b, purpose: purpose, readOnly: true}
	t.root = t
	t.bytes = int64(len(data))
	var p unsafe.Pointer
	if n > 0 {
		p = unsafe.Pointer(unsafe.SliceData(data))
	}
	t.aliased = n > 0 && littleEndian && uintptr(p)%uintptr(dt.Size()) == 0
	switch {
	case t.aliased && dt == tensor.F32:
		t.f32 = unsafe.Slice((*float32)(p), n)
	case t.aliased:
		t.u16 = unsafe.Slice((*uint16)(p), n)
	case dt == tensor.F32:
		t.f32 = make([]float32, n)
		if err := tensor.ToF32(t.f32, dt, data); err != nil {
			return nil, fmt.Errorf("cpu: weight: %w", err)
		}
	default:
		t.u16 = make([]uint16, n)
		for i := range t.u16 {
			t.u16[i] = binary.LittleEndian.Uint16(data[2*i:])
		}
	}
	b.account(purpose, t.bytes, t.aliased)
	return t, nil
}

// Free releases a tensor from Alloc or Weight: its bytes leave the
// accounting and its memory goes to the garbage collector once no view uses
// it. Freeing a view, a freed tensor, or another backend's tensor does
// nothing.
func (b *Backend) Free(bt backend.Tensor) {
	t, ok := bt.(*Tensor)
	if !ok || t == nil || t.root != t || t.owner != b || t.freed {
		return
	}
	t.freed = true
	b.account(t.purpose, -t.bytes, t.aliased)
	t.f32, t.u16 = nil, nil
}

// view makes a tensor that shares t's memory from element off on.
func (t *Tensor) view(shape []int, off, n int) *Tensor {
	v := &Tensor{dt: t.dt, shape: shape, root: t.root, owner: t.owner}
	if t.dt == tensor.F32 {
		v.f32 = t.f32[off : off+n : off+n]
	} else {
		v.u16 = t.u16[off : off+n : off+n]
	}
	return v
}

// Rows is a view of rows [start, start+n) of the first dimension.
func (b *Backend) Rows(bt backend.Tensor, start, n int) (backend.Tensor, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	t, err := asTensor("rows", "tensor", bt)
	if err != nil {
		return nil, err
	}
	if len(t.shape) == 0 {
		return nil, fmt.Errorf("cpu: rows: %v is a scalar", t)
	}
	if start < 0 || n < 0 || start+n > t.shape[0] {
		return nil, fmt.Errorf("cpu: rows: [%d, %d) outside the %d rows of %v", start, start+n, t.shape[0], t)
	}
	row := tensor.NumElements(t.shape[1:])
	shape := append([]int{n}, t.shape[1:]...)
	return t.view(shape, start*row, n*row), nil
}

// Reshape is a view with another shape of the same element count.
func (b *Backend) Reshape(bt backend.Tensor, shape ...int) (backend.Tensor, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	t, err := asTensor("reshape", "tensor", bt)
	if err != nil {
		return nil, err
	}
	n, err := checkShape("reshape", t.dt, shape)
	if err != nil {
		return nil, err
	}
	if n != t.elements() {
		return nil, fmt.Errorf("cpu: reshape: %v has %d elements, shape %v has %d", t, t.elements(), shape, n)
	}
	return t.view(append([]int(nil), shape...), 0, n), nil
}

// Upload copies float32 values into an F32 tensor.
func (b *Backend) Upload(dst backend.Tensor, src []float32) error {
	if b.closed.Load() {
		return ErrClosed
	}
	d, err := dstOf("upload", "dst", dst)
	if err != nil {
		return err
	}
	if len(src) != len(d.f32) {
		return fmt.Errorf("cpu: upload: %d values into %v", len(src), d)
	}
	copy(d.f32, src)
	return nil
}

// Download copies an F32 tensor to a new slice.
func (b *Backend) Download(src backend.Tensor) ([]float32, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	s, err := f32Of("download", "src", src)
	if err != nil {
		return nil, err
	}
	return append([]float32(nil), s.f32...), nil
}
