package cpu

import (
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/backend"
)

// refAttention is naive attention in float64 over the whole score matrix,
// with the scale Σ p·|v| of each output.
func refAttention(q, k, v []float64, tq int, o backend.AttnOpts) (out, scale []float64) {
	hd, group := o.HeadDim, o.Heads/o.KVHeads
	qs, kvs := o.Heads*hd, o.KVHeads*hd
	out = make([]float64, tq*qs)
	scale = make([]float64, tq*qs)
	for i := range tq {
		lo, hi := 0, o.NKV
		if len(o.Segments) > 0 {
			s := sort.SearchInts(o.Segments, i+1)
			lo, hi = o.Segments[s-1], o.Segments[s]
		}
		for h := range o.Heads {
			kh := h / group
			scores := make([]float64, o.NKV)
			m := math.Inf(-1)
			for j := range o.NKV {
				masked := j >= o.MaskFrom && j < o.MaskTo
				visible := j >= lo && j < hi && (!o.Causal || j <= o.QPos0+i) && !masked
				if !visible {
					scores[j] = math.Inf(-1)
					continue
				}
				var s float64
				for x := range hd {
					s += q[i*qs+h*hd+x] * k[j*kvs+kh*hd+x]
				}
				scores[j] = s * float64(o.Scale)
				m = max(m, scores[j])
			}
			var sum float64
			for j := range scores {
				scores[j] = math.Exp(scores[j] - m)
				sum += scores[j]
			}
			for j, p := range scores {
				if p == 0 {
					continue
				}
				for x := range hd {
					out[i*qs+h*hd+x] += p / sum * v[j*kvs+kh*hd+x]
					scale[i*qs+h*hd+x] += p / sum * math.Abs(v[j*kvs+kh*hd+x])
				}
			}
		}
	}
	return out, scale
}

func TestAttention(t *testing.T) {
	cases := []struct {
		name     string
		tq, rows int // queries, key/value rows in the cache
		qScale   float64
		o        backend.AttnOpts
	}{
		{"mha", 5, 7, 1, backend.AttnOpts{Heads: 4, KVHeads: 4, HeadDim: 16, NKV: 7}},
		{"gqa2 causal prefill", 9, 9, 1, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 8, NKV: 9, Causal: true}},
		{"gqa4 decode", 1, 20, 1, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 16, NKV: 13, Causal: true, QPos0: 12}},
		{"gqa4 decode chunk", 3, 20, 1, backend.AttnOpts{Heads: 8, KVHeads: 2, HeadDim: 16, NKV: 13, Causal: true, QPos0: 10}},
		{"causal behind the end", 2, 20, 1, backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 8, NKV: 13, Causal: true, QPos0: 4}},
		{"nkv below rows", 4, 10, 1, backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 8, NKV: 6}},
		{"segments", 10, 10, 1, backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 8, NKV: 10, Segments: []int{0, 3, 7, 10}}},
		{"segments causal", 10, 12, 1, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 8, NKV: 10, Causal: true, Segments: []int{0, 4, 10}}},
		{"long, peaked", 3, 300, 4, backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 64, NKV: 290}},
		{"long causal decode", 2, 300, 4, backend.AttnOpts{Heads: 4, KVHeads: 1, HeadDim: 32, NKV: 300, Causal: true, QPos0: 298}},
		{"masked middle (expert)", 6, 90, 1, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 8, NKV: 90, MaskFrom: 20, MaskTo: 84}},
		{"masked prefix", 6, 90, 1, backend.AttnOpts{Heads: 4, KVHeads: 2, HeadDim: 8, NKV: 90, MaskFrom: 0, MaskTo: 30}},
		{"odd head dim", 3, 5, 1, backend.AttnOpts{Heads: 3, KVHeads: 3, HeadDim: 5, NKV: 5}},
	}
	b := newBackend(t)
	rng := newRand(11)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			o.Scale = float32(1 / math.Sqrt(float64(o.HeadDim)))
			qv := randVals(rng, c.tq*o.Heads*o.HeadDim, c.qScale)
			kvCols := o.KVHeads * o.HeadDim
			kv := randVals(rng, c.rows*kvCols, 2)
			vv := randVals(rng, c.rows*kvCols, 1)
			for i := o.NKV * kvCols; i < len(kv); i++ {
				kv[i], vv[i] = float32(math.NaN()), float32(math.NaN()) // rows past NKV must not be read
			}
			q := activation(t, b, qv, c.tq, o.Heads*o.HeadDim)
			k := activation(t, b, kv, c.rows, kvCols)
			v := activation(t, b, vv, c.rows, kvCols)
			dst := alloc(t, b, c.tq, o.Heads*o.HeadDim)
			require.NoError(t, b.Attention(dst, q, k, v, o))
			want, scale := refAttention(to64(qv), to64(kv), to64(vv), c.tq, o)
			requireClose(t, "attention", want, scale, download(t, b, dst))
		})
	}
}

