package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/tensor"
)

// refAttention is softmax(q·kᵀ·scale + mask)·v in float64, query by query.
// It also returns, per output, Σ_j p_j·|v_j| / Σ_j p_j: the bound on what
// rounding the softmax weights to bf16 can change (relative error 2^-9 per
// weight).
func refAttention(q, k, v []float32, tq int, o backend.AttnOpts) (out, mag []float64) {
	hd, group := o.HeadDim, o.Heads/o.KVHeads
	qs, ks := o.Heads*hd, o.KVHeads*hd
	out, mag = make([]float64, tq*qs), make([]float64, tq*qs)
	for i := 0; i < tq; i++ {
		lo, hi := 0, o.NKV
		for s := 0; s+1 < len(o.Segments); s++ {
			if o.Segments[s] <= i && i < o.Segments[s+1] {
				lo, hi = o.Segments[s], o.Segments[s+1]
			}
		}
		if o.Causal {
			hi = min(hi, o.QPos0+i+1)
		}
		visible := func(j int) bool { return o.MaskTo <= o.MaskFrom || j < o.MaskFrom || j >= o.MaskTo }
		for h := 0; h < o.Heads; h++ {
			kv := h / group
			scores := make([]float64, max(hi-lo, 0))
			m := math.Inf(-1)
			for j := lo; j < hi; j++ {
				if !visible(j) {
					scores[j-lo] = math.Inf(-1)
					continue
				}
				var dot float64
				for d := 0; d < hd; d++ {
					dot += float64(q[i*qs+h*hd+d]) * float64(k[j*ks+kv*hd+d])
				}
				scores[j-lo] = dot * float64(o.Scale)
				m = math.Max(m, scores[j-lo])
			}
			if math.IsInf(m, -1) {
				continue // no key visible: zeros
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - m)
				sum += scores[j]
			}
			for d := 0; d < hd; d++ {
				var acc, am float64
				for j := lo; j < hi; j++ {
					x := float64(v[j*ks+kv*hd+d])
					acc += scores[j-lo] * x
					am += scores[j-lo] * math.Abs(x)
				}
				out[i*qs+h*hd+d], mag[i*qs+h*hd+d] = acc/sum, am/sum
			}
		}
	}
	return out, mag
}

// attnCase is one attention test: tq queries over rows K/V rows (rows
// past NKV hold NaN and must never be read).
type attnCase struct {
	name     string
	tq, rows int
	o        backend.AttnOpts
}

