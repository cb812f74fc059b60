package cuda

import (
	"fmt"
	"unsafe"

	"vlanode/backend"
	"vlanode/tensor"
)

// This file holds what lets one captured graph serve every decode step:
// the step's position lives in device memory (an I32 tensor the host sets
// with UploadI32 before each launch), and the ops that depend on it read
// it there (CopyRowsAt, AttentionAt).

// UploadI32 copies int32 values into an I32 tensor through the staging
// buffer, in order with the queued ops (see Upload).
func (b *Backend) UploadI32(dst backend.Tensor, src []int32) error {
	d, err := b.arg("upload", "dst", dst)
	if err != nil {
		return err
	}
	if d.readOnly || d.dt != tensor.I32 || int64(len(src)) != d.elements() {
		return fmt.Errorf("cuda: upload: %d int32 values into %v", len(src), d)
	}
	if len(src) == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		return g.uploadStaged(d, func(buf []byte, lo, hi int64) {
			copy(unsafe.Slice((*int32)(unsafe.Pointer(&buf[lo])), (hi-lo)/4), src[lo/4:hi/4])
		})
	})
}

// CopyRowsAt copies the rows of src (F32) into dst (F32 or BF16, rounded
// as Copy rounds) from row *pos on, pos an I32 tensor of one element in
// device memory: the decode step's keys and values into the KV cache.
// Rows that would pass the end of dst are not written (the device cannot
// return an error): check the position where it is set.
func (b *Backend) CopyRowsAt(dst, src, pos backend.Tensor) error {
	const op = "copy rows"
	d, err := b.arg(op, "dst", dst)
	if err != nil {
		return err
	}
	if d.readOnly {
		return fmt.Errorf("cuda: %s: dst %v is a read-only weight", op, d)
	}
	s, err := b.f32Arg(op, "src", src)
	if err != nil {
		return err
	}
	p, err := b.posArg(op, pos)
	if err != nil {
		return err
	}
	rows, cols := backend.Matrix(s)
	dRows, dCols := backend.Matrix(d)
	switch {
	case d.dt != tensor.F32 && d.dt != tensor.BF16:
		return fmt.Errorf("cuda: %s: dst %v must be F32 or BF16", op, d)
	case dCols != cols || dRows < rows:
		return fmt.Errorf("cuda: %s: rows of src %v into dst %v", op, s, d)
	case d.overlaps(s):
		return fmt.Errorf("cuda: %s: dst %v overlaps src", op, d)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(d.ptr).Ptr(s.ptr).Ptr(p.ptr).U64(uint64(rows)).U64(uint64(cols)).U64(uint64(dRows))
		f := g.k.rowsAtF32
		if d.dt == tensor.BF16 {
			f = g.k.rowsAtBF16
		}
		return g.elementwise("copy rows at", f, int64(rows)*int64(cols))
	})
}

// CaptureGraph is Capture for model code, which sees the graph through
// backend.Graph.
func (b *Backend) CaptureGraph(fn func() error) (backend.Graph, error) {
	gr, err := b.Capture(fn)
	if err != nil {
		return nil, err
	}
	return gr, nil
}
