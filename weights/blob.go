// Package weights packs the tensors of one unit (a transformer layer, or a
// sub-layer such as its attention or FFN block) into a flat blob: a single
// contiguous buffer plus a table of (name, offset, shape, dtype).
//
// A blob is what demand layering moves: one host-to-device copy places a
// whole unit in a VRAM slot. Every tensor starts at a multiple of Align from
// the blob's base, and the base itself is Align-aligned, so a tensor has the
// same address alignment wherever its blob lives (pinned host memory, a
// resident VRAM buffer or either DFB slot) and kernels that choose an
// algorithm by pointer alignment behave identically in every placement.
package weights

import (
	"errors"
	"fmt"

	"vlanode/tensor"
)

// Align is the alignment, in bytes, of a blob's base address and of every
// tensor offset inside it.
const Align = 256

// ErrNotFound is wrapped by the error of a lookup of a tensor a blob lacks.
var ErrNotFound = errors.New("not found")

// Entry places one tensor inside a blob.
type Entry struct {
	// Name is the unit-local name, e.g. "self_attn.q_proj.weight".
	Name  string
	DType tensor.DType
	Shape []int
	// Offset is the byte offset from the blob's base, a multiple of Align.
	Offset int64
	// Size is the tensor's byte size, without padding.
	Size int64
}

// Blob is one unit's weights in one buffer. Data's base address is
// Align-aligned and len(Data) is a multiple of Align; the bytes between
// tensors are zero. Data is owned by whoever allocated it (see Allocator):
// the blob frees nothing.
type Blob struct {
	// Name identifies the unit in errors and reports, e.g. "vlm.layers.3".
	Name string
	// Data holds every tensor at its entry's offset.
	Data []byte
	// Entries are in layout order (the order the tensors were packed).
	Entries []Entry
}

// Lookup returns the entry of the named tensor.
func (b *Blob) Lookup(name string) (Entry, bool) {
	for _, e := range b.Entries {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// Bytes returns the bytes of entry e, a slice of Data. It returns nil if e
// does not lie inside Data (an entry of another blob).
func (b *Blob) Bytes(e Entry) []byte {
	end := e.Offset + e.Size
	if e.Offset < 0 || e.Size < 0 || end > int64(len(b.Data)) {
		return nil
	}
	return b.Data[e.Offset:end:end]
}

// Tensor returns the entry and bytes of the named tensor.
func (b *Blob) Tensor(name string) (Entry, []byte, error) {
	e, ok := b.Lookup(name)
	if !ok {
		return Entry{}, nil, fmt.Errorf("blob %q: tensor %q %w", b.Name, name, ErrNotFound)
	}
	data := b.Bytes(e)
	if data == nil {
		return Entry{}, nil, fmt.Errorf("blob %q: tensor %q: [%d, %d) lies outside the %d-byte buffer",
			b.Name, name, e.Offset, e.Offset+e.Size, len(b.Data))
	}
	return e, data, nil
}

// Size is the blob's size in bytes, padding included: len(Data).
func (b *Blob) Size() int64 { return int64(len(b.Data)) }