var attnCases = []attnCase{
	{"prefill causal GQA", 70, 70, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 64, NKV: 70, Causal: true}},
	{"decode", 1, 160, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 128, NKV: 130, Causal: true, QPos0: 129}},
	{"decode 3 queries with a mask", 3, 700, backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: 690, Causal: true, QPos0: 687, MaskFrom: 100, MaskTo: 333}},
	{"decode long cache", 1, 3100, backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: 3030, Causal: true, QPos0: 3029}},
	{"decode segments", 4, 4, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 72, NKV: 4, Segments: []int{0, 1, 4}}},
	{"chunked prefill", 5, 40, backend.AttnOpts{Heads: 4, KVHeads: 4, HeadDim: 128, NKV: 25, Causal: true, QPos0: 20}},
	{"prefill 300 causal", 300, 300, backend.AttnOpts{Heads: 4, KVHeads: 1, HeadDim: 128, NKV: 300, Causal: true}},
	{"chunked prefill 100 after 150", 100, 260, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 128, NKV: 250, Causal: true, QPos0: 150}},
	{"expert, non-causal over a cache", 64, 300, backend.AttnOpts{Heads: 32, KVHeads: 8, HeadDim: 128, NKV: 250}},
	{"expert, 30 splits", 64, 1950, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 128, NKV: 1900}},
	{"expert, long cache", 64, 900, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 128, NKV: 894, MaskFrom: 700, MaskTo: 830}},
	{"vision segments", 97, 97, backend.AttnOpts{Heads: 4, KVHeads: 4, HeadDim: 72, NKV: 97, Segments: []int{0, 30, 50, 97}}},
	{"vision segments past a tile", 300, 300, backend.AttnOpts{Heads: 2, KVHeads: 2, HeadDim: 72, NKV: 300, Segments: []int{0, 100, 230, 300}}},
	{"segments and causal", 40, 40, backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 256, NKV: 40, Causal: true, Segments: []int{0, 10, 40}}},
	{"segments and causal, flash", 150, 150, backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 128, NKV: 150, Causal: true, Segments: []int{0, 70, 150}}},
	{"head dim 512", 3, 3, backend.AttnOpts{Heads: 1, KVHeads: 1, HeadDim: 512, NKV: 3, Causal: true}},
	{"head dim 36", 20, 20, backend.AttnOpts{Heads: 3, KVHeads: 1, HeadDim: 36, NKV: 20, Causal: true}},
	{"expert with a mask", 64, 200, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 128, NKV: 190, MaskFrom: 60, MaskTo: 130}},
	{"mask at the start", 10, 100, backend.AttnOpts{Heads: 2, KVHeads: 2, HeadDim: 64, NKV: 100, MaskFrom: 0, MaskTo: 70}},
	{"mask past the causal edge", 30, 30, backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 64, NKV: 30, Causal: true, MaskFrom: 20, MaskTo: 30}},
	{"rows that see nothing", 8, 8, backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 64, NKV: 8, Causal: true, MaskFrom: 0, MaskTo: 3}},
	// One split (64-row tiles × heads fill the GPU).
	{"prefill 260 causal, 8 heads a KV head, one split", 260, 260, backend.AttnOpts{Heads: 64, KVHeads: 8, HeadDim: 128, NKV: 260, Causal: true}},
	{"prefill 300 after 77 with a mask", 300, 400, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 128, NKV: 377, Causal: true, QPos0: 77, MaskFrom: 10, MaskTo: 150}},
	{"head dim 96, padded to 128", 200, 200, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 96, NKV: 200, Causal: true}},
}

// TestGPUAttention runs every case through the kernel Attention picks
// (flash on the tensor cores for more than 4 queries, pipelined over bf16
// copies of K and V: vla_flash_wg_80 or _128 for one split where they are
// built), then with the flash kernels that read the float K and V in
// place, then with exact attention forced, then with vla_flash_pipe_*
// (mma.sync) where vla_flash_wg_* would run, then (where they are built)
// with vla_flash_wg_* for every flash call, splits included. The float32 kernels must match the float64
// reference to 1e-5 + 1e-4·|want|. The flash kernel rounds q, k, v and the
// softmax weights to bf16: it is checked against the reference on the
// rounded q, k, v, within 2^-8·Σp|v|/Σp + 1e-5(1 + |want|) (twice the
// bound of the weights' rounding), and its overall relative error against
// the unrounded reference is logged and must stay under 1e-2.
func TestGPUAttention(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(5, 5))
	wgOn, wgOff := flashWGState(t, b)
	if !wgOn {
		t.Logf("vla_flash_wg_* are not used here (%s): the default and mma variants run the same kernels", wgOff)
	}
	wgRuns := 0
	for _, variant := range []string{"default", "in-place", "exact", "mma", "wgmma"} {
		exact, inPlace, mma, all := variant == "exact", variant == "in-place", variant == "mma", variant == "wgmma"
		setExactAttention(t, b, exact)
		setFlashInPlace(t, b, inPlace)
		noErrs(t, b.SetFlashWGMMA(!mma))
		setFlashWGAll(t, b, all)
		for _, c := range attnCases {
			t.Run(fmt.Sprintf("%s/%s", c.name, variant), func(t *testing.T) {
				n := countOps(t, b, "attention flash wgmma", func() { runAttnCase(t, b, r, c, exact) })
				flash := !exact && !inPlace && c.tq > decMaxQueries && c.o.HeadDim <= flashHeadDims[len(flashHeadDims)-1]
				if all && wgOn && flash && n == 0 {
					t.Error("vla_flash_wg_* did not run")
				}
				if (mma || !wgOn || !flash) && n > 0 {
					t.Errorf("vla_flash_wg_* ran %d times", n)
				}
				wgRuns += n
			})
		}
	}
	setExactAttention(t, b, false)
	setFlashInPlace(t, b, false)
	noErrs(t, b.SetFlashWGMMA(true))
	setFlashWGAll(t, b, false)
	t.Logf("vla_flash_wg_* ran %d times", wgRuns)
	q := alloc(t, b, 2, 64)
	if err := b.Attention(q, q, q, q, backend.AttnOpts{Heads: 1, KVHeads: 1, HeadDim: 64, NKV: 2, Scale: 1}); err == nil {
		t.Error("attention into its own q accepted")
	}
}

