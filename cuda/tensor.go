package cuda

import (
	"fmt"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// Tensor is device memory of a Backend: a block from the allocator (shared
// with its views) and where in it this tensor starts.
type Tensor struct {
	b        *Backend
	blk      *block
	ptr      driver.DevicePtr // element 0
	dt       tensor.DType
	shape    []int
	root     bool // made by Alloc or Weight: Free releases blk
	readOnly bool // a weight
}

var _ backend.Tensor = (*Tensor)(nil)

// DType is the element type.
func (t *Tensor) DType() tensor.DType { return t.dt }

// Shape returns the dimensions; callers must not modify the slice.
func (t *Tensor) Shape() []int { return t.shape }

// String describes the tensor for error messages.
func (t *Tensor) String() string { return fmt.Sprintf("%v%v", t.dt, t.shape) }

// Ptr is the device address of element 0, for code that launches its own
// kernels on the backend's stream.
func (t *Tensor) Ptr() driver.DevicePtr { return t.ptr }

// elements is the element count.
func (t *Tensor) elements() int64 { return int64(tensor.NumElements(t.shape)) }

// bytes is the size in bytes.
func (t *Tensor) bytes() int64 { return t.elements() * int64(t.dt.Size()) }

// overlaps reports whether t and u share any byte.
func (t *Tensor) overlaps(u *Tensor) bool {
	if t.blk != u.blk {
		return false
	}
	a0, a1 := t.ptr, t.ptr+driver.DevicePtr(t.bytes())
	b0, b1 := u.ptr, u.ptr+driver.DevicePtr(u.bytes())
	return a0 < b1 && b0 < a1
}

// same reports whether t and u are the same memory with the same size.
func (t *Tensor) same(u *Tensor) bool { return t.ptr == u.ptr && t.bytes() == u.bytes() }

// dtypeCode is the element type as the kernels number it (VLA_F32, ...):
// the tensor.DType value.
func dtypeCode(dt tensor.DType) int32 { return int32(dt) }

// checkFloat says whether dt is a type tensors can hold.
func checkFloat(op string, dt tensor.DType) error {
	switch dt {
	case tensor.F32, tensor.F16, tensor.BF16:
		return nil
	}
	return fmt.Errorf("cuda: %s: unsupported dtype %v (F32, F16 or BF16)", op, dt)
}

// checkShape validates dimensions and returns the element count.
func checkShape(op string, shape []int) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("cuda: %s: negative dimension in %v", op, shape)
		}
		n *= int64(d)
	}
	return n, nil
}

// arg unwraps an operand of op: a live tensor of this backend.
func (b *Backend) arg(op, name string, t backend.Tensor) (*Tensor, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	ct, ok := t.(*Tensor)
	if !ok || ct == nil {
		if t == nil || ok {
			return nil, fmt.Errorf("cuda: %s: %s is nil", op, name)
		}
		return nil, fmt.Errorf("cuda: %s: %s is a %T, not a cuda tensor", op, name, t)
	}
	if ct.b != b {
		return nil, fmt.Errorf("cuda: %s: %s %v belongs to another backend", op, name, ct)
	}
	if !ct.blk.live {
		return nil, fmt.Errorf("cuda: %s: %s %v was freed", op, name, ct)
	}
	return ct, nil
}

// f32Arg unwraps an F32 operand.
func (b *Backend) f32Arg(op, name string, t backend.Tensor) (*Tensor, error) {
	ct, err := b.arg(op, name, t)
	if err == nil && ct.dt != tensor.F32 {
		err = fmt.Errorf("cuda: %s: %s %v must be F32", op, name, ct)
	}
	return ct, err
}

// dstArg unwraps a writable F32 destination.
func (b *Backend) dstArg(op, name string, t backend.Tensor) (*Tensor, error) {
	ct, err := b.f32Arg(op, name, t)
	if err == nil && ct.readOnly {
		err = fmt.Errorf("cuda: %s: %s %v is a read-only weight", op, name, ct)
	}
	return ct, err
}

// floatArg unwraps an operand of type F32, F16 or BF16.
func (b *Backend) floatArg(op, name string, t backend.Tensor) (*Tensor, error) {
	ct, err := b.arg(op, name, t)
	if err == nil {
		err = checkFloat(op+": "+name, ct.dt)
	}
	return ct, err
}

// optArg unwraps an optional operand: nil (an untyped nil or a nil
// *Tensor) is none.
func (b *Backend) optArg(op, name string, t backend.Tensor) (*Tensor, error) {
	if ct, ok := t.(*Tensor); t == nil || (ok && ct == nil) {
		return nil, nil
	}
	return b.floatArg(op, name, t)
}
