package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"vlanode/backend"
	"vlanode/tensor"
)

// decodeShape is the shape of a Qwen3-like decoder layer for decode-step
// tests and benchmarks.
type decodeShape struct {
	hidden, heads, kvHeads, headDim, mlp, nkv int
}

var (
	decodeFull  = decodeShape{4096, 32, 8, 128, 12288, 3030} // Qwen3-VL-8B over the Standard prefill
	decodeSmall = decodeShape{256, 4, 2, 64, 512, 100}
)

// decodeLayer holds one layer's weights and KV cache.
type decodeLayer struct {
	inNorm, postNorm, qNorm, kNorm    backend.Tensor
	wq, wk, wv, wo, wGate, wUp, wDown backend.Tensor
	kCache, vCache                    backend.Tensor
}

// decodeStack is a stack of layers and the activations of one decode
// step: step reads xs[0] and writes xs[len(layers)], and is a function of
// them (in-place ops only touch values it recomputes), so a replay must
// give the same bits.
type decodeStack struct {
	be                                    *Backend
	s                                     decodeShape
	layers                                []decodeLayer
	xs                                    []backend.Tensor
	n1, q, k, v, att, o, x2, n2, gate, up backend.Tensor
	cos, sin                              backend.Tensor
	bytes                                 float64 // weights and caches one step reads
}

func newDecodeStack(tb testing.TB, be *Backend, s decodeShape, nLayers int) *decodeStack {
	tb.Helper()
	st := &decodeStack{be: be, s: s}
	var all []backend.Tensor
	mk := func(dt tensor.DType, scale float32, shape ...int) backend.Tensor {
		t := devRandom(tb, be, dt, scale, shape...)
		all = append(all, t)
		return t
	}
	tb.Cleanup(func() {
		for _, t := range all {
			be.Free(t)
		}
	})
	qc, kc := s.heads*s.headDim, s.kvHeads*s.headDim
	ws := func(n, k int) backend.Tensor {
		st.bytes += 2 * float64(n) * float64(k)
		return mk(tensor.BF16, float32(1/math.Sqrt(float64(k))), n, k)
	}
	for l := 0; l < nLayers; l++ {
		st.layers = append(st.layers, decodeLayer{
			inNorm: mk(tensor.BF16, 1, s.hidden), postNorm: mk(tensor.BF16, 1, s.hidden),
			qNorm: mk(tensor.BF16, 1, s.headDim), kNorm: mk(tensor.BF16, 1, s.headDim),
			wq: ws(qc, s.hidden), wk: ws(kc, s.hidden), wv: ws(kc, s.hidden), wo: ws(s.hidden, qc),
			wGate: ws(s.mlp, s.hidden), wUp: ws(s.mlp, s.hidden), wDown: ws(s.hidden, s.mlp),
			kCache: mk(tensor.F32, 1, s.nkv, kc), vCache: mk(tensor.F32, 1, s.nkv, kc),
		})
		st.bytes += 2 * 4 * float64(s.nkv) * float64(kc)
	}
	for l := 0; l <= nLayers; l++ {
		st.xs = append(st.xs, mk(tensor.F32, 1, 1, s.hidden))
	}
	st.n1, st.q, st.k, st.v = mk(tensor.F32, 1, 1, s.hidden), mk(tensor.F32, 1, 1, qc), mk(tensor.F32, 1, 1, kc), mk(tensor.F32, 1, 1, kc)
	st.att, st.o, st.x2, st.n2 = mk(tensor.F32, 1, 1, qc), mk(tensor.F32, 1, 1, s.hidden), mk(tensor.F32, 1, 1, s.hidden), mk(tensor.F32, 1, 1, s.hidden)
	st.gate, st.up = mk(tensor.F32, 1, 1, s.mlp), mk(tensor.F32, 1, 1, s.mlp)
	st.cos, st.sin = mk(tensor.F32, 1, 1, s.headDim/2), mk(tensor.F32, 1, 1, s.headDim/2)
	// The weights as Backend.Weight makes them: written by nothing once
	// the fills have run, so that GEMVs may load them early (gemvEarly).
	if err := be.Sync(); err != nil {
		tb.Fatal(err)
	}
	for _, l := range st.layers {
		for _, w := range []backend.Tensor{l.inNorm, l.postNorm, l.qNorm, l.kNorm, l.wq, l.wk, l.wv, l.wo, l.wGate, l.wUp, l.wDown} {
			w.(*Tensor).readOnly = true
		}
	}
	return st
}