// TestGPUCombineRows runs the cases whose splits vla_attn_combine_rows_*
// merge (a warp a row) again with vla_attn_combine (a block a row) and
// requires the same bits.
func TestGPUCombineRows(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(6, 6))
	n := 0
	for _, c := range attnCases {
		o := c.o
		o.Scale = float32(1 / math.Sqrt(float64(o.HeadDim)))
		qv := randVals(r, c.tq*o.Heads*o.HeadDim, 1)
		kv := randVals(r, c.rows*o.KVHeads*o.HeadDim, 1)
		vv := randVals(r, c.rows*o.KVHeads*o.HeadDim, 1)
		q := upload(t, b, qv, c.tq, o.Heads*o.HeadDim)
		k := upload(t, b, kv, c.rows, o.KVHeads*o.HeadDim)
		v := upload(t, b, vv, c.rows, o.KVHeads*o.HeadDim)
		var got [2][]float32
		var rows int
		for i, blocks := range []bool{false, true} {
			if err := b.run(func(g *gpu) error { g.combineBlocks = blocks; return nil }); err != nil {
				t.Fatal(err)
			}
			dst := alloc(t, b, c.tq, o.Heads*o.HeadDim)
			merged := countOps(t, b, "attention combine rows", func() {
				if err := b.Attention(dst, q, k, v, o); err != nil {
					t.Fatal(err)
				}
			})
			if i == 0 {
				rows += merged
			}
			got[i] = download(t, b, dst)
		}
		if rows == 0 {
			continue
		}
		n++
		for i := range got[0] {
			if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
				t.Errorf("%s: element %d: %g by rows, %g by blocks", c.name, i, got[0][i], got[1][i])
				break
			}
		}
	}
	if err := b.run(func(g *gpu) error { g.combineBlocks = false; return nil }); err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Errorf("only %d cases merged their splits by rows", n)
	}
}

// flashWGState says whether vla_flash_wg_* are built and used, and why
// not.
func flashWGState(t testing.TB, b *Backend) (on bool, why string) {
	t.Helper()
	if err := b.run(func(g *gpu) error { on, why = g.flashWG, g.flashWGOff; return nil }); err != nil {
		t.Fatal(err)
	}
	return on, why
}

// setFlashWGAll sends every flash call that vla_flash_wg_* can take to
// them (where they are built), split or not.
func setFlashWGAll(t testing.TB, b *Backend, all bool) {
	t.Helper()
	if err := b.run(func(g *gpu) error { g.flashWGAll = all; return nil }); err != nil {
		t.Fatal(err)
	}
}

// countOps runs f under a trace and counts the ops whose name starts with
// prefix.
func countOps(t testing.TB, b *Backend, prefix string, f func()) int {
	t.Helper()
	if err := b.StartTrace(); err != nil {
		t.Fatal(err)
	}
	f()
	ops, err := b.StopTrace()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, op := range ops {
		if strings.HasPrefix(op.Op, prefix) {
			n++
		}
	}
	return n
}

// setFlashInPlace picks the flash kernels that read float K and V.
func setFlashInPlace(t testing.TB, b *Backend, inPlace bool) {
	t.Helper()
	if err := b.run(func(g *gpu) error { g.flashInPlace = inPlace; return nil }); err != nil {
		t.Fatal(err)
	}
}

// setExactAttention switches the shared backend's attention kernels.
func setExactAttention(t testing.TB, b *Backend, exact bool) {
	t.Helper()
	if err := b.run(func(g *gpu) error { g.exactAttention = exact; return nil }); err != nil {
		t.Fatal(err)
	}
}

