package weights

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/safetensors"
	"vlanode/tensor"
)

// fill returns n bytes derived from seed, so tensors differ.
func fill(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// checkpoint writes a checkpoint shaped like one small transformer layer
// and opens it.
func checkpoint(t *testing.T) (*safetensors.Checkpoint, []safetensors.Tensor) {
	t.Helper()
	tensors := []safetensors.Tensor{
		{Name: "model.layers.3.self_attn.q_proj.weight", DType: tensor.BF16, Shape: []int{8, 12}, Data: fill(1, 192)},
		{Name: "model.layers.3.self_attn.k_proj.weight", DType: tensor.BF16, Shape: []int{4, 12}, Data: fill(2, 96)},
		{Name: "model.layers.3.input_layernorm.weight", DType: tensor.F32, Shape: []int{12}, Data: fill(3, 48)},
		{Name: "model.layers.3.mlp.up_proj.weight", DType: tensor.BF16, Shape: []int{32, 12}, Data: fill(4, 768)},
		{Name: "model.layers.3.empty", DType: tensor.BF16, Shape: []int{0}},
		{Name: "model.layers.3.scale", DType: tensor.F32, Data: fill(5, 4)},
	}
	dir := t.TempDir()
	require.NoError(t, safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), tensors, nil))
	c, err := safetensors.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c, tensors
}

func refs(tensors []safetensors.Tensor) []Ref {
	out := make([]Ref, len(tensors))
	for i, tt := range tensors {
		out[i] = Ref{Local: tt.Name[len("model.layers.3."):], Checkpoint: tt.Name}
	}
	return out
}

func TestPack(t *testing.T) {
	c, tensors := checkpoint(t)
	// A dirty allocator: Pack must zero the padding itself.
	dirty := func(size int64) ([]byte, error) {
		b, err := AlignedAlloc(size)
		for i := range b {
			b[i] = 0xAA
		}
		return b, err
	}
	for _, tc := range []struct {
		name  string
		alloc Allocator
	}{{"default", nil}, {"dirty", dirty}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Pack("vlm.layers.3", c, refs(tensors), tc.alloc)
			require.NoError(t, err)
			assert.Equal(t, "vlm.layers.3", b.Name)
			assert.True(t, Aligned(b.Data), "base %p", b.Data)
			assert.Zero(t, b.Size()%Align)
			assert.Equal(t, int64(len(b.Data)), b.Size())
			require.Len(t, b.Entries, len(tensors))

			covered := make([]bool, len(b.Data))
			for i, tt := range tensors {
				local := refs(tensors)[i].Local
				e, data, err := b.Tensor(local)
				require.NoError(t, err, local)
				assert.Equal(t, b.Entries[i], e, "entries keep the order of refs")
				assert.Zero(t, e.Offset%Align, local)
				assert.Equal(t, tt.DType, e.DType)
				if tt.Shape == nil {
					assert.Empty(t, e.Shape)
				} else {
					assert.Equal(t, tt.Shape, e.Shape)
				}
				assert.Equal(t, int64(len(tt.Data)), e.Size)
				assert.Equal(t, len(tt.Data), len(data))
				if len(tt.Data) > 0 {
					assert.Equal(t, tt.Data, data, local)
					assert.True(t, Aligned(data), local)
				}
				for j := e.Offset; j < e.Offset+e.Size; j++ {
					covered[j] = true
				}
			}
			for j, c := range covered {
				if !c {
					require.Zero(t, b.Data[j], "padding byte %d", j)
				}
			}
		})
	}
}

func TestPackEmptyLocalUsesCheckpointName(t *testing.T) {
	c, tensors := checkpoint(t)
	b, err := Pack("u", c, []Ref{{Checkpoint: tensors[0].Name}}, nil)
	require.NoError(t, err)
	_, data, err := b.Tensor(tensors[0].Name)
	require.NoError(t, err)
	assert.Equal(t, tensors[0].Data, data)
}

func TestPackNothing(t *testing.T) {
	c, _ := checkpoint(t)
	called := false
	alloc := func(int64) ([]byte, error) { called = true; return nil, errors.New("no") }
	b, err := Pack("u", c, nil, alloc)
	require.NoError(t, err)
	assert.Zero(t, b.Size())
	assert.False(t, called)
}

