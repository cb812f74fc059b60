package layering

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/placement"
	"vlanode/tensor"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// zBlob is a unit's blob of bf16 weights with a trained-like exponent
// distribution (N(0, σ²) per tensor), a norm that stays raw, and the
// padding between them.
func zBlob(t testing.TB, name string, seed uint64) *weights.Blob {
	t.Helper()
	specs := []weights.Spec{
		{Name: "norm.weight", DType: tensor.BF16, Shape: []int{64}},
		{Name: "proj.weight", DType: tensor.BF16, Shape: []int{96, 256}},
		{Name: "out.weight", DType: tensor.BF16, Shape: []int{256, 80}},
	}
	entries, size := weights.Layout(specs)
	data, err := weights.AlignedAlloc(size)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(seed, 3))
	for i, e := range entries {
		std := 0.02 * float64(i+1)
		for o := e.Offset; o < e.Offset+e.Size; o += 2 {
			binary.LittleEndian.PutUint16(data[o:], tensor.F32ToBF16(float32(std*r.NormFloat64())))
		}
	}
	return &weights.Blob{Name: name, Data: data, Entries: entries}
}

// zStack makes units named prefix.i placed places, each with a blob of
// zBlob's layout; those at the indexes in coded are compressed.
func zStack(t testing.TB, prefix string, places []placement.Weights, coded ...int) []*Unit {
	t.Helper()
	units := make([]*Unit, len(places))
	for i, p := range places {
		id := testID(prefix, i)
		units[i] = &Unit{ID: id, Weights: p, Blob: zBlob(t, id.String(), uint64(i+1))}
	}
	for _, i := range coded {
		z, err := bf16z.Encode(units[i].Blob, bf16z.Options{Workers: 2})
		require.NoError(t, err)
		require.True(t, z.Coded(), "unit %d codes nothing", i)
		require.Less(t, z.Size(), z.RawSize)
		units[i].Z = z
	}
	return units
}

// TestCompressedClosedForms checks a stack of L compressed units over R
// passes against the closed forms of the three-stream pipeline: copy-bound
// R·L·C_DMA + C_DEC + C_EXE (the decodes run while the compute engine
// waits), decode- or compute-bound C_DMA + R·L·(C_DEC + C_EXE) (the decode
// kernel shares the GPU with the computes, as residency's simulate3 has
// it); the copies move the compressed bytes into the staging buffers, the
// decodes write the slots.
func TestCompressedClosedForms(t *testing.T) {
	const L = 5
	for _, tc := range []struct {
		name          string
		dma, dec, exe float64
		R             int
		want          float64
	}{
		{"copy-bound", 4, 1, 0.5, 3, 3*L*4 + 1 + 0.5},
		{"decode-bound", 1, 3, 0.5, 2, 1 + 2*L*(3+0.5)},
		{"compute-bound", 1, 0.5, 2, 4, 1 + 4*L*(0.5+2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			places := all(L, placement.Streamed)
			units := zStack(t, "layer", places, 0, 1, 2, 3, 4)
			f := NewFake(func(string, int64) float64 { return tc.dma }, func(string) float64 { return tc.exe })
			f.Dec = func(string, int64) float64 { return tc.dec }
			p := run(t, f, Pipelined, units, Repeat("pass", units, tc.R))
			assert.InDelta(t, tc.want, p.TotalMs, 1e-9)
			copies, decodes := 0, 0
			for _, op := range f.Timeline {
				switch op.Kind {
				case OpCopy:
					copies++
				case OpDecode:
					decodes++
				}
			}
			assert.Equal(t, tc.R*L, copies)
			assert.Equal(t, tc.R*L, decodes)
		})
	}
}