func runAttnCase(t *testing.T, b *Backend, r *rand.Rand, c attnCase, exact bool) {
	o := c.o
	o.Scale = float32(1 / math.Sqrt(float64(o.HeadDim)))
	qv := randVals(r, c.tq*o.Heads*o.HeadDim, 1)
	kv := randVals(r, c.rows*o.KVHeads*o.HeadDim, 1)
	vv := randVals(r, c.rows*o.KVHeads*o.HeadDim, 1)
	for i := o.NKV * o.KVHeads * o.HeadDim; i < len(kv); i++ {
		kv[i], vv[i] = float32(math.NaN()), float32(math.NaN()) // must never be read
	}
	q := upload(t, b, qv, c.tq, o.Heads*o.HeadDim)
	k := upload(t, b, kv, c.rows, o.KVHeads*o.HeadDim)
	v := upload(t, b, vv, c.rows, o.KVHeads*o.HeadDim)
	poison := make([]float32, c.tq*o.Heads*o.HeadDim)
	for i := range poison {
		poison[i] = float32(math.NaN()) // every output must be written
	}
	dst := upload(t, b, poison, c.tq, o.Heads*o.HeadDim)
	if err := b.Attention(dst, q, k, v, o); err != nil {
		t.Fatal(err)
	}
	got := download(t, b, dst)
	path := attnPath(attnCall{d: dst.(*Tensor), q: q.(*Tensor), k: k.(*Tensor), v: v.(*Tensor), o: o, tq: c.tq}, exact)
	want, _ := refAttention(qv, kv, vv, c.tq, o)
	if path != pathFlash {
		closeTo(t, fmt.Sprintf("attention (path %d)", path), got, want, 1e-5, 1e-4, nil)
		return
	}
	rq, rk, rv := roundTo(tensor.BF16, qv), roundTo(tensor.BF16, kv), roundTo(tensor.BF16, vv)
	wantR, mag := refAttention(rq, rk, rv, c.tq, o)
	tol := make([]float64, len(mag))
	for i := range tol {
		tol[i] = mag[i]/256 + 1e-5*(1+math.Abs(wantR[i]))
	}
	closeTo(t, "flash attention vs bf16-rounded inputs", got, wantR, 0, 0, tol)
	if t.Failed() {
		logAttnMisses(t, got, wantR, tol, o)
	}
	var num, den float64
	for i := range got {
		d := float64(got[i]) - want[i]
		num, den = num+d*d, den+want[i]*want[i]
	}
	rel := math.Sqrt(num / math.Max(den, 1e-300))
	t.Logf("flash: ‖out − ref‖/‖ref‖ = %.2e against the float32 inputs", rel)
	if !(rel < 1e-2) {
		t.Errorf("flash: relative error %.2e against the float32 inputs", rel)
	}
}

// logAttnMisses names the first outputs out of tolerance by query row,
// head and dim, to locate a kernel bug from the log alone.
func logAttnMisses(t *testing.T, got []float32, want, tol []float64, o backend.AttnOpts) {
	n := 0
	for i := range got {
		e := math.Abs(float64(got[i]) - want[i])
		if e <= tol[i] && !math.IsNaN(float64(got[i])) {
			continue
		}
		row, col := i/(o.Heads*o.HeadDim), i%(o.Heads*o.HeadDim)
		t.Logf("  query %d head %d dim %d: got %v want %.6g (tol %.2g)", row, col/o.HeadDim, col%o.HeadDim, got[i], want[i], tol[i])
		if n++; n == 12 {
			return
		}
	}
}

