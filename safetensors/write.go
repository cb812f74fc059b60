package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"vlanode/tensor"
)

// Tensor is a tensor to be written by WriteFile: Data holds its
// little-endian bytes.
type Tensor struct {
	Name  string
	DType tensor.DType
	Shape []int
	Data  []byte
}

// WriteFile writes tensors to a new safetensors file at path, laid out in
// the order given; the output depends only on the arguments. Each tensor's
// Data must match its dtype and shape. On failure the partial file is
// removed.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	headers := make([]Header, len(tensors))
	for i, t := range tensors {
		headers[i] = Header{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	// Validate everything before creating the file.
	sizes, _, err := encodeHeader(headers, metadata)
	if err != nil {
		return fmt.Errorf("safetensors: write %s: %w", path, err)
	}
	for i, t := range tensors {
		if int64(len(t.Data)) != sizes[i] {
			return fmt.Errorf("safetensors: write %s: tensor %q: shape %v of %v needs %d bytes, data has %d",
				path, t.Name, t.Shape, t.DType, sizes[i], len(t.Data))
		}
	}
	w, err := Create(path, headers, metadata)
	if err != nil {
		return err
	}
	for _, t := range tensors {
		if err = w.Write(t.Name, t.Data); err != nil {
			break
		}
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// F32Tensor encodes v as an F32 tensor.
func F32Tensor(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: tensor.F32, Shape: shape, Data: b}
}

// I64Tensor encodes v as an I64 tensor.
func I64Tensor(name string, shape []int, v []int64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return Tensor{Name: name, DType: tensor.I64, Shape: shape, Data: b}
}
