package safetensors

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

// TestReadReference reads testdata/reference.safetensors, written by the
// Python library (safetensors 0.8.0, torch 2.11) with:
//
//	save_file({
//	    "w": torch.tensor([[1.5, -2.25, 3.0], [0.1, 0.2, 0.3]], dtype=torch.bfloat16),
//	    "h": torch.tensor([0.5, -1.0], dtype=torch.float16),
//	    "i": torch.tensor([1, -2, 3], dtype=torch.int64),
//	    "j": torch.tensor([5, -6], dtype=torch.int32),
//	    "s": torch.tensor(2.5, dtype=torch.float32),
//	    "e": torch.zeros(0, 4, dtype=torch.bfloat16),
//	    "b": torch.tensor([True, False]),
//	}, path, metadata={"format": "pt", "k": "v"})
//
// The expected values are torch's own (w's bf16 roundings included).
func TestReadReference(t *testing.T) {
	f := openFile(t, "testdata/reference.safetensors")
	assert.Equal(t, map[string]string{"format": "pt", "k": "v"}, f.Metadata())
	assert.Equal(t, []string{"b", "e", "h", "i", "j", "s", "w"}, f.Names())

	for _, tc := range []struct {
		name  string
		dt    tensor.DType
		shape []int
		want  []float32
	}{
		{"w", tensor.BF16, []int{2, 3}, []float32{1.5, -2.25, 3.0, 0.10009765625, 0.2001953125, 0.30078125}},
		{"h", tensor.F16, []int{2}, []float32{0.5, -1}},
		{"s", tensor.F32, []int{}, []float32{2.5}},
		{"e", tensor.BF16, []int{0, 4}, []float32{}},
	} {
		in, err := f.Expect(tc.name, tc.dt, tc.shape...)
		require.NoError(t, err)
		v, err := in.F32()
		require.NoError(t, err)
		assert.Equal(t, tc.want, v, tc.name)
	}
	for _, tc := range []struct {
		name string
		dt   tensor.DType
		want []int64
	}{
		{"i", tensor.I64, []int64{1, -2, 3}},
		{"j", tensor.I32, []int64{5, -6}},
	} {
		in, err := f.Expect(tc.name, tc.dt, len(tc.want))
		require.NoError(t, err)
		v, err := in.I64()
		require.NoError(t, err)
		assert.Equal(t, tc.want, v, tc.name)
	}
	b, err := f.Expect("b", tensor.Bool, 2)
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 0}, b.Data)
}
