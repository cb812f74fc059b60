package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/sample"
	"vlanode/tensor"
)

// i32 makes an I32 tensor holding vals.
func i32(t *testing.T, b *Backend, vals ...int32) backend.Tensor {
	t.Helper()
	x, err := b.Alloc("activations", tensor.I32, len(vals))
	require.NoError(t, err)
	t.Cleanup(func() { b.Free(x) })
	require.NoError(t, b.UploadI32(x, vals))
	return x
}

// TestGPUTokenFeed checks backend.TokenFeed: EmbeddingAt from a host
// table (bf16 and f32) and from a device weight gives Embedding's bits,
// and zeros for ids outside the table; ArgmaxAt leaves Argmax's index on
// the device; FetchI32 copies are ordered with the ops around them (a
// copy queued before the value is overwritten reads the old one), a
// released slot is reused, a copy is waited for once, and at most
// fetchSlots are pending; and a captured graph that embeds the token it
// picked, replayed with a fetch after each launch, gives the host's chain
// of tokens.
func TestGPUTokenFeed(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(3, 5))
	const V, H = 1000, 300
	vals := randVals(r, V*H, 1)
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			data, err := tensor.FromF32(dt, vals)
			require.NoError(t, err)
			host, err := b.HostTable(dt, V, H, data)
			require.NoError(t, err)
			defer b.Free(host)
			dev, err := b.Weight("weights", dt, []int{V, H}, data)
			require.NoError(t, err)
			defer b.Free(dev)
			ids := []int32{7, 999, 0, 7, 512}
			want := upload(t, b, make([]float32, len(ids)*H), len(ids), H)
			require.NoError(t, b.Embedding(want, dev, ids))
			wantV := download(t, b, want)
			for _, table := range []backend.Tensor{host, dev} {
				got := upload(t, b, make([]float32, len(ids)*H), len(ids), H)
				require.NoError(t, b.EmbeddingAt(got, table, i32(t, b, ids...)))
				require.Equal(t, wantV, download(t, b, got))
			}
			out := upload(t, b, filled(3*H, 9), 3, H)
			require.NoError(t, b.EmbeddingAt(out, host, i32(t, b, -1, V, 3)))
			o := download(t, b, out)
			require.Equal(t, make([]float32, 2*H), o[:2*H], "ids outside the table give zeros")
			require.Equal(t, roundBack(t, dt, vals[3*H:4*H]), o[2*H:])
		})
	}

	t.Run("argmax at", func(t *testing.T) {
		tok := i32(t, b, 0)
		for _, c := range []struct {
			vals   []float32
			lo, hi int
		}{
			{randVals(r, 155704, 10), 151669, 155703},
			{randVals(r, 5000, 1), -1, -1},
			{filled(2048, float32(math.NaN())), -1, -1},
		} {
			x := upload(t, b, c.vals, 1, len(c.vals))
			want, err := b.Argmax(x, c.lo, c.hi)
			require.NoError(t, err)
			require.NoError(t, b.ArgmaxAt(tok, x, c.lo, c.hi))
			f, err := b.FetchI32(tok)
			require.NoError(t, err)
			got, err := f.Wait()
			require.NoError(t, err)
			require.Equal(t, []int32{int32(want)}, got)
			_, err = f.Wait()
			require.ErrorContains(t, err, "waited for after")
		}
		require.ErrorContains(t, b.ArgmaxAt(upload(t, b, []float32{1}, 1), upload(t, b, []float32{1, 2}, 1, 2), -1, -1), "must be one writable I32")
	})

	t.Run("fetch order", func(t *testing.T) {
		tok := i32(t, b, 0)
		a := filled(4096, 0)
		a[17] = 1
		c := filled(4096, 0)
		c[4000] = 1
		require.NoError(t, b.ArgmaxAt(tok, upload(t, b, a, 1, 4096), -1, -1))
		f1, err := b.FetchI32(tok)
		require.NoError(t, err)
		require.NoError(t, b.ArgmaxAt(tok, upload(t, b, c, 1, 4096), -1, -1))
		f2, err := b.FetchI32(tok)
		require.NoError(t, err)
		v2, err := f2.Wait()
		require.NoError(t, err)
		v1, err := f1.Wait()
		require.NoError(t, err)
		require.Equal(t, []int32{17}, v1)
		require.Equal(t, []int32{4000}, v2)

		var pending []backend.Fetch
		for range fetchSlots {
			f, err := b.FetchI32(tok)
			require.NoError(t, err)
			pending = append(pending, f)
		}
		_, err = b.FetchI32(tok)
		require.ErrorContains(t, err, "copies pending")
		pending[5].Release()
		f, err := b.FetchI32(tok) // takes the released slot
		require.NoError(t, err)
		_, err = pending[5].Wait()
		require.ErrorContains(t, err, "waited for after", "a released copy's slot went to another")
		v, err := f.Wait()
		require.NoError(t, err)
		require.Equal(t, []int32{4000}, v)
		for _, p := range pending {
			p.Release()
		}
	})

	t.Run("graph", func(t *testing.T) {
		// tok -> its row of the table -> that row's argmax (< H) -> tok.
		data, err := tensor.FromF32(tensor.BF16, vals)
		require.NoError(t, err)
		table, err := b.HostTable(tensor.BF16, V, H, data)
		require.NoError(t, err)
		defer b.Free(table)
		tok := i32(t, b, 123)
		x := upload(t, b, make([]float32, H), 1, H)
		step := func() error {
			if err := b.EmbeddingAt(x, table, tok); err != nil {
				return err
			}
			return b.ArgmaxAt(tok, x, 10, 20)
		}
		require.NoError(t, step()) // op by op first: sizes the argmax's buffer
		f, err := b.FetchI32(tok)
		require.NoError(t, err)
		g, err := b.CaptureGraph(step)
		require.NoError(t, err)
		defer g.Close()
		var fs []backend.Fetch
		for range 6 {
			require.NoError(t, g.Launch())
			f, err := b.FetchI32(tok)
			require.NoError(t, err)
			fs = append(fs, f)
		}
		rows := roundBack(t, tensor.BF16, vals)
		want, id := []int32{}, 123
		for range 7 {
			row := append([]float32(nil), rows[id*H:(id+1)*H]...)
			for i := 10; i <= 20; i++ {
				row[i] = float32(math.Inf(-1))
			}
			id = sample.Greedy(row)
			want = append(want, int32(id))
		}
		var got []int32
		for _, f := range append([]backend.Fetch{f}, fs...) {
			v, err := f.Wait()
			require.NoError(t, err)
			got = append(got, v...)
		}
		require.Equal(t, want, got)
	})
}

// roundBack rounds vals to dt and back to float32.
func roundBack(t *testing.T, dt tensor.DType, vals []float32) []float32 {
	t.Helper()
	data, err := tensor.FromF32(dt, vals)
	require.NoError(t, err)
	out := make([]float32, len(vals))
	require.NoError(t, tensor.ToF32(out, dt, data))
	return out
}