// step runs one decode step: per layer RMSNorm, q/k/v GEMVs, per-head q/k
// norms, RoPE, the new k/v into the cache's last row, attention over the
// cache, the output GEMV, the residual, RMSNorm, the SwiGLU MLP, the
// residual.
func (st *decodeStack) step() error {
	be, s := st.be, st.s
	const eps = 1e-6
	qh, err := be.Reshape(st.q, s.heads, s.headDim)
	if err != nil {
		return err
	}
	kh, err := be.Reshape(st.k, s.kvHeads, s.headDim)
	if err != nil {
		return err
	}
	for l, ly := range st.layers {
		x, next := st.xs[l], st.xs[l+1]
		kRow, err := be.Rows(ly.kCache, s.nkv-1, 1)
		if err != nil {
			return err
		}
		vRow, err := be.Rows(ly.vCache, s.nkv-1, 1)
		if err != nil {
			return err
		}
		for _, op := range []func() error{
			func() error { return be.RMSNorm(st.n1, x, ly.inNorm, eps) },
			func() error { return be.MatMul(st.q, st.n1, ly.wq, nil) },
			func() error { return be.MatMul(st.k, st.n1, ly.wk, nil) },
			func() error { return be.MatMul(st.v, st.n1, ly.wv, nil) },
			func() error { return be.RMSNorm(qh, qh, ly.qNorm, eps) },
			func() error { return be.RMSNorm(kh, kh, ly.kNorm, eps) },
			func() error { return be.Rope(st.q, st.cos, st.sin, s.headDim) },
			func() error { return be.Rope(st.k, st.cos, st.sin, s.headDim) },
			func() error { return be.Copy(kRow, st.k) },
			func() error { return be.Copy(vRow, st.v) },
			func() error {
				return be.Attention(st.att, st.q, ly.kCache, ly.vCache, backend.AttnOpts{
					Heads: s.heads, KVHeads: s.kvHeads, HeadDim: s.headDim, NKV: s.nkv,
					Scale: float32(1 / math.Sqrt(float64(s.headDim))), Causal: true, QPos0: s.nkv - 1,
				})
			},
			func() error { return be.MatMul(st.o, st.att, ly.wo, nil) },
			func() error { return be.Add(st.x2, x, st.o) },
			func() error { return be.RMSNorm(st.n2, st.x2, ly.postNorm, eps) },
			func() error { return be.MatMul(st.gate, st.n2, ly.wGate, nil) },
			func() error { return be.MatMul(st.up, st.n2, ly.wUp, nil) },
			func() error { return be.SiLUMul(st.gate, st.gate, st.up) },
			func() error { return be.MatMul(st.o, st.gate, ly.wDown, nil) },
			func() error { return be.Add(next, st.x2, st.o) },
		} {
			if err := op(); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestGPUGraph captures a decode-like step and checks that replays give
// the same bits as running it op by op, for two inputs; and that ops that
// cannot be captured make Capture fail cleanly.
func TestGPUGraph(t *testing.T) {
	b := gpuBackend(t)
	st := newDecodeStack(t, b, decodeSmall, 2)
	r := rand.New(rand.NewPCG(9, 9))
	out := st.xs[len(st.xs)-1]
	inputs := [][]float32{randVals(r, decodeSmall.hidden, 1), randVals(r, decodeSmall.hidden, 1)}

	// Op by op (this also sizes the scratch buffers for the capture).
	var want [][]float32
	for _, in := range inputs {
		if err := b.Upload(st.xs[0], in); err != nil {
			t.Fatal(err)
		}
		if err := st.step(); err != nil {
			t.Fatal(err)
		}
		want = append(want, download(t, b, out))
	}
	gr, err := b.Capture(st.step)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	t.Logf("graph of %d nodes for %d layers", gr.Nodes(), len(st.layers))
	for rep := 0; rep < 2; rep++ {
		for i, in := range inputs {
			if err := b.Upload(st.xs[0], in); err != nil {
				t.Fatal(err)
			}
			if err := gr.Launch(); err != nil {
				t.Fatal(err)
			}
			got := download(t, b, out)
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("replay %d of input %d: element %d is %v, op by op %v", rep, i, j, got[j], want[i][j])
				}
			}
		}
	}
	if err := gr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := gr.Launch(); err == nil {
		t.Error("launch after Close accepted")
	}

	// What a capture refuses.
	x := alloc(t, b, 4096)
	emb := alloc(t, b, 1, decodeSmall.hidden)
	for name, fn := range map[string]func() error{
		"alloc":    func() error { _, err := b.Alloc("activations", tensor.F32, 16); return err },
		"upload":   func() error { return b.Upload(x, make([]float32, 4096)) },
		"download": func() error { _, err := b.Download(x); return err },
		"sync":     b.Sync,
		"free":     func() error { b.Free(x); return nil }, // the error surfaces through Capture
		"nested":   func() error { _, err := b.Capture(func() error { return nil }); return err },
		"embedding": func() error {
			return b.Embedding(emb, st.layers[0].wq, []int32{0})
		},
	} {
		_, err := b.Capture(func() error { _ = b.Add(x, x, x); return fn() })
		if err == nil {
			t.Errorf("%s inside a capture: no error", name)
			continue
		}
		if name != "nested" && !strings.Contains(err.Error(), "not allowed while capturing") {
			t.Errorf("%s inside a capture: %v", name, err)
		}
	}
	// fn's own error, and a panic.
	boom := errors.New("boom")
	if _, err := b.Capture(func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("capture of a failing function: %v", err)
	}
	if _, err := b.Capture(func() error { panic("oops") }); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("capture of a panicking function: %v", err)
	}
	// The backend works as before, and x was not freed.
	if err := b.Add(x, x, x); err != nil {
		t.Fatalf("add after failed captures: %v", err)
	}
	if err := b.Sync(); err != nil {
		t.Fatalf("sync after failed captures: %v", err)
	}
}