// TestCompressedProtocol checks the orderings of compressed streaming on
// a mixed stack (resident, raw streamed, compressed streamed) with
// irregular times: a decode starts after its own copy into its staging
// buffer and after the compute of the slot's previous user; a copy into a
// staging buffer after the decode that last read it; a compute after its
// decode; and the Fake's own invariants (Verify) hold.
func TestCompressedProtocol(t *testing.T) {
	places := []placement.Weights{placement.Resident, placement.Streamed, placement.Streamed, placement.Streamed, placement.Resident, placement.Streamed}
	units := zStack(t, "u", places, 1, 3, 5)
	dma := map[string]float64{"u.1": 3, "u.2": 5, "u.3": 1, "u.5": 6}
	dec := map[string]float64{"u.1": 2, "u.3": 4, "u.5": 0.5}
	exe := map[string]float64{"u.0": 2, "u.1": 1, "u.2": 3, "u.3": 0.5, "u.4": 1, "u.5": 2}
	f := NewFake(func(b string, _ int64) float64 { return dma[b] }, func(u string) float64 { return exe[u] })
	f.Dec = func(u string, _ int64) float64 { return dec[u] }
	e, err := New(f, Config{Mode: Pipelined, Profile: true}, units)
	require.NoError(t, err)
	require.Len(t, e.Staging(), 2)
	assert.Equal(t, 2*e.StagingBytes, f.StagingBytes)
	var largest int64
	for _, u := range units {
		if u.Z != nil {
			largest = max(largest, u.Z.Size())
		}
	}
	assert.Equal(t, roundUp(largest, weights.Align), e.StagingBytes)
	p, err := e.Run(Repeat("step", units, 4))
	require.NoError(t, err)
	require.NoError(t, f.Verify())

	var copies, decodes, computes []Op
	for _, op := range f.Timeline {
		switch op.Kind {
		case OpCopy:
			copies = append(copies, op)
		case OpDecode:
			decodes = append(decodes, op)
		case OpCompute:
			if op.Slot != NoSlot {
				computes = append(computes, op)
			}
		}
	}
	require.Len(t, computes, 16) // 4 streamed units × 4 passes
	require.Len(t, copies, 16)
	require.Len(t, decodes, 12) // 3 compressed of them
	// Pair each slotted compute with its write: a copy (raw) or a decode.
	k := 0 // decodes seen
	var stagingUse []int
	for j, c := range computes {
		w := copies[j]
		if c.Unit == "u.1" || c.Unit == "u.3" || c.Unit == "u.5" {
			d := decodes[k]
			require.Equal(t, c.Unit, d.Unit)
			assert.Equal(t, c.Slot, d.Slot, "decode %d writes the slot its compute reads", k)
			assert.GreaterOrEqual(t, d.Start, w.End, "decode %d after its copy", k)
			assert.Equal(t, d.Src, w.Slot, "decode %d reads the staging its copy wrote", k)
			assert.Equal(t, w.Bytes, units[unitIndex(c.Unit)].Z.Size(), "the copy moves the compressed bytes")
			assert.GreaterOrEqual(t, c.Start, d.End, "compute %d after its decode", j)
			if j >= 2 {
				assert.GreaterOrEqual(t, d.Start, computes[j-2].End, "decode %d after the slot's previous user", k)
			}
			if k >= 2 {
				assert.GreaterOrEqual(t, w.Start, decodes[k-2].End, "copy into staging after its last decode")
			}
			stagingUse = append(stagingUse, int(d.Src))
			k++
		} else {
			assert.Equal(t, c.Slot, w.Slot)
			assert.GreaterOrEqual(t, c.Start, w.End)
			if j >= 2 {
				assert.GreaterOrEqual(t, w.Start, computes[j-2].End, "raw copy %d after the slot's previous user", j)
			}
		}
	}
	for i, s := range stagingUse {
		assert.Equal(t, stagingUse[i%2], s, "staging buffers in turn")
	}
	assert.NotEqual(t, stagingUse[0], stagingUse[1])
	decoded := 0
	for _, turn := range p.Turns {
		if turn.Compressed {
			decoded++
			assert.InDelta(t, dec[turn.Unit.String()], turn.DecodeMs, 1e-9)
			assert.GreaterOrEqual(t, turn.DecodeAtMs, turn.CopyAtMs+turn.CopyMs-1e-9)
		}
	}
	assert.Equal(t, 12, decoded)
}

// unitIndex is i of "u.i".
func unitIndex(name string) int {
	var i int
	_, _ = fmt.Sscanf(name, "u.%d", &i)
	return i
}

