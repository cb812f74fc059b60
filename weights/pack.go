package weights

import (
	"fmt"
	"math"
	"unsafe"

	"vlanode/safetensors"
	"vlanode/tensor"
)

// Source looks tensors up by checkpoint name; *safetensors.Checkpoint and
// *safetensors.File satisfy it.
type Source interface {
	Tensor(name string) (safetensors.Info, error)
}

// Ref names one tensor of a unit twice: Local is its name inside the blob
// (e.g. "self_attn.q_proj.weight"), Checkpoint its name in the checkpoint
// (e.g. "model.layers.3.self_attn.q_proj.weight"). An empty Local means the
// checkpoint name.
type Ref struct {
	Local, Checkpoint string
	// Rows, when set, takes only rows [Rows[0], Rows[1]) of the
	// checkpoint tensor's first dimension (a block of an LM head).
	Rows *[2]int
}

// Allocator returns a buffer of at least size bytes whose base address is
// Align-aligned, such as pinned host memory. The caller of Pack owns it.
type Allocator func(size int64) ([]byte, error)

// AlignedAlloc is the default Allocator: Go heap memory, over-allocated by
// Align and sliced at an aligned address. The garbage collector frees it.
func AlignedAlloc(size int64) ([]byte, error) {
	if size < 0 || size > math.MaxInt-Align {
		return nil, fmt.Errorf("weights: cannot allocate %d bytes", size)
	}
	buf := make([]byte, int(size)+Align)
	off := (Align - int(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%Align)) % Align
	return buf[off : off+int(size) : off+int(size)], nil
}

// Aligned reports whether b starts at an Align-aligned address.
func Aligned(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%Align == 0
}

// Pack builds the blob called name from the tensors refs names in src: it
// looks every tensor up, lays them out in the order of refs (see Layout),
// allocates the buffer with alloc (nil means AlignedAlloc) and copies the
// bytes in, zeroing the padding. The blob's Data aliases alloc's buffer;
// alloc is not called when the blob would be empty.
func Pack(name string, src Source, refs []Ref, alloc Allocator) (*Blob, error) {
	if alloc == nil {
		alloc = AlignedAlloc
	}
	specs := make([]Spec, len(refs))
	datas := make([][]byte, len(refs))
	seen := make(map[string]bool, len(refs))
	for i, r := range refs {
		local := r.Local
		if local == "" {
			local = r.Checkpoint
		}
		if seen[local] {
			return nil, fmt.Errorf("weights: pack %q: local name %q used twice", name, local)
		}
		seen[local] = true
		in, err := src.Tensor(r.Checkpoint)
		if err != nil {
			return nil, fmt.Errorf("weights: pack %q: %w", name, err)
		}
		need := int64(tensor.NumElements(in.Shape)) * int64(in.DType.Size())
		if in.DType.Size() == 0 || int64(len(in.Data)) != need {
			return nil, fmt.Errorf("weights: pack %q: tensor %q in %s: shape %v of %v needs %d bytes, data has %d",
				name, r.Checkpoint, in.File, in.Shape, in.DType, need, len(in.Data))
		}
		shape, data := in.Shape, in.Data
		if r.Rows != nil {
			lo, hi := r.Rows[0], r.Rows[1]
			if len(shape) == 0 || lo < 0 || hi < lo || hi > shape[0] {
				return nil, fmt.Errorf("weights: pack %q: rows [%d, %d) of tensor %q %v", name, lo, hi, r.Checkpoint, shape)
			}
			row := int64(tensor.NumElements(shape[1:])) * int64(in.DType.Size())
			shape = append([]int{hi - lo}, shape[1:]...)
			data = data[int64(lo)*row : int64(hi)*row]
		}
		specs[i] = Spec{Name: local, DType: in.DType, Shape: shape}
		datas[i] = data
	}
	entries, total := Layout(specs)
	if total == 0 { // nothing to allocate: no tensors, or only empty ones
		return &Blob{Name: name, Data: []byte{}, Entries: entries}, nil
	}
	buf, err := alloc(total)
	if err != nil {
		return nil, fmt.Errorf("weights: pack %q: allocate %d bytes: %w", name, total, err)
	}
	switch {
	case int64(len(buf)) < total:
		return nil, fmt.Errorf("weights: pack %q: allocator returned %d bytes, want %d", name, len(buf), total)
	case !Aligned(buf):
		return nil, fmt.Errorf("weights: pack %q: allocator returned address %#x, not %d-byte aligned",
			name, uintptr(unsafe.Pointer(unsafe.SliceData(buf))), Align)
	}
	buf = buf[:total:total]
	var end int64 // end of the previous tensor
	for i, e := range entries {
		clear(buf[end:e.Offset])
		copy(buf[e.Offset:], datas[i])
		end = e.Offset + e.Size
	}
	clear(buf[end:])
	return &Blob{Name: name, Data: buf, Entries: entries}, nil
}
