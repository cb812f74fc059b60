package kern

import "fmt"

// Weights is a view of a row-major bf16 matrix in host memory (bit
// patterns): element (r, c) is Data[r*Stride+c] for r < Rows, c < Cols. A
// checkpoint tensor [N, K] is NewWeights(data, N, K); RowRange and ColRange
// cut views of it without copying. Data may be Go memory or, through
// unsafe.Slice, pinned host memory from the CUDA driver.
type Weights struct {
	Data       []uint16
	Rows, Cols int
	Stride     int // elements between rows; ≥ Cols
}

// NewWeights views data as a [rows, cols] matrix.
func NewWeights(data []uint16, rows, cols int) (Weights, error) {
	w := Weights{Data: data, Rows: rows, Cols: cols, Stride: cols}
	return w, w.check("weights")
}

// RowRange is the view of rows [r0, r1).
func (w Weights) RowRange(r0, r1 int) (Weights, error) {
	if r0 < 0 || r1 < r0 || r1 > w.Rows {
		return Weights{}, fmt.Errorf("kern: rows [%d, %d) of a %d-row matrix", r0, r1, w.Rows)
	}
	v := Weights{Rows: r1 - r0, Cols: w.Cols, Stride: w.Stride}
	if v.Rows > 0 {
		v.Data = w.Data[r0*w.Stride:]
	}
	return v, nil
}

// ColRange is the view of columns [c0, c1), rows keeping their pitch.
func (w Weights) ColRange(c0, c1 int) (Weights, error) {
	if c0 < 0 || c1 < c0 || c1 > w.Cols {
		return Weights{}, fmt.Errorf("kern: columns [%d, %d) of a %d-column matrix", c0, c1, w.Cols)
	}
	v := Weights{Rows: w.Rows, Cols: c1 - c0, Stride: w.Stride}
	if v.Rows > 0 && v.Cols > 0 {
		v.Data = w.Data[c0:]
	}
	return v, nil
}

// Bytes is the size of the view's elements (not of the rows' gaps).
func (w Weights) Bytes() int64 { return int64(w.Rows) * int64(w.Cols) * 2 }

// check says whether the view lies within Data; name names it in errors.
func (w Weights) check(name string) error {
	switch {
	case w.Rows < 0 || w.Cols < 0:
		return fmt.Errorf("kern: %s: negative shape [%d, %d]", name, w.Rows, w.Cols)
	case w.Stride < w.Cols:
		return fmt.Errorf("kern: %s: row pitch %d below its %d columns", name, w.Stride, w.Cols)
	case w.Rows > 0 && w.Cols > 0 && int64(w.Rows-1)*int64(w.Stride)+int64(w.Cols) > int64(len(w.Data)):
		return fmt.Errorf("kern: %s: [%d, %d] with row pitch %d needs %d elements, data has %d",
			name, w.Rows, w.Cols, w.Stride, int64(w.Rows-1)*int64(w.Stride)+int64(w.Cols), len(w.Data))
	}
	return nil
}
