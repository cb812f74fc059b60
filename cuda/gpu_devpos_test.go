package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"vlanode/backend"
	"vlanode/tensor"
)

// TestGPUDevicePos checks the ops that read a decode step's position from
// device memory against the same ops with the position as a parameter,
// bit for bit, op by op and replayed in one graph for several positions,
// with float and bf16 caches; and that a position past the cache writes
// nothing.
func TestGPUDevicePos(t *testing.T) {
	b := gpuBackend(t)
	const heads, kvh, hd, capRows = 8, 2, 64, 200
	r := rand.New(rand.NewPCG(4, 4))
	pos, err := b.Alloc("activations", tensor.I32, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(pos)
	positions := []int{0, 31, 32, 33, 100, capRows - 1}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		mk := func() backend.Tensor {
			c, err := b.Alloc("kv-cache", dt, capRows, kvh*hd)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Free(c) })
			if err := b.Copy(c, upload(t, b, randVals(r, capRows*kvh*hd, 1), capRows, kvh*hd)); err != nil {
				t.Fatal(err)
			}
			return c
		}
		kA, vA := mk(), mk()
		kB, vB := mk(), mk()
		if err := b.Copy(kB, kA); err != nil {
			t.Fatal(err)
		}
		if err := b.Copy(vB, vA); err != nil {
			t.Fatal(err)
		}
		q, k1, v1 := alloc(t, b, 1, heads*hd), alloc(t, b, 1, kvh*hd), alloc(t, b, 1, kvh*hd)
		outA, outB := alloc(t, b, 1, heads*hd), alloc(t, b, 1, heads*hd)
		opts := backend.AttnOpts{Heads: heads, KVHeads: kvh, HeadDim: hd, Scale: 0.125, Causal: true}
		stepAt := func() error {
			if err := b.CopyRowsAt(kA, k1, pos); err != nil {
				return err
			}
			if err := b.CopyRowsAt(vA, v1, pos); err != nil {
				return err
			}
			o := opts
			o.NKV = capRows
			return b.AttentionAt(outA, q, kA, vA, o, pos)
		}
		stepStatic := func(p int) {
			for _, c := range [][2]backend.Tensor{{kB, k1}, {vB, v1}} {
				row, err := b.Rows(c[0], p, 1)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Copy(row, c[1]); err != nil {
					t.Fatal(err)
				}
			}
			o := opts
			o.NKV, o.QPos0 = p+1, p
			if err := b.Attention(outB, q, kB, vB, o); err != nil {
				t.Fatal(err)
			}
		}
		var graph *Graph
		for round := range 2 { // op by op, then replayed
			for _, p := range positions {
				for _, x := range []backend.Tensor{q, k1, v1} {
					n := int(backend.Elements(x))
					if err := b.Upload(x, randVals(r, n, 1)); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.UploadI32(pos, []int32{int32(p)}); err != nil {
					t.Fatal(err)
				}
				if round == 0 {
					if err := stepAt(); err != nil {
						t.Fatal(err)
					}
				} else {
					if graph == nil {
						if graph, err = b.Capture(stepAt); err != nil {
							t.Fatal(err)
						}
						defer graph.Close()
					}
					if err := graph.Launch(); err != nil {
						t.Fatal(err)
					}
				}
				stepStatic(p)
				a, want := download(t, b, outA), download(t, b, outB)
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v cache, round %d, position %d: element %d is %v, with the position as a parameter %v", dt, round, p, i, a[i], want[i])
					}
				}
			}
		}
		if dt == tensor.F32 {
			ka, kb := download(t, b, kA), download(t, b, kB)
			for i := range ka {
				if ka[i] != kb[i] {
					t.Fatalf("key caches differ at %d: %v and %v", i, ka[i], kb[i])
				}
			}
			// Past the end: nothing is written.
			if err := b.UploadI32(pos, []int32{capRows}); err != nil {
				t.Fatal(err)
			}
			if err := b.CopyRowsAt(kA, k1, pos); err != nil {
				t.Fatal(err)
			}
			after := download(t, b, kA)
			for i := range after {
				if after[i] != ka[i] {
					t.Fatalf("a position past the cache wrote element %d", i)
				}
			}
		}
	}
	// What the ops refuse.
	f := alloc(t, b, 1)
	q := alloc(t, b, 8, heads*hd)
	kc := alloc(t, b, capRows, kvh*hd)
	if err := b.CopyRowsAt(kc, alloc(t, b, 1, kvh*hd), f); err == nil {
		t.Error("an F32 position accepted")
	}
	if err := b.AttentionAt(alloc(t, b, 8, heads*hd), q, kc, kc, backend.AttnOpts{Heads: heads, KVHeads: kvh, HeadDim: hd, NKV: capRows, Scale: 1}, pos); err == nil {
		t.Error("8 queries with a device position accepted (the decode kernel takes 4)")
	}
	if err := b.UploadI32(f, []int32{1}); err == nil {
		t.Error("UploadI32 into an F32 tensor accepted")
	}
}