// TestAttentionKVCache writes keys and values into cache rows with Copy and
// decodes over them.
func TestAttentionKVCache(t *testing.T) {
	const maxT, prompt, heads, kvHeads, hd = 16, 5, 4, 2, 8
	b := newBackend(t)
	rng := newRand(12)
	kvCols := kvHeads * hd
	kAll := randVals(rng, (prompt+1)*kvCols, 1)
	vAll := randVals(rng, (prompt+1)*kvCols, 1)
	qAll := randVals(rng, (prompt+1)*heads*hd, 1)
	kCache, vCache := alloc(t, b, maxT, kvCols), alloc(t, b, maxT, kvCols)

	step := func(pos, n int) {
		for _, c := range []struct {
			cache backend.Tensor
			vals  []float32
		}{{kCache, kAll}, {vCache, vAll}} {
			rows, err := b.Rows(c.cache, pos, n)
			require.NoError(t, err)
			require.NoError(t, b.Copy(rows, activation(t, b, c.vals[pos*kvCols:(pos+n)*kvCols], n, kvCols)))
		}
		o := backend.AttnOpts{Heads: heads, KVHeads: kvHeads, HeadDim: hd, NKV: pos + n, Scale: 0.35, Causal: true, QPos0: pos}
		qv := qAll[pos*heads*hd : (pos+n)*heads*hd]
		dst := alloc(t, b, n, heads*hd)
		require.NoError(t, b.Attention(dst, activation(t, b, qv, n, heads*hd), kCache, vCache, o))
		want, scale := refAttention(to64(qv), to64(kAll), to64(vAll), n, o)
		requireClose(t, name("attention at ", pos), want, scale, download(t, b, dst))
	}
	step(0, prompt) // prefill
	step(prompt, 1) // decode one token
}

func TestAttentionErrors(t *testing.T) {
	b := newBackend(t)
	q := alloc(t, b, 4, 16)
	kv := alloc(t, b, 8, 8)
	dst := alloc(t, b, 4, 16)
	o := backend.AttnOpts{Heads: 2, KVHeads: 1, HeadDim: 8, NKV: 8, Scale: 1}
	require.NoError(t, b.Attention(dst, q, kv, kv, o))

	bad := o
	bad.KVHeads = 3
	require.ErrorContains(t, b.Attention(dst, q, kv, kv, bad), "bad heads 2/3")
	bad = o
	bad.NKV = 9
	require.ErrorContains(t, b.Attention(dst, q, kv, kv, bad), "do not hold 9 rows")
	bad = o
	bad.Causal, bad.QPos0 = true, 5
	require.ErrorContains(t, b.Attention(dst, q, kv, kv, bad), "reach past the 8 keys")
	bad = o
	bad.Causal, bad.QPos0 = true, -1
	require.ErrorContains(t, b.Attention(dst, q, kv, kv, bad), "negative QPos0")
	bad = o
	bad.Segments = []int{0, 4, 8}
	require.ErrorContains(t, b.Attention(dst, q, kv, kv, bad), "as many queries as keys")
	require.ErrorContains(t, b.Attention(q, q, kv, kv, o), "overlaps")
	require.ErrorContains(t, b.Attention(alloc(t, b, 4, 8), q, kv, kv, o), "do not hold 2 heads of 8")
}
