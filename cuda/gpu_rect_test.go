package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/layering"
	"vlanode/tensor"
	"vlanode/weights"
)

// pinnedBlob makes a blob of size random bytes in HostAlloc memory,
// pinned on d; released when tb ends (after d's Close, which the caller
// registers after this).
func pinnedBlob(tb testing.TB, d *DFBDevice, name string, size int64, seed uint64) *weights.Blob {
	tb.Helper()
	data, err := HostAlloc(size)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, HostFree(data)) })
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	blob := &weights.Blob{Name: name, Data: data}
	require.NoError(tb, d.PinHost(blob))
	return blob
}

// slotBytes copies a slot's bytes back to the host.
func slotBytes(t *testing.T, b *Backend, d *DFBDevice, s layering.Slot, n int) []byte {
	t.Helper()
	require.NoError(t, d.Synchronize())
	p, err := d.SlotPtr(s)
	require.NoError(t, err)
	out := make([]byte, n)
	require.NoError(t, b.run(func(g *gpu) error { return g.drv.CopyDtoH(out, p, g.stream) }))
	return out
}

// rectOnHost copies r from src into dst byte by byte: the reference.
func rectOnHost(dst, src []byte, r weights.Rect) {
	for row := int64(0); row < r.Height; row++ {
		for i := int64(0); i < r.Width; i++ {
			dst[r.DstOffset+row*r.DstPitch+i] = src[r.SrcOffset+row*r.SrcPitch+i]
		}
	}
}

// TestGPUCopyRect copies rectangles of a pinned blob into a slot on a
// copy stream (odd widths, pitches and offsets through cuMemcpy2DAsync; a
// contiguous one; the GPU's columns and rows of bf16 matrices) and
// compares the slot's bytes with the same copies done byte by byte on
// the host; then the refusals.
func TestGPUCopyRect(t *testing.T) {
	b := gpuBackend(t)
	d := b.NewDFBDevice()
	const blobBytes, slotSize = 1 << 16, 1 << 15
	blob := pinnedBlob(t, d, "unit", blobBytes, 1)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	slot, err := d.AllocSlot(slotSize)
	require.NoError(t, err)
	cs, err := d.NewStream("copy")
	require.NoError(t, err)

	down := weights.Entry{Name: "down", DType: tensor.BF16, Shape: []int{64, 96}, Offset: 4096, Size: 64 * 96 * 2}
	cols, err := down.ColumnRect(40, 96, 256)
	require.NoError(t, err)
	gate := weights.Entry{Name: "gate", DType: tensor.BF16, Shape: []int{96, 64}, Offset: 20480, Size: 96 * 64 * 2}
	rows, err := gate.RowRect(40, 96, 8192)
	require.NoError(t, err)
	for name, r := range map[string]weights.Rect{
		"odd":        {SrcOffset: 3, SrcPitch: 10, DstOffset: 1, DstPitch: 7, Width: 6, Height: 5},
		"one row":    {SrcOffset: 100, SrcPitch: 999, DstOffset: 50, DstPitch: 999, Width: 999, Height: 1},
		"contiguous": {SrcOffset: 512, SrcPitch: 128, DstOffset: 256, DstPitch: 128, Width: 128, Height: 40},
		"wide":       {SrcOffset: 0, SrcPitch: 4096, DstOffset: 0, DstPitch: 3000, Width: 3000, Height: 10},
		"columns":    cols,
		"rows":       rows,
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, b.run(func(g *gpu) error {
				p, _ := d.SlotPtr(slot)
				return g.drv.MemsetD8Async(p, 0xAB, slotSize, g.stream)
			}))
			require.NoError(t, d.Synchronize())
			require.NoError(t, d.CopyRectAsync(slot, blob, r, cs))
			want := make([]byte, slotSize)
			for i := range want {
				want[i] = 0xAB
			}
			rectOnHost(want, blob.Data, r)
			got := slotBytes(t, b, d, slot, slotSize)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("slot byte %d is %#x after %+v, want %#x", i, got[i], r, want[i])
				}
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		ok := weights.Rect{SrcPitch: 8, DstPitch: 8, Width: 8, Height: 2}
		assert.ErrorContains(t, d.CopyRectAsync(slot, &weights.Blob{Name: "loose", Data: make([]byte, 64)}, ok, cs), "not pinned")
		assert.ErrorContains(t, d.CopyRectAsync(slot+1, blob, ok, cs), "no slot")
		assert.ErrorContains(t, d.CopyRectAsync(slot, blob, ok, cs+1), "no stream")
		for name, r := range map[string]weights.Rect{
			"past the slot": {SrcPitch: 8, DstOffset: slotSize - 8, DstPitch: 8, Width: 8, Height: 2},
			"past the blob": {SrcOffset: blobBytes - 4, SrcPitch: 8, DstPitch: 8, Width: 8, Height: 1},
			"narrow pitch":  {SrcPitch: 4, DstPitch: 8, Width: 8, Height: 2},
			"empty":         {SrcPitch: 8, DstPitch: 8, Width: 8},
		} {
			assert.ErrorContains(t, d.CopyRectAsync(slot, blob, r, cs), "cuda: dfb: blob unit into slot 0: rectangle", name)
		}
	})
}

