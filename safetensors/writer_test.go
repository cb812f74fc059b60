package safetensors

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

func TestWriterMatchesWriteFile(t *testing.T) {
	dir := t.TempDir()
	tensors := []Tensor{
		{Name: "big", DType: tensor.U8, Shape: []int{3 << 20}, Data: seq(3 << 20)}, // past the write buffer
		F32Tensor("small", []int{2}, []float32{1, 2}),
		{Name: "empty", DType: tensor.F16, Shape: []int{0}},
	}
	meta := map[string]string{"format": "pt"}
	whole := filepath.Join(dir, "whole.safetensors")
	require.NoError(t, WriteFile(whole, tensors, meta))

	streamed := filepath.Join(dir, "streamed.safetensors")
	headers := make([]Header, len(tensors))
	for i, tt := range tensors {
		headers[i] = Header{Name: tt.Name, DType: tt.DType, Shape: tt.Shape}
	}
	w, err := Create(streamed, headers, meta)
	require.NoError(t, err)
	for _, tt := range tensors {
		require.NoError(t, w.Write(tt.Name, tt.Data))
	}
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "a second Close does nothing")

	a, err := os.ReadFile(whole)
	require.NoError(t, err)
	b, err := os.ReadFile(streamed)
	require.NoError(t, err)
	assert.Equal(t, a, b)

	f := openFile(t, streamed)
	big, err := f.Tensor("big")
	require.NoError(t, err)
	assert.Equal(t, tensors[0].Data, big.Data)
}

func TestWriterErrors(t *testing.T) {
	headers := []Header{
		{Name: "a", DType: tensor.F32, Shape: []int{2}},
		{Name: "b", DType: tensor.BF16, Shape: []int{3}},
	}
	a, b := make([]byte, 8), make([]byte, 6)
	for _, tc := range []struct {
		name  string
		steps func(w *Writer) error // returns the error under test
		want  string
	}{
		{"out of order", func(w *Writer) error { return w.Write("b", b) },
			`tensor "b" out of order: tensor 1 of 2 is "a"`},
		{"unknown name", func(w *Writer) error { return w.Write("zz", a) },
			`tensor "zz" out of order: tensor 1 of 2 is "a"`},
		{"written twice", func(w *Writer) error {
			require.NoError(t, w.Write("a", a))
			return w.Write("a", a)
		}, `tensor "a" out of order: tensor 2 of 2 is "b"`},
		{"too many", func(w *Writer) error {
			require.NoError(t, w.Write("a", a))
			require.NoError(t, w.Write("b", b))
			return w.Write("c", a)
		}, `tensor "c": all 2 tensors are already written`},
		{"wrong size", func(w *Writer) error { return w.Write("a", b) },
			`tensor "a": shape [2] of F32 needs 8 bytes, got 6`},
		{"close early", func(w *Writer) error {
			require.NoError(t, w.Write("a", a))
			return w.Close()
		}, `only 1 of 2 tensors written; next was "b"`},
		{"close before any", func(w *Writer) error { return w.Close() },
			`only 0 of 2 tensors written; next was "a"`},
		{"write after close", func(w *Writer) error {
			_ = w.Close()
			return w.Write("a", a)
		}, `tensor "a": writer is closed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.safetensors")
			w, err := Create(path, headers, nil)
			require.NoError(t, err)
			err = tc.steps(w)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tc.want)
			_ = w.Close()
			_, statErr := os.Stat(path)
			assert.NoError(t, statErr, "the writer removes nothing")
		})
	}
}

func TestCreateErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []Header
		want    string
	}{
		{"duplicate", []Header{{Name: "a", DType: tensor.F32}, {Name: "a", DType: tensor.F32}}, `tensor "a": duplicate name`},
		{"negative", []Header{{Name: "a", DType: tensor.F32, Shape: []int{1, -2}}}, `tensor "a": negative dimension in shape [1 -2]`},
		{"dtype", []Header{{Name: "a", DType: tensor.DType(99)}}, `tensor "a": invalid dtype DType(99)`},
		{"overflow", []Header{{Name: "a", DType: tensor.F32, Shape: []int{1 << 62, 4}}}, `overflows int64 bytes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.safetensors")
			_, err := Create(path, tc.headers, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "create "+path)
			assert.Contains(t, err.Error(), tc.want)
			_, statErr := os.Stat(path)
			assert.True(t, errors.Is(statErr, os.ErrNotExist), "nothing is created")
		})
	}
}