// TestAttnPath checks the kernel choice and split sizes (no GPU needed).
func TestAttnPath(t *testing.T) {
	mk := func(tq, heads, kvheads, hd int) attnCall {
		ten := &Tensor{ptr: 1 << 20}
		return attnCall{d: ten, q: ten, k: ten, v: ten, tq: tq, o: backend.AttnOpts{Heads: heads, KVHeads: kvheads, HeadDim: hd}}
	}
	for _, c := range []struct {
		a     attnCall
		exact bool
		want  attnKind
	}{
		{mk(1, 32, 8, 128), false, pathDecode},
		{mk(4, 32, 8, 128), true, pathDecode},
		{mk(5, 32, 8, 128), false, pathFlash},
		{mk(5, 32, 8, 128), true, pathExact},
		{mk(3030, 32, 8, 128), false, pathFlash},
		{mk(11520, 16, 16, 72), false, pathFlash},
		{mk(40, 2, 1, 256), false, pathExact},
		{mk(1, 2, 1, 256), false, pathExact},
		{mk(1, 32, 1, 128), false, pathFlash}, // 32 query heads per KV head: not the decode kernel
		{mk(20, 2, 1, 66), false, pathExact},  // not a multiple of 4
	} {
		if got := attnPath(c.a, c.exact); got != c.want {
			t.Errorf("tq %d, %d/%d heads × %d, exact %v: path %d, want %d", c.a.tq, c.a.o.Heads, c.a.o.KVHeads, c.a.o.HeadDim, c.exact, got, c.want)
		}
	}
	if s := flashSplits(1, 32, 49, flashPerSM*132); s != 8 {
		t.Errorf("expert: %d splits, want 8 (256 blocks: one wave of 264)", s)
	}
	if s := flashSplits(1, 8, 3, flashPerSM*132); s != 3 {
		t.Errorf("8 heads over 3 key tiles: %d splits, want 3", s)
	}
	if s := flashSplits(48, 32, 48, flashPerSM*132); s != 1 {
		t.Errorf("prefill: %d splits, want 1", s)
	}
	if n := flashTiles(11520, []int{0, 720, 1440}); n != 24 {
		t.Errorf("tiles of two segments of 720: %d, want 24", n)
	}
	if n := flashTiles(3030, nil); n != 48 {
		t.Errorf("tiles of 3030 rows: %d, want 48", n)
	}
}

// TestGPUAttentionBF16KV runs the decode and flash paths over K and V
// kept in bf16 (a KV cache of KVCacheDType, filled by Copy from float
// rows) and over float K and V holding the same values rounded to bf16:
// the outputs must be bit-identical, since the kernels compute in float
// from the same values. It also checks what KVCacheDType picks.
func TestGPUAttentionBF16KV(t *testing.T) {
	b := gpuBackend(t)
	assert.Equal(t, tensor.BF16, b.KVCacheDType(128))
	assert.Equal(t, tensor.BF16, b.KVCacheDType(72), "the vision tower's head dim, padded to 80 by flash")
	assert.Equal(t, tensor.F32, b.KVCacheDType(100), "rows of 8 bf16 per load")
	assert.Equal(t, tensor.F32, b.KVCacheDType(256))
	r := rand.New(rand.NewPCG(7, 11))
	for _, c := range []struct {
		name             string
		tq, nkv, qpos0   int
		heads, kvh, hd   int
		causal           bool
		maskFrom, maskTo int
	}{
		{"decode", 1, 3000, 2999, 32, 8, 128, true, 0, 0},
		{"decode masked", 1, 777, 776, 32, 8, 128, true, 100, 300},
		{"decode 2 heads a kv head", 1, 1000, 999, 16, 8, 128, true, 0, 0},
		{"decode 1 head a kv head", 1, 500, 499, 8, 8, 128, true, 0, 0},
		{"decode head dim 64", 1, 333, 332, 8, 2, 64, true, 0, 0},
		{"decode 8 heads a kv head", 1, 300, 299, 16, 2, 128, true, 0, 0},
		{"prefill flash", 300, 300, 0, 32, 8, 128, true, 0, 0},
		{"prefill flash, one split", 260, 260, 0, 64, 8, 128, true, 0, 0},
		{"expert flash", 64, 2000, 1936, 32, 8, 128, false, 1900, 1936},
		{"head dim 64", 70, 500, 430, 8, 2, 64, true, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := backend.AttnOpts{Heads: c.heads, KVHeads: c.kvh, HeadDim: c.hd, NKV: c.nkv, Scale: float32(1 / math.Sqrt(float64(c.hd))),
				Causal: c.causal, QPos0: c.qpos0, MaskFrom: c.maskFrom, MaskTo: c.maskTo}
			kvw := c.kvh * c.hd
			qv := randVals(r, c.tq*c.heads*c.hd, 1)
			kv := roundTo(tensor.BF16, randVals(r, c.nkv*kvw, 1))
			vv := roundTo(tensor.BF16, randVals(r, c.nkv*kvw, 1))
			q := upload(t, b, qv, c.tq, c.heads*c.hd)
			kf, vf := upload(t, b, kv, c.nkv, kvw), upload(t, b, vv, c.nkv, kvw)
			kb, err := b.Alloc("kv-cache", tensor.BF16, c.nkv, kvw)
			require.NoError(t, err)
			defer b.Free(kb)
			vb, err := b.Alloc("kv-cache", tensor.BF16, c.nkv, kvw)
			require.NoError(t, err)
			defer b.Free(vb)
			require.NoError(t, b.Copy(kb, kf))
			require.NoError(t, b.Copy(vb, vf))
			want, got := alloc(t, b, c.tq, c.heads*c.hd), alloc(t, b, c.tq, c.heads*c.hd)
			require.NoError(t, b.Attention(want, q, kf, vf, o))
			require.NoError(t, b.Attention(got, q, kb, vb, o))
			exactly(t, c.name, download(t, b, got), download(t, b, want))
		})
	}
}