func TestPackErrors(t *testing.T) {
	c, tensors := checkpoint(t)
	good := refs(tensors)[:2]
	misaligned := func(size int64) ([]byte, error) {
		b, err := AlignedAlloc(size + 1)
		return b[1:], err
	}
	for _, tc := range []struct {
		name  string
		refs  []Ref
		alloc Allocator
		want  []string
		is    error
	}{
		{"missing tensor", []Ref{{Local: "q", Checkpoint: "model.layers.3.self_attn.q_proj.weight"}, {Local: "o", Checkpoint: "model.layers.3.self_attn.o_proj.weight"}}, nil,
			[]string{`weights: pack "L3"`, `tensor "model.layers.3.self_attn.o_proj.weight" not found in ` + c.Dir()}, safetensors.ErrNotFound},
		{"duplicate local", []Ref{{Local: "w", Checkpoint: tensors[0].Name}, {Local: "w", Checkpoint: tensors[1].Name}}, nil,
			[]string{`weights: pack "L3": local name "w" used twice`}, nil},
		{"allocator fails", good, func(int64) ([]byte, error) { return nil, errors.New("out of pinned memory") },
			[]string{`weights: pack "L3": allocate 512 bytes: out of pinned memory`}, nil},
		{"allocator short", good, func(int64) ([]byte, error) { return AlignedAlloc(100) },
			[]string{`weights: pack "L3": allocator returned 100 bytes, want 512`}, nil},
		{"allocator misaligned", good, misaligned,
			[]string{`weights: pack "L3": allocator returned address`, "not 256-byte aligned"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Pack("L3", c, tc.refs, tc.alloc)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
		})
	}
}

// badSource returns an Info whose data does not match its shape.
type badSource struct{}

func (badSource) Tensor(name string) (safetensors.Info, error) {
	return safetensors.Info{Name: name, DType: tensor.F32, Shape: []int{4}, Data: make([]byte, 3), File: "mem"}, nil
}

func TestPackBadSource(t *testing.T) {
	_, err := Pack("u", badSource{}, []Ref{{Local: "w", Checkpoint: "x"}}, nil)
	assert.EqualError(t, err, `weights: pack "u": tensor "x" in mem: shape [4] of F32 needs 16 bytes, data has 3`)
}

func TestBlobLookup(t *testing.T) {
	c, tensors := checkpoint(t)
	b, err := Pack("L3", c, refs(tensors), nil)
	require.NoError(t, err)

	_, ok := b.Lookup("self_attn.q_proj.weight")
	assert.True(t, ok)
	_, ok = b.Lookup("model.layers.3.self_attn.q_proj.weight")
	assert.False(t, ok, "blobs use local names")

	_, _, err = b.Tensor("nope")
	require.ErrorIs(t, err, ErrNotFound)
	assert.EqualError(t, err, `blob "L3": tensor "nope" not found`)

	foreign := Entry{Name: "x", Offset: b.Size(), Size: 1}
	assert.Nil(t, b.Bytes(foreign))
	b.Entries = append(b.Entries, foreign)
	_, _, err = b.Tensor("x")
	assert.EqualError(t, err, fmt.Sprintf(`blob "L3": tensor "x": [%d, %d) lies outside the %d-byte buffer`, b.Size(), b.Size()+1, b.Size()))
}

func TestAlignedAlloc(t *testing.T) {
	for _, n := range []int64{0, 1, 255, 256, 257, 4096, 1 << 20} {
		b, err := AlignedAlloc(n)
		require.NoError(t, err)
		assert.Len(t, b, int(n))
		assert.Equal(t, int(n), cap(b))
		assert.True(t, Aligned(b), "size %d", n)
	}
	_, err := AlignedAlloc(-1)
	assert.EqualError(t, err, "weights: cannot allocate -1 bytes")
}

// TestPackRows takes row blocks of a tensor: each block's bytes are its
// rows of the checkpoint tensor, and bad ranges fail naming the tensor.
func TestPackRows(t *testing.T) {
	c, tensors := checkpoint(t)
	up := tensors[3] // [32, 12] BF16: 24 bytes a row
	b, err := Pack("head.1", c, []Ref{
		{Local: "a", Checkpoint: up.Name, Rows: &[2]int{0, 10}},
		{Local: "b", Checkpoint: up.Name, Rows: &[2]int{10, 32}},
	}, nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		local  string
		lo, hi int
	}{{"a", 0, 10}, {"b", 10, 32}} {
		e, data, err := b.Tensor(tc.local)
		require.NoError(t, err)
		assert.Equal(t, []int{tc.hi - tc.lo, 12}, e.Shape)
		assert.Equal(t, up.Data[tc.lo*24:tc.hi*24], data)
	}
	for _, rows := range [][2]int{{-1, 3}, {5, 4}, {0, 33}} {
		_, err := Pack("bad", c, []Ref{{Local: "a", Checkpoint: up.Name, Rows: &rows}}, nil)
		assert.ErrorContains(t, err, up.Name, "rows %v", rows)
	}
}
