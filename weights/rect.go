package weights

import "fmt"

// Rect is a rectangle of bytes copied between two row-major layouts:
// Height rows of Width bytes, row r read at SrcOffset + r·SrcPitch of the
// source and written at DstOffset + r·DstPitch of the destination. It
// streams part of a blob's tensor, such as the GPU's share of an MLP split
// between the GPU and the CPU: rows [a, N) of gate and up [N, K] (one
// contiguous run, Entry.RowRect) and columns [a, N) of down [H, N] (H
// runs, Entry.ColumnRect).
type Rect struct {
	SrcOffset, SrcPitch int64 // where row 0 starts in the source, and the step from row to row
	DstOffset, DstPitch int64 // the same in the destination
	Width, Height       int64 // bytes a row, rows
}

// Bytes is what the rectangle moves.
func (r Rect) Bytes() int64 { return r.Width * r.Height }

// Contiguous reports whether the rows follow one another on both sides
// (or there is one): the rectangle is then one flat run of Bytes.
func (r Rect) Contiguous() bool {
	return r.Height == 1 || (r.SrcPitch == r.Width && r.DstPitch == r.Width)
}

// Check says why r cannot copy from a source of srcSize bytes into a
// destination of dstSize bytes: a width or height below 1, a negative
// offset, a pitch below the width, or a row outside either side.
func (r Rect) Check(srcSize, dstSize int64) error {
	switch {
	case r.Width < 1 || r.Height < 1:
		return fmt.Errorf("rectangle of %d rows of %d bytes: need at least 1 of each", r.Height, r.Width)
	case r.SrcOffset < 0 || r.DstOffset < 0:
		return fmt.Errorf("rectangle at offsets %d → %d: negative", r.SrcOffset, r.DstOffset)
	case r.SrcPitch < r.Width || r.DstPitch < r.Width:
		return fmt.Errorf("rectangle of %d-byte rows at pitches %d → %d: a pitch below the width", r.Width, r.SrcPitch, r.DstPitch)
	case !fits(r.SrcOffset, r.SrcPitch, r.Width, r.Height, srcSize):
		return fmt.Errorf("rectangle of %d rows of %d bytes from offset %d at pitch %d passes the source's %d bytes", r.Height, r.Width, r.SrcOffset, r.SrcPitch, srcSize)
	case !fits(r.DstOffset, r.DstPitch, r.Width, r.Height, dstSize):
		return fmt.Errorf("rectangle of %d rows of %d bytes to offset %d at pitch %d passes the destination's %d bytes", r.Height, r.Width, r.DstOffset, r.DstPitch, dstSize)
	}
	return nil
}

// fits reports whether off + (h-1)·pitch + w <= size, without overflow;
// w >= 1, h >= 1, pitch >= w, off >= 0.
func fits(off, pitch, w, h, size int64) bool {
	if off > size || w > size-off {
		return false
	}
	return (h - 1) <= (size-off-w)/pitch
}

// ColumnRect is the rectangle of columns [from, to) of e, a 2-D [rows,
// cols] tensor of its blob, packed at dstOffset of the destination (rows
// (to-from)·element size apart): e.g. the GPU's columns of a down
// projection.
func (e Entry) ColumnRect(from, to int, dstOffset int64) (Rect, error) {
	rows, cols, el, err := e.matrix()
	if err != nil {
		return Rect{}, err
	}
	if from < 0 || to > cols || from >= to {
		return Rect{}, fmt.Errorf("weights: %s: columns [%d, %d) of %d", e.Name, from, to, cols)
	}
	w := int64(to-from) * el
	return Rect{SrcOffset: e.Offset + int64(from)*el, SrcPitch: int64(cols) * el, DstOffset: dstOffset, DstPitch: w, Width: w, Height: int64(rows)}, nil
}

// RowRect is the rectangle of rows [from, to) of e, a 2-D [rows, cols]
// tensor of its blob, at dstOffset of the destination: one contiguous
// run (a single row of (to-from)·cols elements).
func (e Entry) RowRect(from, to int, dstOffset int64) (Rect, error) {
	rows, cols, el, err := e.matrix()
	if err != nil {
		return Rect{}, err
	}
	if from < 0 || to > rows || from >= to {
		return Rect{}, fmt.Errorf("weights: %s: rows [%d, %d) of %d", e.Name, from, to, rows)
	}
	w := int64(to-from) * int64(cols) * el
	return Rect{SrcOffset: e.Offset + int64(from)*int64(cols)*el, SrcPitch: w, DstOffset: dstOffset, DstPitch: w, Width: w, Height: 1}, nil
}

// matrix is e's shape as a matrix and its element size.
func (e Entry) matrix() (rows, cols int, el int64, err error) {
	if len(e.Shape) != 2 || e.Shape[0] < 1 || e.Shape[1] < 1 {
		return 0, 0, 0, fmt.Errorf("weights: %s: shape %v is not a matrix", e.Name, e.Shape)
	}
	return e.Shape[0], e.Shape[1], int64(e.DType.Size()), nil
}