// TestCompressedHomes checks compressed units that enter their homes in a
// stage: decoded once into the arena, computed in place after, and
// through the same staging ring as the slotted ones.
func TestCompressedHomes(t *testing.T) {
	units := zStack(t, "h", all(4, placement.Streamed), 0, 1, 2, 3)
	home := []placement.Placement{placement.OnGPU, placement.StreamGPU, placement.OnGPU, placement.StreamGPU}
	passes := Repeat("decode", units, 3)
	for i := range passes {
		passes[i].Place = home
	}
	f := NewFake(func(string, int64) float64 { return 2 }, func(string) float64 { return 1 })
	f.Dec = func(string, int64) float64 { return 0.5 }
	e, err := New(f, Config{Mode: Pipelined, Profile: true}, units)
	require.NoError(t, err)
	_, err = e.Run(passes)
	require.NoError(t, err)
	require.NoError(t, f.Verify())
	decodes := map[string]int{}
	for _, op := range f.Timeline {
		if op.Kind == OpDecode {
			decodes[op.Unit]++
		}
	}
	assert.Equal(t, map[string]int{"h.0": 1, "h.1": 3, "h.2": 1, "h.3": 3}, decodes)
}

// TestCompressedHostBitIdentical runs a mixed stack on the Host device
// (the CPU decodes with the Go decoder where the GPU runs its kernel) and
// checks at every compute that the bytes its slot or home holds at every
// tensor are the raw blob's, as with raw streaming.
func TestCompressedHostBitIdentical(t *testing.T) {
	places := []placement.Weights{placement.Streamed, placement.Resident, placement.Streamed, placement.Streamed, placement.Streamed}
	units := zStack(t, "u", places, 0, 2, 4)
	raw := map[*Unit][]byte{}
	for _, u := range units {
		raw[u] = append([]byte(nil), u.Blob.Data...)
		if u.Z != nil {
			u.Blob.Data = nil // released: only the layout stays
		}
	}
	for _, mode := range []Mode{Pipelined, Sequential} {
		t.Run(mode.String(), func(t *testing.T) {
			h := NewHost()
			e, err := New(h, Config{Mode: mode}, units)
			require.NoError(t, err)
			checked := 0
			passes := Repeat("step", units, 3)
			place := []placement.Placement{placement.StreamGPU, placement.OnGPU, placement.OnGPU, placement.StreamGPU, placement.StreamGPU}
			passes[1].Place, passes[2].Place = place, place // unit 2 enters a home in the second stage
			for i := range passes {
				if i > 0 {
					passes[i].Stage = "later"
				}
			}
			for _, u := range units {
				u.Run = func(sh Shard) error {
					if sh.Slot == NoSlot {
						return nil
					}
					data, err := h.SlotData(sh.Slot)
					if err != nil {
						return err
					}
					for _, en := range u.Blob.Entries {
						got := data[sh.Offset+en.Offset : sh.Offset+en.Offset+en.Size]
						if !bytes.Equal(got, raw[u][en.Offset:en.Offset+en.Size]) {
							return fmt.Errorf("%s: tensor %s differs from the raw blob", u.ID, en.Name)
						}
					}
					checked++
					return nil
				}
			}
			_, err = e.Run(passes)
			require.NoError(t, err)
			assert.Equal(t, 4+4+4, checked) // four units from slots or homes in each of three passes
		})
	}
}

