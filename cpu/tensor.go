package cpu

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"vlanode/backend"
	"vlanode/tensor"
)

// Tensor is a block of host memory owned by a cpu Backend: F32 elements as
// a []float32, F16 and BF16 elements as their bit patterns in a []uint16.
// Views (Rows, Reshape) share the memory of the tensor they were made from.
type Tensor struct {
	dt    tensor.DType
	shape []int
	f32   []float32 // F32 elements, row-major
	u16   []uint16  // F16 or BF16 bit patterns, row-major
	root  *Tensor   // the allocation this tensor shares memory with (itself if not a view)
	owner *Backend

	// Set on the root only.
	purpose  string
	bytes    int64
	aliased  bool // memory belongs to the caller of Weight
	readOnly bool // a weight
	freed    bool
}

// DType returns the element type.
func (t *Tensor) DType() tensor.DType { return t.dt }

// Shape returns the dimensions; callers must not modify the slice.
func (t *Tensor) Shape() []int { return t.shape }

// Float32s returns the elements of an F32 tensor, sharing its memory (nil
// for other types). The slice is valid until the tensor is freed.
func (t *Tensor) Float32s() []float32 { return t.f32 }

// String describes the tensor for error messages and debugging.
func (t *Tensor) String() string { return fmt.Sprintf("%v%v", t.dt, t.shape) }

// ErrForeignTensor is returned (wrapped) for a tensor of another backend.
// A tensor of another cpu Backend is accepted: it is host memory too.
var ErrForeignTensor = errors.New("cpu: tensor from another backend")

// asTensor unwraps t for op, checking that it is a live cpu tensor.
func asTensor(op, name string, t backend.Tensor) (*Tensor, error) {
	ct, ok := t.(*Tensor)
	if !ok {
		if t == nil {
			return nil, fmt.Errorf("cpu: %s: %s is nil", op, name)
		}
		return nil, fmt.Errorf("%w: %s %s is %T", ErrForeignTensor, op, name, t)
	}
	if ct == nil {
		return nil, fmt.Errorf("cpu: %s: %s is nil", op, name)
	}
	if ct.root == nil {
		return nil, fmt.Errorf("cpu: %s: %s was not made by a Backend", op, name)
	}
	if ct.root.freed {
		return nil, fmt.Errorf("cpu: %s: %s %v was freed", op, name, ct)
	}
	return ct, nil
}

// f32Of unwraps an F32 tensor for op.
func f32Of(op, name string, t backend.Tensor) (*Tensor, error) {
	ct, err := asTensor(op, name, t)
	if err != nil {
		return nil, err
	}
	if ct.dt != tensor.F32 {
		return nil, fmt.Errorf("cpu: %s: %s %v must be F32", op, name, ct)
	}
	return ct, nil
}

// dstOf unwraps a writable F32 destination for op.
func dstOf(op, name string, t backend.Tensor) (*Tensor, error) {
	ct, err := f32Of(op, name, t)
	if err != nil {
		return nil, err
	}
	if ct.root.readOnly {
		return nil, fmt.Errorf("cpu: %s: %s %v is a read-only weight", op, name, ct)
	}
	return ct, nil
}

// floatOf unwraps a tensor of a floating-point type the ops can read
// (F32, F16 or BF16).
func floatOf(op, name string, t backend.Tensor) (*Tensor, error) {
	ct, err := asTensor(op, name, t)
	if err != nil {
		return nil, err
	}
	switch ct.dt {
	case tensor.F32, tensor.F16, tensor.BF16:
		return ct, nil
	}
	return nil, fmt.Errorf("cpu: %s: %s %v must be F32, F16 or BF16", op, name, ct)
}

// matrix is backend.Matrix for a cpu tensor.
func (t *Tensor) matrix() (rows, cols int) { return backend.Matrix(t) }

// elements is the element count.
func (t *Tensor) elements() int { return tensor.NumElements(t.shape) }

// widen writes elements [off, off+len(dst)) of t as float32 into dst.
func (t *Tensor) widen(dst []float32, off int) {
	switch t.dt {
	case tensor.F32:
		copy(dst, t.f32[off:off+len(dst)])
	case tensor.BF16:
		widenBF16(dst, t.u16[off:off+len(dst)])
	case tensor.F16:
		widenF16(dst, t.u16[off:off+len(dst)])
	}
}

// floats returns the elements of an F32/F16/BF16 tensor (a norm weight) as
// float32: its own memory when it is F32, else widened into buf, which
// must hold them.
func (t *Tensor) floats(buf []float32) []float32 {
	if t.dt == tensor.F32 {
		return t.f32
	}
	buf = buf[:t.elements()]
	t.widen(buf, 0)
	return buf
}

// widenBF16 widens bfloat16 bit patterns to float32 (exact).
func widenBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = bf16(h)
	}
}

// widenF16 widens IEEE half bit patterns to float32 (exact).
func widenF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = f16(h)
	}
}

// f16 is tensor.F16ToF32 with an inlined fast path for normal numbers.
func f16(h uint16) float32 {
	if e := h & 0x7c00; e != 0 && e != 0x7c00 {
		return math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7fff)+(127-15)<<10)<<13)
	}
	return tensor.F16ToF32(h)
}

// bf16 widens a bfloat16 bit pattern.
func bf16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// overlaps reports whether two float32 slices share memory, other than being
// exactly the same slice.
func overlaps(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	pb := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if pa == pb && len(a) == len(b) {
		return false
	}
	return pa < pb+uintptr(len(b))*4 && pb < pa+uintptr(len(a))*4
}

// shares reports whether two float32 slices share any memory.
func shares(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	pb := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b))*4 && pb < pa+uintptr(len(a))*4
}

// sameShape reports whether two shapes are equal.
func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
