package cuda

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/layering"
	"vlanode/placement"
	"vlanode/tensor"
	"vlanode/weights"
)

// TestWeightAtChecks checks WeightAt's views and refusals on a slot that
// is only a block description (no GPU needed: nothing is touched).
func TestWeightAtChecks(t *testing.T) {
	d := &DFBDevice{slots: []*block{{ptr: 1 << 20, bytes: 1024, live: true}}}
	w, err := d.WeightAt(0, weights.Entry{Name: "w", DType: tensor.BF16, Shape: []int{2, 128}, Offset: 512, Size: 512})
	require.NoError(t, err)
	v := w.(*Tensor)
	assert.Equal(t, uint64(1<<20+512), uint64(v.Ptr()))
	assert.True(t, v.readOnly)
	assert.False(t, v.root, "a view: Free leaves the slot alone")

	for name, e := range map[string]weights.Entry{
		"past the slot": {Name: "w", DType: tensor.F32, Shape: []int{256}, Offset: 256, Size: 1024},
		"misaligned":    {Name: "w", DType: tensor.F32, Shape: []int{4}, Offset: 4, Size: 16},
		"wrong size":    {Name: "w", DType: tensor.F32, Shape: []int{4}, Offset: 0, Size: 8},
		"not a float":   {Name: "w", DType: tensor.I32, Shape: []int{4}, Offset: 0, Size: 16},
	} {
		_, err := d.WeightAt(0, e)
		assert.Error(t, err, name)
	}
	_, err = d.WeightAt(1, weights.Entry{Name: "w", DType: tensor.F32, Shape: []int{4}, Size: 16})
	assert.ErrorContains(t, err, "no slot 1")
}

// TestDFBDeviceGPU runs the pipelined executor on the GPU: three streamed
// units, each a blob of one F32 tensor filled with its number, over four
// passes; each unit's compute adds the tensor it reads from its slot
// (WeightAt) into an accumulator, which must end as 4·(1+2+3).
func TestDFBDeviceGPU(t *testing.T) {
	b := gpuBackend(t)
	dev := b.NewDFBDevice()
	const n, passes = 1024, 4
	acc, err := b.Alloc("activations", tensor.F32, n)
	require.NoError(t, err)
	defer b.Free(acc)

	var units []*layering.Unit
	var hosts [][]byte
	defer func() {
		require.NoError(t, dev.Close())
		for _, h := range hosts {
			require.NoError(t, HostFree(h))
		}
	}()
	for i := range 3 {
		data, err := HostAlloc(n * 4)
		require.NoError(t, err)
		hosts = append(hosts, data)
		for k := range n {
			binary.LittleEndian.PutUint32(data[4*k:], math.Float32bits(float32(i+1)))
		}
		entry := weights.Entry{Name: "w", DType: tensor.F32, Shape: []int{n}, Size: n * 4}
		blob := &weights.Blob{Name: string(rune('a' + i)), Data: data, Entries: []weights.Entry{entry}}
		units = append(units, &layering.Unit{
			ID: placement.ID{Module: placement.VLM, Index: i}, Blob: blob, Weights: placement.Streamed,
			Run: func(sh layering.Shard) error {
				w, err := dev.WeightAt(sh.Slot, entry)
				if err != nil {
					return err
				}
				return b.Add(acc, acc, w)
			},
		})
	}
	ex, err := layering.New(dev, layering.Config{Mode: layering.Pipelined, Profile: true}, units)
	require.NoError(t, err)
	prof, err := ex.Run(layering.Repeat("pass", units, passes))
	require.NoError(t, err)
	got, err := b.Download(acc)
	require.NoError(t, err)
	for k, v := range got {
		require.Equal(t, float32(passes*(1+2+3)), v, "element %d", k)
	}
	require.Len(t, prof.Turns, 3*passes)
	for _, turn := range prof.Turns {
		assert.Greater(t, turn.CopyMs, 0.0, turn.Unit)
	}
	var slots int64
	for _, p := range b.Usage().Purposes {
		if p.Purpose == layering.SlotPurpose {
			slots = p.Bytes
		}
	}
	assert.Equal(t, 2*accountedSize(ex.SlotBytes), slots)
	t.Logf("pipelined, %d passes of 3 units: %.3f ms; per unit %+v", passes, prof.TotalMs, prof.PerUnit())
}
