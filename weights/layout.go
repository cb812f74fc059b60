package weights

import "vlanode/tensor"

// Spec is a tensor to be placed in a blob.
type Spec struct {
	Name  string
	DType tensor.DType
	Shape []int
}

// Layout places specs one after another, in the order given, each at the
// next multiple of Align. It returns the entries and the blob size: the end
// of the last tensor rounded up to Align (0 for no specs).
func Layout(specs []Spec) ([]Entry, int64) {
	entries := make([]Entry, len(specs))
	var off int64
	for i, s := range specs {
		size := int64(tensor.NumElements(s.Shape)) * int64(s.DType.Size())
		off = alignUp(off)
		entries[i] = Entry{
			Name:   s.Name,
			DType:  s.DType,
			Shape:  append([]int{}, s.Shape...),
			Offset: off,
			Size:   size,
		}
		off += size
	}
	return entries, alignUp(off)
}

// alignUp rounds n up to a multiple of Align.
func alignUp(n int64) int64 { return (n + Align - 1) / Align * Align }