// TestGPURopeAttention checks RopeAttention against its sequence (Rope of q
// and of k, then Attention) bit for bit: where the rotations ride in the
// flash kernels (the vision encoder's segments and head dim 72, GQA with
// and without a causal mask) and where the sequence runs (four queries:
// the decode kernel; head dim 36: not a multiple of 8).
func TestGPURopeAttention(t *testing.T) {
	b := gpuBackend(t)
	r := rand.New(rand.NewPCG(5, 21))
	for _, c := range []struct {
		name  string
		rows  int
		o     backend.AttnOpts
		fused bool
	}{
		{"vision", 1440, backend.AttnOpts{Heads: 16, KVHeads: 16, HeadDim: 72, Segments: []int{0, 720, 1440}}, true},
		{"gqa", 300, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 64}, true},
		{"gqa causal", 200, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 128, Causal: true}, true},
		{"gqa causal, one split", 260, backend.AttnOpts{Heads: 64, KVHeads: 8, HeadDim: 128, Causal: true}, true},
		{"decode", 4, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 64}, false},
		{"head dim 36", 100, backend.AttnOpts{Heads: 2, KVHeads: 2, HeadDim: 36}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			o.NKV = c.rows
			o.Scale = float32(1 / math.Sqrt(float64(o.HeadDim)))
			qc, kc, half := o.Heads*o.HeadDim, o.KVHeads*o.HeadDim, o.HeadDim/2
			qv, kv, vv := randVals(r, c.rows*qc, 1), randVals(r, c.rows*kc, 1), randVals(r, c.rows*kc, 1)
			cv, sv := make([]float32, c.rows*half), make([]float32, c.rows*half)
			for i := range cv {
				a := r.Float64() * 2 * math.Pi
				cv[i], sv[i] = float32(math.Cos(a)), float32(math.Sin(a))
			}
			cs, sn, v := upload(t, b, cv, c.rows, half), upload(t, b, sv, c.rows, half), upload(t, b, vv, c.rows, kc)
			want, got := alloc(t, b, c.rows, qc), alloc(t, b, c.rows, qc)
			rt, err := b.ropeArgs(got, upload(t, b, qv, c.rows, qc), upload(t, b, kv, c.rows, kc), v, cs, sn, o)
			noErrs(t, err)
			if (rt != nil) != c.fused {
				t.Fatalf("fused %v, want %v", rt != nil, c.fused)
			}
			noErrs(t, backend.RopeAttentionSeq(b, want, upload(t, b, qv, c.rows, qc), upload(t, b, kv, c.rows, kc), v, cs, sn, o))
			noErrs(t, b.RopeAttention(got, upload(t, b, qv, c.rows, qc), upload(t, b, kv, c.rows, kc), v, cs, sn, o))
			sameBits(t, "RopeAttention", download(t, b, got), download(t, b, want))
		})
	}
}
