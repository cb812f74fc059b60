package cuda

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
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

// TestGPUQKAttentionAt checks QKNormRopeCacheAttentionAt against its two
// ops (vla_qk_norm_rope_cache, then AttentionAt), bit for bit in the
// output and both caches: op by op and replayed in one graph, for positions
// at the start, at and around the 32-key splits' bounds and in the last
// row, with Qwen3's heads (32 of 128 in groups of four: the fused kernel)
// and two other shapes (groups of two; float caches) that take the two
// ops. It also checks which kernels ran.
func TestGPUQKAttentionAt(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(4, 5))
	pos, err := b.Alloc("activations", tensor.I32, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(pos)
	const capRows = 130
	for _, c := range []struct {
		heads, kvh int
		dt         tensor.DType
		fused      bool
		floatW     bool // norm weights in float activations: loaded after the wait
	}{{32, 8, tensor.BF16, true, false}, {32, 8, tensor.BF16, true, true}, {16, 8, tensor.BF16, false, false}, {32, 8, tensor.F32, false, false}} {
		t.Run(fmt.Sprintf("%d-%d/%v/floatw=%v", c.heads, c.kvh, c.dt, c.floatW), func(t *testing.T) {
			const hd = 128
			kvc := c.kvh * hd
			mk := func() backend.Tensor {
				ct, err := b.Alloc("kv-cache", c.dt, capRows, kvc)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Free(ct) })
				noErrs(t, b.Copy(ct, upload(t, b, randVals(r, capRows*kvc, 1), capRows, kvc)))
				return ct
			}
			kA, vA, kB, vB := mk(), mk(), mk(), mk()
			noErrs(t, b.Copy(kB, kA), b.Copy(vB, vA))
			qw, _ := weight(t, b, tensor.BF16, randVals(r, hd, 1), hd)
			kw, _ := weight(t, b, tensor.BF16, randVals(r, hd, 1), hd)
			if c.floatW {
				qw, kw = upload(t, b, randVals(r, hd, 1), 1, hd), upload(t, b, randVals(r, hd, 1), 1, hd)
			}
			cos, sin := alloc(t, b, 1, hd/2), alloc(t, b, 1, hd/2)
			q, k, v := alloc(t, b, 1, c.heads*hd), alloc(t, b, 1, kvc), alloc(t, b, 1, kvc)
			qB, kB1 := alloc(t, b, 1, c.heads*hd), alloc(t, b, 1, kvc)
			outA, outB := alloc(t, b, 1, c.heads*hd), alloc(t, b, 1, c.heads*hd)
			o := backend.AttnOpts{Heads: c.heads, KVHeads: c.kvh, HeadDim: hd, Scale: 0.088, Causal: true, NKV: capRows}
			fused := func() error {
				return b.QKNormRopeCacheAttentionAt(outA, q, k, v, qw, kw, cos, sin, 1e-6, kA, vA, o, pos)
			}
			apart := func() error { // on copies of q and k: the op leaves them as scratch
				if err := b.Copy(qB, q); err != nil {
					return err
				}
				if err := b.Copy(kB1, k); err != nil {
					return err
				}
				if err := b.QKNormRopeCache(qB, kB1, v, qw, kw, cos, sin, hd, 1e-6, kB, vB, backend.CacheAt{PosAt: pos}); err != nil {
					return err
				}
				return b.AttentionAt(outB, qB, kB, vB, o, pos)
			}
			// The caches' bytes, whatever their type.
			raw := func(x backend.Tensor) []byte {
				var out []byte
				noErrs(t, b.run(func(g *gpu) error {
					xt := x.(*Tensor)
					buf, err := g.fetch("test download", xt.ptr, xt.bytes())
					out = append(out, buf...)
					return err
				}))
				return out
			}
			var graph *Graph
			for round := range 2 { // op by op, then replayed
				for _, p := range []int{0, 31, 32, 63, 64, 100, capRows - 1} {
					for _, x := range []backend.Tensor{q, k, v, cos, sin} {
						n := x.Shape()[1]
						noErrs(t, b.Copy(x, upload(t, b, randVals(r, n, 1.5), 1, n)))
					}
					noErrs(t, b.UploadI32(pos, []int32{int32(p)}))
					noErrs(t, apart()) // first: the sequence rewrites q and k, the fused kernel need not
					if round == 0 {
						noErrs(t, b.StartTrace(), fused())
						ops, err := b.StopTrace()
						noErrs(t, err)
						var one bool
						for _, op := range ops {
							one = one || strings.HasPrefix(op.Op, "attention decode+qk norm ")
						}
						if one != c.fused {
							t.Fatalf("position %d: the fused kernel ran %v, want %v (%v)", p, one, c.fused, ops)
						}
					} else {
						if graph == nil {
							graph, err = b.Capture(fused)
							noErrs(t, err)
							defer graph.Close()
						}
						noErrs(t, graph.Launch())
					}
					what := fmt.Sprintf("round %d, position %d", round, p)
					sameBits(t, what+": attention", download(t, b, outA), download(t, b, outB))
					for _, c := range []struct {
						name string
						a, b backend.Tensor
					}{{"k cache", kA, kB}, {"v cache", vA, vB}} {
						if !bytes.Equal(raw(c.a), raw(c.b)) {
							t.Fatalf("%s: the %s differs from the sequence's", what, c.name)
						}
					}
				}
			}
		})
	}
}