// TestGPULaunchOverlap runs a full-size decode step with each kernel
// launched only after the one ahead has finished, then with programmatic
// dependent launch (GEMVs loading their first weights early, then not),
// op by op and from a graph: every way gives the same bits, since the
// overlap changes when kernels start, never what they compute.
func TestGPULaunchOverlap(t *testing.T) {
	b := gpuBackend(t)
	if err := b.run(func(g *gpu) error {
		if !g.pdlOK {
			t.Skipf("SKIPPED: no programmatic dependent launch on %s (sm_%d)", g.info.Name, g.info.ComputeCapability)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer b.SetSerialLaunches(false)
	st := newDecodeStack(t, b, decodeFull, 2)
	out := st.xs[len(st.xs)-1]
	if err := b.Upload(st.xs[0], randVals(rand.New(rand.NewPCG(4, 4)), decodeFull.hidden, 1)); err != nil {
		t.Fatal(err)
	}
	run := func(serial, late, graph bool) []float32 {
		t.Helper()
		if err := b.SetSerialLaunches(serial); err != nil {
			t.Fatal(err)
		}
		if err := b.run(func(g *gpu) error { g.gemvLate = late; return nil }); err != nil {
			t.Fatal(err)
		}
		defer b.run(func(g *gpu) error { g.gemvLate = false; return nil })
		fn := st.step
		if graph {
			gr, err := b.Capture(st.step)
			if err != nil {
				t.Fatal(err)
			}
			defer gr.Close()
			fn = gr.Launch
		}
		for range 2 {
			if err := fn(); err != nil {
				t.Fatal(err)
			}
		}
		return download(t, b, out)
	}
	want := run(true, false, false)
	for _, c := range []struct {
		name                string
		serial, late, graph bool
	}{
		{"overlapped", false, false, false},
		{"overlapped, weights loaded late", false, true, false},
		{"overlapped, graph", false, false, true},
		{"serial, graph", true, false, true},
	} {
		got := run(c.serial, c.late, c.graph)
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				t.Fatalf("%s: element %d is %v, serial op by op %v", c.name, j, got[j], want[j])
			}
		}
	}
}

// TestGPUTrace times a decode-like step op by op: every launch of the
// step is counted once, under its kernel's name, with a GPU time; a
// capture while tracing records nothing.
func TestGPUTrace(t *testing.T) {
	b := gpuBackend(t)
	st := newDecodeStack(t, b, decodeSmall, 2)
	if err := st.step(); err != nil { // sizes the scratch buffers
		t.Fatal(err)
	}
	if _, err := b.StopTrace(); err == nil {
		t.Error("StopTrace without StartTrace: no error")
	}
	if err := b.StartTrace(); err != nil {
		t.Fatal(err)
	}
	if err := st.step(); err != nil {
		t.Fatal(err)
	}
	gr, err := b.Capture(st.step)
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	ops, err := b.StopTrace()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	launches := 0
	for _, o := range ops {
		if o.Ms <= 0 || o.Count <= 0 {
			t.Errorf("%s: %d ops in %g ms", o.Op, o.Count, o.Ms)
		}
		name, _, _ := strings.Cut(o.Op, " grid ")
		count[name] += o.Count
		launches += o.Count
	}
	// Per layer: four norms, seven products, two rotaries, two cache
	// copies, the split decode attention and its merge, two additions and
	// the SiLU product.
	if want := 20 * len(st.layers); launches != want {
		t.Errorf("traced %d operations, want %d: %v", launches, want, count)
	}
	if count["rmsnorm"] != 4*len(st.layers) {
		t.Errorf("rmsnorm counted %d times, want %d (%v)", count["rmsnorm"], 4*len(st.layers), count)
	}
	var sb strings.Builder
	if err := WriteOpTimes(&sb, ops); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "total GPU time") {
		t.Errorf("table without its total:\n%s", sb.String())
	}
	t.Logf("\n%s", sb.String())
}

