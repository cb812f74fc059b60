package cpu

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/tensor"
)

func TestNew(t *testing.T) {
	b := newBackend(t)
	assert.Equal(t, "cpu", b.Name())
	assert.Equal(t, runtime.NumCPU(), b.Threads())

	b3 := newBackend(t, WithThreads(3))
	assert.Equal(t, 3, b3.Threads())

	_, err := New(WithThreads(0))
	require.ErrorContains(t, err, "0 threads")
}

func TestAllocZeroedAndAccounting(t *testing.T) {
	b := newBackend(t)
	x, err := b.Alloc("activations", tensor.F32, 2, 3)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, x.Shape())
	assert.Equal(t, tensor.F32, x.DType())
	assert.Equal(t, make([]float32, 6), download(t, b, x))

	kv, err := b.Alloc("kv-cache", tensor.BF16, 4, 4)
	require.NoError(t, err)
	assert.Equal(t, make([]uint16, 16), kv.(*Tensor).u16)

	data := make([]byte, 40) // Go allocations are aligned: aliased
	_, err = b.Weight("weights", tensor.F32, []int{10}, data)
	require.NoError(t, err)
	unaligned := make([]byte, 21)
	_, err = b.Weight("weights", tensor.BF16, []int{10}, unaligned[1:]) // copied
	require.NoError(t, err)

	assert.Equal(t, map[string]int64{"activations": 24, "kv-cache": 32, "weights": 60}, b.Usage())
	assert.Equal(t, map[string]int64{"weights": 40}, b.AliasedUsage())

	view, err := b.Rows(x, 0, 1)
	require.NoError(t, err)
	b.Free(view) // views are not freed
	assert.Equal(t, int64(24), b.Usage()["activations"])

	b.Free(x)
	b.Free(x) // twice: no effect
	b.Free(fakeTensor{})
	assert.Equal(t, map[string]int64{"kv-cache": 32, "weights": 60}, b.Usage())

	_, err = b.Download(x)
	require.ErrorContains(t, err, "freed")
	_, err = b.Download(view)
	require.ErrorContains(t, err, "freed")
}

func TestAllocErrors(t *testing.T) {
	b := newBackend(t)
	_, err := b.Alloc("activations", tensor.F32, 2, -1)
	require.ErrorContains(t, err, "negative")
	_, err = b.Alloc("activations", tensor.I32, 2)
	require.ErrorContains(t, err, "unsupported dtype I32")
	s, err := b.Alloc("activations", tensor.F32)
	require.NoError(t, err, "a scalar")
	assert.Equal(t, []float32{0}, download(t, b, s))
}

func TestWeight(t *testing.T) {
	b := newBackend(t)
	vals := []float32{1, -2, 3.5, 4, 5, 6}
	data, err := tensor.FromF32(tensor.F32, vals)
	require.NoError(t, err)

	// Aligned F32 bytes are aliased: a change to them shows.
	w, err := b.Weight("weights", tensor.F32, []int{2, 3}, data)
	require.NoError(t, err)
	assert.Equal(t, vals, download(t, b, w))
	data[0], data[1], data[2], data[3] = 0, 0, 0x80, 0x3f // 1.0 -> 1.0; then 2.0:
	data[4], data[5], data[6], data[7] = 0, 0, 0, 0x40
	assert.Equal(t, float32(2), w.(*Tensor).Float32s()[1])

	// Unaligned F32 bytes are copied.
	buf := make([]byte, len(data)+1)
	copy(buf[1:], data)
	w2, err := b.Weight("odd", tensor.F32, []int{6}, buf[1:])
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3.5, 4, 5, 6}, download(t, b, w2))
	assert.NotContains(t, b.AliasedUsage(), "odd")

	// Unaligned BF16 bytes are copied too, and still read right.
	bf, err := tensor.FromF32(tensor.BF16, vals)
	require.NoError(t, err)
	buf = make([]byte, len(bf)+1)
	copy(buf[1:], bf)
	w3, err := b.Weight("odd", tensor.BF16, []int{6}, buf[1:])
	require.NoError(t, err)
	out1 := alloc(t, b, 1, 6)
	require.NoError(t, b.Embedding(out1, w3, []int32{0}))
	assert.Equal(t, vals, download(t, b, out1))

	_, err = b.Weight("weights", tensor.F32, []int{2, 3}, data[:20])
	require.ErrorContains(t, err, "needs 24 bytes, got 20")
	_, err = b.Weight("weights", tensor.I64, []int{3}, data)
	require.ErrorContains(t, err, "unsupported dtype")
	require.ErrorContains(t, b.Upload(w, vals), "read-only")
	require.ErrorContains(t, b.Copy(w, w2), "read-only")
}

