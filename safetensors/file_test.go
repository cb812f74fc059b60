package safetensors

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

func TestRoundTrip(t *testing.T) {
	bf16, err := tensor.FromF32(tensor.BF16, []float32{1, -2, 0.5, 3})
	require.NoError(t, err)
	f16, err := tensor.FromF32(tensor.F16, []float32{0.25, -1})
	require.NoError(t, err)
	tensors := []Tensor{
		F32Tensor("f32", []int{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
		{Name: "bf16", DType: tensor.BF16, Shape: []int{2, 2}, Data: bf16},
		{Name: "f16", DType: tensor.F16, Shape: []int{2}, Data: f16},
		I64Tensor("i64", []int{3}, []int64{-1, 0, 1 << 40}),
		{Name: "i32", DType: tensor.I32, Shape: []int{2}, Data: []byte{0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0}},
		{Name: "u8", DType: tensor.U8, Shape: []int{5}, Data: seq(5)},
		{Name: "bool", DType: tensor.Bool, Shape: []int{1}, Data: []byte{1}},
		F32Tensor("scalar", nil, []float32{42}),
		{Name: "empty", DType: tensor.BF16, Shape: []int{0, 7}, Data: nil},
		{Name: "f64", DType: tensor.F64, Shape: []int{1}, Data: binary.LittleEndian.AppendUint64(nil, 0x3ff8000000000000)}, // 1.5
	}
	meta := map[string]string{"format": "pt", "note": "<&>"}
	path := filepath.Join(t.TempDir(), "x.safetensors")
	require.NoError(t, WriteFile(path, tensors, meta))

	f := openFile(t, path)
	assert.Equal(t, meta, f.Metadata())
	assert.Equal(t, []string{"bf16", "bool", "empty", "f16", "f32", "f64", "i32", "i64", "scalar", "u8"}, f.Names())
	for _, want := range tensors {
		got, err := f.Tensor(want.Name)
		require.NoError(t, err, want.Name)
		assert.Equal(t, want.DType, got.DType, want.Name)
		wantShape := want.Shape
		if wantShape == nil {
			wantShape = []int{}
		}
		assert.Equal(t, wantShape, got.Shape, want.Name)
		assert.Equal(t, len(want.Data), len(got.Data), want.Name)
		if len(want.Data) > 0 {
			assert.Equal(t, want.Data, got.Data, want.Name)
		}
		assert.Equal(t, path, got.File)
		assert.True(t, f.Has(want.Name))
	}
	assert.False(t, f.Has("nope"))

	// Decoders.
	for _, tc := range []struct {
		name string
		want []float32
	}{
		{"f32", []float32{1, 2, 3, 4, 5, 6}},
		{"bf16", []float32{1, -2, 0.5, 3}},
		{"f16", []float32{0.25, -1}},
		{"f64", []float32{1.5}},
		{"scalar", []float32{42}},
		{"empty", []float32{}},
	} {
		in, err := f.Tensor(tc.name)
		require.NoError(t, err)
		v, err := in.F32()
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, v, tc.name)
	}
	for _, tc := range []struct {
		name string
		want []int64
	}{
		{"i64", []int64{-1, 0, 1 << 40}},
		{"i32", []int64{-1, 7}},
	} {
		in, err := f.Tensor(tc.name)
		require.NoError(t, err)
		v, err := in.I64()
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, v, tc.name)
	}
	in, err := f.Tensor("u8")
	require.NoError(t, err)
	_, err = in.F32()
	assert.ErrorContains(t, err, `tensor "u8" in `+path+": U8 is not a floating-point type")
	_, err = in.I64()
	assert.ErrorContains(t, err, `dtype U8, want I64 or I32`)
}

func TestWriteFileDeterministicAndPadded(t *testing.T) {
	dir := t.TempDir()
	tensors := []Tensor{
		F32Tensor("z", []int{1}, []float32{1}),
		F32Tensor("a", []int{2}, []float32{2, 3}),
	}
	p1, p2 := filepath.Join(dir, "1.safetensors"), filepath.Join(dir, "2.safetensors")
	require.NoError(t, WriteFile(p1, tensors, map[string]string{"b": "1", "a": "2"}))
	require.NoError(t, WriteFile(p2, tensors, map[string]string{"a": "2", "b": "1"}))
	b1, err := os.ReadFile(p1)
	require.NoError(t, err)
	b2, err := os.ReadFile(p2)
	require.NoError(t, err)
	assert.Equal(t, b1, b2)

	n := binary.LittleEndian.Uint64(b1)
	assert.Zero(t, n%8, "header length is a multiple of 8")
	// Tensors are laid out in the order given, not by name.
	assert.Equal(t, []byte{0, 0, 0x80, 0x3f}, b1[8+n:8+n+4], "z first")
	f := openFile(t, p1)
	z, err := f.Tensor("z")
	require.NoError(t, err)
	assert.Equal(t, b1[8+n:8+n+4], z.Data)
}

// TestWriteFileExactBytes pins the layout the reference implementation
// writes for one tensor and no metadata: compact JSON with the fields in
// the order dtype, shape, data_offsets, padded with spaces to 8 bytes.
func TestWriteFileExactBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.safetensors")
	require.NoError(t, WriteFile(path, []Tensor{F32Tensor("a", []int{2}, []float32{0, 0})}, nil))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	hdr := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	want = append(want, hdr...)
	want = append(want, make([]byte, 8)...)
	assert.Equal(t, string(want), string(got))
}

func TestWriteFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tensors []Tensor
		want    string
	}{
		{"short data", []Tensor{{Name: "w", DType: tensor.BF16, Shape: []int{2, 3}, Data: make([]byte, 10)}},
			`tensor "w": shape [2 3] of BF16 needs 12 bytes, data has 10`},
		{"long data", []Tensor{F32Tensor("w", []int{1}, []float32{1, 2})},
			`tensor "w": shape [1] of F32 needs 4 bytes, data has 8`},
		{"negative dim", []Tensor{{Name: "w", DType: tensor.F32, Shape: []int{-1}}},
			`tensor "w": negative dimension in shape [-1]`},
		{"invalid dtype", []Tensor{{Name: "w", Shape: []int{1}, Data: []byte{0}}},
			`tensor "w": invalid dtype invalid`},
		{"duplicate", []Tensor{F32Tensor("w", nil, []float32{1}), F32Tensor("w", nil, []float32{1})},
			`tensor "w": duplicate name`},
		{"no name", []Tensor{F32Tensor("", nil, []float32{1})}, `tensor 0 has no name`},
		{"reserved", []Tensor{F32Tensor("__metadata__", nil, []float32{1})}, `"__metadata__" is reserved`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.safetensors")
			err := WriteFile(path, tc.tensors, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tc.want)
			_, statErr := os.Stat(path)
			assert.True(t, errors.Is(statErr, os.ErrNotExist), "no file left behind")
		})
	}
}

func TestTensorNotFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	require.NoError(t, WriteFile(path, []Tensor{F32Tensor("a", nil, []float32{1})}, nil))
	f := openFile(t, path)
	_, err := f.Tensor("b")
	require.ErrorIs(t, err, ErrNotFound)
	assert.EqualError(t, err, `tensor "b" not found in `+path)
	assert.Empty(t, f.Metadata())
}

func TestClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	require.NoError(t, WriteFile(path, []Tensor{F32Tensor("a", nil, []float32{1})}, nil))
	f, err := OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "Close is idempotent")
	_, err = f.Tensor("a")
	assert.ErrorContains(t, err, `tensor "a" in `+path+": file is closed")
	assert.True(t, f.Has("a"), "the header survives Close")
}