// TestGPUStopwatch times queued work by marks (backend.Stopwatch): the
// device time between two marks covers what was queued between them,
// and marks are refused during a capture and once released.
func TestGPUStopwatch(t *testing.T) {
	b := gpuBackend(t)
	var sw backend.Stopwatch = b
	x := alloc(t, b, 4096, 4096)
	m0, err := sw.Mark()
	noErrs(t, err)
	for range 20 {
		noErrs(t, b.Add(x, x, x)) // 20 passes over 64 MB: tens of µs at least
	}
	m1, err := sw.Mark()
	noErrs(t, err)
	d, err := sw.Elapsed(m0, m1)
	noErrs(t, err)
	if d < 10*time.Microsecond || d > 10*time.Second {
		t.Errorf("20 adds of 16M floats took %v by the marks", d)
	}
	if d0, err := sw.Elapsed(m1, m1); err != nil || d0 != 0 {
		t.Errorf("a mark to itself: %v, %v", d0, err)
	}
	noErrs(t, sw.ReleaseMark(m0), sw.ReleaseMark(0))
	if _, err := sw.Elapsed(m0, m1); err == nil {
		t.Error("a released mark: no error")
	}
	if err := sw.ReleaseMark(m0); err == nil {
		t.Error("a mark released twice: no error")
	}
	noErrs(t, sw.ReleaseMark(m1))
	if _, err := b.Capture(func() error { _, err := sw.Mark(); return err }); err == nil {
		t.Error("a mark during a capture: no error")
	}
}