// TestCompressedCorrupt checks that corrupted or truncated compressed
// bytes fail the run with an error that names the unit and wraps
// bf16z.ErrCorrupt, on the Host (the Go decoder's checks) and on the Fake
// (the GPU kernel's status word, read when the run finishes).
func TestCompressedCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(z *bf16z.Unit)
	}{
		{"payload byte", func(z *bf16z.Unit) { z.Data[len(z.Data)-100] ^= 0x10 }},
		{"job table", func(z *bf16z.Unit) { z.Data[z.JobsOffset+3] ^= 1 }},
		{"truncated", func(z *bf16z.Unit) { z.Data = z.Data[:len(z.Data)-16] }},
	} {
		t.Run("host/"+tc.name, func(t *testing.T) {
			units := zStack(t, "c", all(3, placement.Streamed), 0, 1, 2)
			tc.spoil(units[1].Z)
			e, err := New(NewHost(), Config{Mode: Pipelined}, units)
			require.NoError(t, err)
			_, err = e.Run(Repeat("step", units, 2))
			require.Error(t, err)
			assert.True(t, errors.Is(err, bf16z.ErrCorrupt), "%v", err)
			assert.Contains(t, err.Error(), "c.1")
		})
	}
	t.Run("status word", func(t *testing.T) {
		units := zStack(t, "c", all(3, placement.Streamed), 0, 1, 2)
		f := NewFake(nil, nil)
		f.Corrupt = map[string]bool{"c.2": true}
		e, err := New(f, Config{Mode: Pipelined}, units)
		require.NoError(t, err)
		_, err = e.Run(Repeat("step", units, 2))
		require.Error(t, err)
		assert.True(t, errors.Is(err, bf16z.ErrCorrupt), "%v", err)
		assert.Contains(t, err.Error(), "unit c.2")
		assert.Contains(t, err.Error(), "2 tiles") // both of its decodes
		// The status was read and cleared: the next run without the fault
		// succeeds.
		f.Corrupt = nil
		_, err = e.Run(Repeat("step", units, 1))
		require.NoError(t, err)
	})
}

// TestCompressedRefused checks what the executor refuses of compressed
// units: a device that cannot decode, preload mode, a CPU share, and
// staging smaller than a unit.
func TestCompressedRefused(t *testing.T) {
	units := zStack(t, "r", all(2, placement.Streamed), 0)
	type plain struct{ Device }
	_, err := New(plain{NewHost()}, Config{Mode: Pipelined}, units)
	assert.ErrorContains(t, err, "cannot decode")
	_, err = New(NewHost(), Config{Mode: Preload}, zStack(t, "r", all(2, placement.Streamed), 0))
	assert.ErrorContains(t, err, "preload mode")
	_, err = New(NewHost(), Config{Mode: Pipelined, StagingBytes: weights.Align}, zStack(t, "r", all(2, placement.Streamed), 0))
	assert.ErrorContains(t, err, "staging")
	us := zStack(t, "r", all(2, placement.Streamed), 0)
	us[0].Share = func(int) ([]weights.Rect, int64, error) { return nil, 0, nil }
	us[0].Blob.Data = nil // released at load: the CPU has nothing to read
	e, err := New(NewHost(), Config{Mode: Pipelined}, us)
	require.NoError(t, err)
	passes := Repeat("step", us, 1)
	passes[0].Place = []placement.Placement{{Weights: placement.Streamed, Engine: placement.GPU, CPUSplit: 8}, placement.StreamGPU}
	_, err = e.Run(passes)
	assert.ErrorContains(t, err, "no raw host bytes")
}

// splitUnit is a unit whose first tensor splits by rows between the CPU
// and the GPU (the others shared), its Share laid out as a model's, and
// the GPU's share at cut c as a blob, for ZShares.
func splitUnit(t *testing.T, name string, c int) (*Unit, *weights.Blob) {
	t.Helper()
	id := placement.ID{Module: placement.Module(name)}
	b := zBlob(t, id.String(), 9) // blobs are named as their units
	split := func(c int) ([]weights.Entry, []weights.Rect, int64, error) {
		specs := make([]weights.Spec, len(b.Entries))
		for i, e := range b.Entries {
			specs[i] = weights.Spec{Name: e.Name, DType: e.DType, Shape: append([]int(nil), e.Shape...)}
		}
		specs[1].Shape[0] -= c // proj.weight: rows [c, n) on the GPU
		entries, size := weights.Layout(specs)
		rects := make([]weights.Rect, len(entries))
		for i, e := range b.Entries {
			if i == 1 {
				r, err := e.RowRect(c, e.Shape[0], entries[i].Offset)
				if err != nil {
					return nil, nil, 0, err
				}
				rects[i] = r
				continue
			}
			rects[i] = weights.Rect{SrcOffset: e.Offset, SrcPitch: e.Size, DstOffset: entries[i].Offset, DstPitch: e.Size, Width: e.Size, Height: 1}
		}
		return entries, rects, size, nil
	}
	u := &Unit{ID: id, Weights: placement.Streamed, Blob: b,
		Share: func(c int) ([]weights.Rect, int64, error) {
			_, rects, n, err := split(c)
			return rects, n, err
		}}
	entries, rects, n, err := split(c)
	require.NoError(t, err)
	data, err := weights.AlignedAlloc(n)
	require.NoError(t, err)
	for _, r := range rects {
		for row := range r.Height {
			copy(data[r.DstOffset+row*r.DstPitch:r.DstOffset+row*r.DstPitch+r.Width], b.Data[r.SrcOffset+row*r.SrcPitch:])
		}
	}
	return u, &weights.Blob{Name: u.ID.String(), Data: data, Entries: entries}
}

