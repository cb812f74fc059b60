package cuda

import (
	"fmt"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/layering"
	"vlanode/weights"
)

// WeightAt is a read-only weight tensor over the bytes of a DFB slot at
// e's offset: where the tensor e describes lands when its blob is copied
// into the slot. It is a view: nothing is copied or allocated, Free does
// nothing, and it reads whatever blob the slot holds when an op runs, so
// a unit must bind one view per slot and use the one of the slot the
// executor passes to its Run. The slot keeps the blob's 256-byte
// alignment (weights.Align), so kernels see the same alignment as for a
// resident copy.
func (d *DFBDevice) WeightAt(s layering.Slot, e weights.Entry) (backend.Tensor, error) {
	blk, err := d.slot(s)
	if err != nil {
		return nil, err
	}
	if err := checkFloat("weight at", e.DType); err != nil {
		return nil, err
	}
	n, err := checkShape("weight at", e.Shape)
	if err != nil {
		return nil, err
	}
	switch {
	case n*int64(e.DType.Size()) != e.Size:
		return nil, fmt.Errorf("cuda: weight at: %s: %v%v needs %d bytes, the entry has %d", e.Name, e.DType, e.Shape, n*int64(e.DType.Size()), e.Size)
	case e.Offset < 0 || e.Offset%weights.Align != 0:
		return nil, fmt.Errorf("cuda: weight at: %s: offset %d is not a multiple of %d", e.Name, e.Offset, weights.Align)
	case e.Offset+e.Size > blk.bytes:
		return nil, fmt.Errorf("cuda: weight at: %s: [%d, %d) lies outside slot %d of %d bytes", e.Name, e.Offset, e.Offset+e.Size, s, blk.bytes)
	}
	return &Tensor{
		b: d.b, blk: blk, ptr: blk.ptr + driver.DevicePtr(e.Offset),
		dt: e.DType, shape: append([]int(nil), e.Shape...), readOnly: true,
	}, nil
}