// BenchmarkGPUCopyRect measures the host-to-device rate of the GPU's
// share of a down projection [4096, 12288] bf16 split at column a: 4096
// rows of (12288-a)·2 bytes at a pitch of 24,576 from a pinned blob into
// a slot, packed (cuMemcpy2DAsync; at a = 0 the rows are contiguous and
// it is one flat copy), against a flat copy of the same bytes
// (cuMemcpyHtoDAsync), on a copy stream timed by its events. GB/s are
// 10^9 bytes per second, medians of b.N copies.
func BenchmarkGPUCopyRect(b *testing.B) {
	be := gpuBackend(b)
	d := be.NewDFBDevice()
	const H, N = 4096, 12288
	down := weights.Entry{Name: "down_proj.weight", DType: tensor.BF16, Shape: []int{H, N}, Size: H * N * 2}
	blob := pinnedBlob(b, d, "mlp", down.Size, 2)
	b.Cleanup(func() {
		if err := d.Close(); err != nil {
			b.Error(err)
		}
	})
	slot, err := d.AllocSlot(down.Size)
	require.NoError(b, err)
	cs, err := d.NewStream("copy")
	require.NoError(b, err)
	e0, err := d.NewEvent("start")
	require.NoError(b, err)
	e1, err := d.NewEvent("end")
	require.NoError(b, err)
	for _, a := range []int{0, 4096, 6144, 8192} {
		rect, err := down.ColumnRect(a, N, 0)
		require.NoError(b, err)
		flat := weights.Rect{SrcPitch: rect.Bytes(), DstPitch: rect.Bytes(), Width: rect.Bytes(), Height: 1}
		for _, c := range []struct {
			name string
			r    weights.Rect
		}{{"rect", rect}, {"flat", flat}} {
			b.Run(fmt.Sprintf("a=%d/%s", a, c.name), func(b *testing.B) {
				once := func() (time.Duration, error) {
					if err := d.Record(e0, cs); err != nil {
						return 0, err
					}
					if err := d.CopyRectAsync(slot, blob, c.r, cs); err != nil {
						return 0, err
					}
					if err := d.Record(e1, cs); err != nil {
						return 0, err
					}
					if err := d.Synchronize(); err != nil {
						return 0, err
					}
					ms, err := d.Elapsed(e0, e1)
					return time.Duration(ms * float64(time.Millisecond)), err
				}
				for range benchWarmup {
					if _, err := once(); err != nil {
						b.Fatal(err)
					}
				}
				samples := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					s, err := once()
					if err != nil {
						b.Fatal(err)
					}
					samples = append(samples, s)
				}
				b.StopTimer()
				med := quantile(samples, 0.5)
				gbs := float64(c.r.Bytes()) / med.Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(float64(med.Nanoseconds())/1e3, "gpu-us/op")
				b.Logf("%s: %d rows of %d bytes (%.1f MiB): %.1f GB/s, %.0f µs (median of %d)",
					b.Name(), c.r.Height, c.r.Width, float64(c.r.Bytes())/(1<<20), gbs, float64(med.Nanoseconds())/1e3, b.N)
			})
		}
	}
}
