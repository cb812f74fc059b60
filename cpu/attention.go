package cpu

import (
	"fmt"
	"math"
	"sort"

	"vlanode/backend"
)

const (
	// attnBlock is how many keys the streaming softmax scores before it
	// rescales its running sums.
	attnBlock = 64
	// attnTaskWork is about how many multiply-adds one attention task does
	// at least, so that a small call is not spread over every thread.
	attnTaskWork = 1 << 16
)

// Attention computes softmax(q·kᵀ·scale + mask)·v; see backend.AttnOpts.
// Each (query, head) is one streaming-softmax pass over its visible keys
// (blocks of scores, a running maximum and sum), so no Tq×NKV matrix is
// built; the sum of weights is kept in float64, the weighted values in
// float32. Key rows at and past NKV are never read.
func (b *Backend) Attention(dst, q, k, v backend.Tensor, o backend.AttnOpts) error {
	const op = "attention"
	if b.closed.Load() {
		return ErrClosed
	}
	d, err := dstOf(op, "dst", dst)
	if err != nil {
		return err
	}
	qt, err := f32Of(op, "q", q)
	if err != nil {
		return err
	}
	kt, err := f32Of(op, "k", k)
	if err != nil {
		return err
	}
	vt, err := f32Of(op, "v", v)
	if err != nil {
		return err
	}
	if err := o.Validate(qt, kt, vt, d); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if o.QPos0 < 0 {
		return fmt.Errorf("cpu: attention: negative QPos0 %d", o.QPos0)
	}
	if shares(d.f32, qt.f32) || shares(d.f32, kt.f32) || shares(d.f32, vt.f32) {
		return fmt.Errorf("cpu: attention: dst %v overlaps q, k or v", d)
	}
	tq, _ := qt.matrix()
	hd := o.HeadDim
	items := tq * o.Heads
	per := max(1, attnTaskWork/(2*o.NKV*hd))
	tasks := (items + per - 1) / per
	a := attention{o: o, q: qt.f32, k: kt.f32, v: vt.f32, dst: d.f32}
	return b.pool.run(tasks, func(w, t int) {
		buf := b.scratch.get(w, hd+attnBlock)
		for it := t * per; it < min(items, (t+1)*per); it++ {
			a.one(it/o.Heads, it%o.Heads, buf[:hd], buf[hd:])
		}
	})
}

// attention holds the operands of one Attention call.
type attention struct {
	o       backend.AttnOpts
	q, k, v []float32
	dst     []float32
}

// keyRanges returns the (at most two) ranges of keys query i may attend
// to: its visible range less the masked rows.
func (a *attention) keyRanges(i int) [][2]int {
	lo, hi := a.keys(i)
	from, to := a.o.MaskFrom, a.o.MaskTo
	if to <= from || to <= lo || from >= hi {
		return [][2]int{{lo, hi}}
	}
	var r [][2]int
	if from > lo {
		r = append(r, [2]int{lo, from})
	}
	if to < hi {
		r = append(r, [2]int{to, hi})
	}
	return r
}

// keys returns the range of keys query i may attend to.
func (a *attention) keys(i int) (lo, hi int) {
	lo, hi = 0, a.o.NKV
	if s := a.o.Segments; len(s) > 0 {
		j := sort.SearchInts(s, i+1) // s[j-1] <= i < s[j]
		lo, hi = s[j-1], s[j]
	}
	if a.o.Causal {
		hi = min(hi, a.o.QPos0+i+1)
	}
	return lo, hi
}

// one computes the output of query i, head h, using acc [HeadDim] and
// scores [attnBlock] as scratch.
func (a *attention) one(i, h int, acc, scores []float32) {
	o := a.o
	hd := o.HeadDim
	qv := a.q[(i*o.Heads+h)*hd:][:hd]
	kvStride := o.KVHeads * hd
	off := h / (o.Heads / o.KVHeads) * hd // this head's KV head
	clear(acc)
	m := float32(math.Inf(-1))
	var sum float64
	for _, kr := range a.keyRanges(i) {
		lo, hi := kr[0], kr[1]
		for j0 := lo; j0 < hi; j0 += attnBlock {
			s := scores[:min(hi-j0, attnBlock)]
			bm := float32(math.Inf(-1))
			j := 0
			for ; j+4 <= len(s); j += 4 {
				r := j0 + j
				s[j], s[j+1], s[j+2], s[j+3] = dot4(qv,
					a.k[r*kvStride+off:], a.k[(r+1)*kvStride+off:],
					a.k[(r+2)*kvStride+off:], a.k[(r+3)*kvStride+off:])
			}
			for ; j < len(s); j++ {
				s[j] = dot(qv, a.k[(j0+j)*kvStride+off:])
			}
			for j := range s {
				s[j] *= o.Scale
				bm = max(bm, s[j])
			}
			if bm > m {
				if c := float32(math.Exp(float64(m - bm))); c != 1 {
					sum *= float64(c)
					for x := range acc {
						acc[x] *= c
					}
				}
				m = bm
			}
			for j := range s {
				s[j] = float32(math.Exp(float64(s[j] - m)))
				sum += float64(s[j])
			}
			j = 0
			for ; j+4 <= len(s); j += 4 {
				r := (j0 + j) * kvStride
				axpy4(acc, s[j:j+4], a.v[r+off:], a.v[r+kvStride+off:], a.v[r+2*kvStride+off:], a.v[r+3*kvStride+off:])
			}
			for ; j < len(s); j++ {
				p := s[j]
				for x, vx := range a.v[(j0+j)*kvStride+off:][:hd] {
					acc[x] += p * vx
				}
			}
		}
	}
	out := a.dst[(i*o.Heads+h)*hd:][:hd]
	inv := 1 / sum
	for x := range out {
		out[x] = float32(float64(acc[x]) * inv)
	}
}

// axpy4 adds p[0]·v0 + ... + p[3]·v3 to acc.
func axpy4(acc, p []float32, v0, v1, v2, v3 []float32) {
	n := len(acc)
	v0, v1, v2, v3 = v0[:n], v1[:n], v2[:n], v3[:n]
	p0, p1, p2, p3 := p[0], p[1], p[2], p[3]
	for x := range acc {
		acc[x] += p0*v0[x] + p1*v1[x] + p2*v2[x] + p3*v3[x]
	}
}
