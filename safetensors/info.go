package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"vlanode/tensor"
)

// ErrMismatch is wrapped by Expect's errors when a tensor exists but has the
// wrong dtype or shape.
var ErrMismatch = errors.New("mismatch")

// Info describes one tensor of a checkpoint.
type Info struct {
	// Name is the tensor's name in the checkpoint.
	Name  string
	DType tensor.DType
	// Shape is a copy the caller may keep; a scalar has an empty shape.
	Shape []int
	// Data is the tensor's little-endian bytes: a read-only slice of the
	// file's mapping, valid until the file is closed.
	Data []byte
	// File is the path of the file that holds the tensor.
	File string
}

// NumElements is the number of elements (1 for a scalar).
func (in Info) NumElements() int { return tensor.NumElements(in.Shape) }

// F32 decodes the tensor, of any floating-point dtype, into a new []float32.
func (in Info) F32() ([]float32, error) {
	if !in.DType.IsFloat() {
		return nil, fmt.Errorf("tensor %q in %s: %v is not a floating-point type", in.Name, in.File, in.DType)
	}
	if err := in.checkLen(); err != nil {
		return nil, err
	}
	out := make([]float32, in.NumElements())
	if err := tensor.ToF32(out, in.DType, in.Data); err != nil {
		return nil, fmt.Errorf("tensor %q in %s: %w", in.Name, in.File, err)
	}
	return out, nil
}

// I64 decodes an I64 or I32 tensor into a new []int64.
func (in Info) I64() ([]int64, error) {
	if err := in.checkLen(); err != nil {
		return nil, err
	}
	out := make([]int64, in.NumElements())
	switch in.DType {
	case tensor.I64:
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(in.Data[8*i:]))
		}
	case tensor.I32:
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(in.Data[4*i:])))
		}
	default:
		return nil, fmt.Errorf("tensor %q in %s: dtype %v, want I64 or I32", in.Name, in.File, in.DType)
	}
	return out, nil
}

// checkLen guards the decoders against an Info built by hand whose Data does
// not match its shape.
func (in Info) checkLen() error {
	need, ok := byteSize(in.DType, in.Shape)
	if !ok || int64(len(in.Data)) != need {
		return fmt.Errorf("tensor %q in %s: shape %v of %v needs %d bytes, data has %d",
			in.Name, in.File, in.Shape, in.DType, need, len(in.Data))
	}
	return nil
}

// lookup is what Expect needs of a File or a Checkpoint.
type lookup interface {
	Tensor(name string) (Info, error)
}

// expect implements File.Expect and Checkpoint.Expect.
func expect(l lookup, name string, dt tensor.DType, shape []int) (Info, error) {
	in, err := l.Tensor(name)
	if err != nil {
		return Info{}, err
	}
	switch {
	case dt == tensor.Invalid && !in.DType.IsFloat():
		return Info{}, mismatch("tensor %q in %s: dtype %v, want a floating-point type", name, in.File, in.DType)
	case dt != tensor.Invalid && in.DType != dt:
		return Info{}, mismatch("tensor %q in %s: dtype %v, want %v", name, in.File, in.DType, dt)
	}
	if !shapeMatches(in.Shape, shape) {
		return Info{}, mismatch("tensor %q in %s: shape %v, want %v", name, in.File, in.Shape, shape)
	}
	return in, nil
}

// mismatchError is an Expect failure; it matches ErrMismatch.
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string { return e.msg }
func (e *mismatchError) Unwrap() error { return ErrMismatch }

func mismatch(format string, args ...any) error {
	return &mismatchError{msg: fmt.Sprintf(format, args...)}
}

// shapeMatches reports whether got equals want, where -1 in want matches any
// size of that dimension.
func shapeMatches(got, want []int) bool {
	return slices.EqualFunc(got, want, func(g, w int) bool { return w == -1 || g == w })
}
