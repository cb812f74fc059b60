package safetensors

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

func TestExpect(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	require.NoError(t, WriteFile(path, []Tensor{
		{Name: "w", DType: tensor.BF16, Shape: []int{4, 8}, Data: make([]byte, 64)},
		F32Tensor("s", nil, []float32{1}),
		I64Tensor("ids", []int{3}, []int64{1, 2, 3}),
	}, nil))
	c := openDir(t, dir)
	f := openFile(t, path)
	for _, tc := range []struct {
		name   string
		tensor string
		dt     tensor.DType
		shape  []int
		want   string // error; "" for success
	}{
		{"exact", "w", tensor.BF16, []int{4, 8}, ""},
		{"any float", "w", tensor.Invalid, []int{4, 8}, ""},
		{"wildcard dim", "w", tensor.BF16, []int{-1, 8}, ""},
		{"scalar", "s", tensor.F32, nil, ""},
		{"ints", "ids", tensor.I64, []int{3}, ""},
		{"wrong shape", "w", tensor.BF16, []int{4, 16}, `tensor "w" in PATH: shape [4 8], want [4 16]`},
		{"wrong rank", "w", tensor.BF16, []int{32}, `tensor "w" in PATH: shape [4 8], want [32]`},
		{"wildcard wrong dim", "w", tensor.BF16, []int{-1, 7}, `tensor "w" in PATH: shape [4 8], want [-1 7]`},
		{"scalar wanted", "w", tensor.BF16, nil, `tensor "w" in PATH: shape [4 8], want []`},
		{"wrong dtype", "w", tensor.F16, []int{4, 8}, `tensor "w" in PATH: dtype BF16, want F16`},
		{"not a float", "ids", tensor.Invalid, []int{3}, `tensor "ids" in PATH: dtype I64, want a floating-point type`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, l := range []struct {
				name   string
				expect func(string, tensor.DType, ...int) (Info, error)
			}{{"checkpoint", c.Expect}, {"file", f.Expect}} {
				in, err := l.expect(tc.tensor, tc.dt, tc.shape...)
				if tc.want == "" {
					require.NoError(t, err, l.name)
					assert.Equal(t, tc.tensor, in.Name, l.name)
					continue
				}
				require.ErrorIs(t, err, ErrMismatch, l.name)
				assert.EqualError(t, err, strings.Replace(tc.want, "PATH", path, 1), l.name)
			}
		})
	}

	_, err := c.Expect("nope", tensor.F32)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.NotErrorIs(t, err, ErrMismatch)
}

func TestDecodeBadInfo(t *testing.T) {
	in := Info{Name: "x", DType: tensor.F32, Shape: []int{2}, Data: make([]byte, 4), File: "f"}
	_, err := in.F32()
	assert.EqualError(t, err, `tensor "x" in f: shape [2] of F32 needs 8 bytes, data has 4`)
	in.DType = tensor.I64
	_, err = in.I64()
	assert.EqualError(t, err, `tensor "x" in f: shape [2] of I64 needs 16 bytes, data has 4`)
}