func TestRowsAndReshape(t *testing.T) {
	b := newBackend(t)
	x := activation(t, b, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 3, 2, 2)

	r, err := b.Rows(x, 1, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 2, 2}, r.Shape())
	assert.Equal(t, []float32{4, 5, 6, 7, 8, 9, 10, 11}, download(t, b, r))

	// A view shares memory with its tensor.
	require.NoError(t, b.Upload(r, []float32{-4, -5, -6, -7, -8, -9, -10, -11}))
	assert.Equal(t, []float32{0, 1, 2, 3, -4, -5, -6, -7, -8, -9, -10, -11}, download(t, b, x))

	m, err := b.Reshape(r, 4, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{4, 2}, m.Shape())
	rr, err := b.Rows(m, 3, 1)
	require.NoError(t, err)
	require.NoError(t, b.Upload(rr, []float32{100, 101}))
	assert.Equal(t, float32(101), download(t, b, x)[11])

	empty, err := b.Rows(x, 3, 0)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 2, 2}, empty.Shape())

	_, err = b.Rows(x, 2, 2)
	require.ErrorContains(t, err, "outside the 3 rows")
	_, err = b.Rows(x, -1, 1)
	require.Error(t, err)
	s, err := b.Reshape(x, 12, 1)
	require.NoError(t, err)
	sc, err := b.Alloc("activations", tensor.F32)
	require.NoError(t, err)
	_, err = b.Rows(sc, 0, 1)
	require.ErrorContains(t, err, "scalar")

	_, err = b.Reshape(s, 5, 2)
	require.ErrorContains(t, err, "has 12 elements, shape [5 2] has 10")
	_, err = b.Reshape(s, -12, -1)
	require.ErrorContains(t, err, "negative")
	_, err = b.Reshape(fakeTensor{}, 1)
	require.ErrorIs(t, err, ErrForeignTensor)
}

func TestForeignTensors(t *testing.T) {
	b := newBackend(t)
	x := alloc(t, b, 2, 2)
	var f backend.Tensor = fakeTensor{}
	errs := map[string]error{
		"upload":    b.Upload(f, nil),
		"matmul":    b.MatMul(x, f, x, nil),
		"rmsnorm":   b.RMSNorm(x, x, f, 1e-6),
		"layernorm": b.LayerNorm(f, x, x, nil, 1e-6),
		"rope":      b.Rope(x, f, x, 2),
		"attention": b.Attention(x, x, x, f, backend.AttnOpts{Heads: 1, KVHeads: 1, HeadDim: 2, NKV: 2}),
		"silumul":   b.SiLUMul(x, x, f),
		"gelu":      b.GELU(f, x, false),
		"add":       b.Add(x, f, x),
		"copy":      b.Copy(x, f),
		"embedding": b.Embedding(x, f, []int32{0, 0}),
	}
	_, errs["download"] = b.Download(f)
	_, errs["rows"] = b.Rows(f, 0, 1)
	for op, err := range errs {
		require.ErrorIs(t, err, ErrForeignTensor, op)
		require.ErrorContains(t, err, "cpu: tensor from another backend", op)
	}
	require.ErrorContains(t, b.Add(x, nil, x), "nil")
}

func TestClose(t *testing.T) {
	b, err := New(WithThreads(2))
	require.NoError(t, err)
	x := activation(t, b, []float32{1, 2}, 2)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	require.ErrorIs(t, b.Add(x, x, x), ErrClosed)
	require.ErrorIs(t, b.Sync(), ErrClosed)
	_, err = b.Alloc("activations", tensor.F32, 1)
	require.ErrorIs(t, err, ErrClosed)
	assert.Equal(t, []float32{1, 2}, x.(*Tensor).Float32s())
}

func TestPoolPanicIsAnError(t *testing.T) {
	p := newPool(3)
	defer p.close()
	err := p.run(10, func(_, task int) {
		if task == 7 {
			panic("boom")
		}
	})
	require.ErrorContains(t, err, "boom")

	// The pool still works afterwards, and every task runs once.
	seen := make([]int, 100)
	require.NoError(t, p.ranges(100, 3, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			seen[i]++
		}
	}))
	for i, n := range seen {
		require.Equal(t, 1, n, "item %d", i)
	}
}
