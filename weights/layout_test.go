package weights

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"vlanode/tensor"
)

func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		specs   []Spec
		offsets []int64
		sizes   []int64
		total   int64
	}{
		{"none", nil, []int64{}, []int64{}, 0},
		{"one exact", []Spec{{"a", tensor.F32, []int{64}}}, []int64{0}, []int64{256}, 256},
		{"one small", []Spec{{"a", tensor.BF16, []int{3}}}, []int64{0}, []int64{6}, 256},
		{"scalar", []Spec{{"a", tensor.F32, nil}}, []int64{0}, []int64{4}, 256},
		{"padded between", []Spec{
			{"a", tensor.BF16, []int{4, 100}}, // 800 bytes -> next at 1024
			{"b", tensor.F32, []int{1}},       // 4 bytes -> next at 1280
			{"c", tensor.I64, []int{32}},      // 256 bytes, ends at 1536
		}, []int64{0, 1024, 1280}, []int64{800, 4, 256}, 1536},
		{"empty tensor takes no room", []Spec{
			{"a", tensor.U8, []int{1}},
			{"e", tensor.F32, []int{0, 5}},
			{"b", tensor.U8, []int{1}},
		}, []int64{0, 256, 256}, []int64{1, 0, 1}, 512},
		{"qwen3 8B attention", []Spec{
			{"q_proj.weight", tensor.BF16, []int{4096, 4096}},
			{"k_proj.weight", tensor.BF16, []int{1024, 4096}},
			{"q_norm.weight", tensor.BF16, []int{128}},
			{"k_norm.weight", tensor.BF16, []int{128}},
		}, []int64{0, 33554432, 41943040, 41943296}, []int64{33554432, 8388608, 256, 256}, 41943552},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, total := Layout(tc.specs)
			assert.Equal(t, tc.total, total)
			offsets, sizes := []int64{}, []int64{}
			for i, e := range entries {
				offsets = append(offsets, e.Offset)
				sizes = append(sizes, e.Size)
				assert.Equal(t, tc.specs[i].Name, e.Name)
				assert.Equal(t, tc.specs[i].DType, e.DType)
				assert.Zero(t, e.Offset%Align)
			}
			assert.Equal(t, tc.offsets, offsets)
			assert.Equal(t, tc.sizes, sizes)
			assert.Zero(t, total%Align)
		})
	}
}

func TestLayoutCopiesShapes(t *testing.T) {
	shape := []int{2, 2}
	entries, _ := Layout([]Spec{{"a", tensor.F32, shape}})
	shape[0] = 9
	assert.Equal(t, []int{2, 2}, entries[0].Shape)
}