// TestCompressedShare runs a split turn whose GPU share is compressed
// (Unit.ZShares, the share's layout coded as a blob of its own) on the
// Host and on the Fake: the slot holds exactly what the raw share's
// rectangles put there; the turn copies the compressed share and decodes
// it, never the rectangles; a whole turn of the same unit copies its
// whole compressed form; the CPU still reads the raw blob.
func TestCompressedShare(t *testing.T) {
	const c = 32
	u, share := splitUnit(t, "s", c)
	z, err := bf16z.Encode(u.Blob, bf16z.Options{Workers: 2})
	require.NoError(t, err)
	zs, err := bf16z.Encode(share, bf16z.Options{Workers: 2})
	require.NoError(t, err)
	require.True(t, zs.Coded())
	u.Z, u.ZShares = z, map[int]*bf16z.Unit{c: zs}
	split := placement.Placement{Weights: placement.Streamed, Engine: placement.GPU, CPUSplit: c}
	passes := []Pass{{Name: "prefill", Stage: "prefill", Units: []*Unit{u}}, {Name: "decode", Stage: "decode", Units: []*Unit{u}, Place: []placement.Placement{split}}}

	h := NewHost()
	var got [][]byte
	u.Run = func(sh Shard) error {
		if sh.CPU > 0 {
			if !u.hasRaw() {
				return fmt.Errorf("the CPU's raw blob is gone")
			}
			if err := sh.Ready(); err != nil {
				return err
			}
		}
		data, err := h.SlotData(sh.Slot)
		if err != nil {
			return err
		}
		got = append(got, append([]byte(nil), data...))
		return nil
	}
	e, err := New(h, Config{Mode: Pipelined, Profile: true}, []*Unit{u})
	require.NoError(t, err)
	p, err := e.Run(passes)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, en := range u.Blob.Entries {
		assert.Equal(t, u.Blob.Data[en.Offset:en.Offset+en.Size], got[0][en.Offset:en.Offset+en.Size], "whole: %s", en.Name)
	}
	for _, en := range share.Entries {
		assert.Equal(t, share.Data[en.Offset:en.Offset+en.Size], got[1][en.Offset:en.Offset+en.Size], "share: %s", en.Name)
	}
	for _, tr := range p.Turns {
		assert.True(t, tr.Compressed, tr.Pass)
	}

	f := NewFake(func(string, int64) float64 { return 1 }, func(string) float64 { return 1 })
	u.Run = func(sh Shard) error {
		if sh.CPU > 0 {
			return sh.Ready()
		}
		return nil
	}
	e, err = New(f, Config{Mode: Pipelined}, []*Unit{u})
	require.NoError(t, err)
	_, err = e.Run(passes)
	require.NoError(t, err)
	require.NoError(t, f.Verify())
	var copies, decodes []int64
	for _, op := range f.Timeline {
		switch op.Kind {
		case OpCopy:
			copies = append(copies, op.Bytes)
		case OpDecode:
			decodes = append(decodes, op.Bytes)
		}
	}
	assert.Equal(t, []int64{z.Size(), zs.Size()}, copies, "the whole compressed form, then the share's")
	assert.Equal(t, []int64{z.RawSize, zs.RawSize}, decodes)
}
