// Package replay is a test double for the graph capabilities of a
// backend (backend.Capturer, backend.DevicePos, backend.TokenFeed,
// backend.FlowFeed) on any backend, typically the cpu one: a "graph" is
// the captured function, run again at each Launch (its ops read their
// tensors then, as a replayed CUDA graph does), and device positions (and
// tokens, and step counters) are int tensors of its own. Models' graph
// logic (capture once, replay, positions set before each launch, fall
// back when refused) runs with it without a GPU, against the same model
// op by op.
package replay

import (
	"errors"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/sample"
	"vlanode/tensor"
)

// Backend wraps a backend with Capturer, DevicePos, TokenFeed and
// FlowFeed done on the host.
type Backend struct {
	backend.Backend
	// Captures and Launches count the graphs made and replayed; Fetches
	// the FetchI32 calls, EulerSteps the EulerStep calls.
	Captures, Launches, Fetches, EulerSteps int
	// RefuseAttention makes AttentionAt fail, as a backend does for a
	// cache longer than its decode kernel splits.
	RefuseAttention bool
}

// New wraps be.
func New(be backend.Backend) *Backend { return &Backend{Backend: be} }

// pos is a device position.
type pos struct{ v int }

func (p *pos) DType() tensor.DType { return tensor.I32 }
func (p *pos) Shape() []int        { return []int{1} }

// graph is a captured function.
type graph struct {
	b  *Backend
	fn func() error
}

func (g *graph) Launch() error { g.b.Launches++; return g.fn() }
func (g *graph) Close() error  { return nil }

// Alloc makes a position for I32 (one element), else asks the wrapped
// backend.
func (b *Backend) Alloc(purpose string, dt tensor.DType, shape ...int) (backend.Tensor, error) {
	if dt == tensor.I32 {
		if len(shape) != 1 || shape[0] != 1 {
			return nil, errors.New("replay: an I32 tensor holds one position")
		}
		return &pos{}, nil
	}
	return b.Backend.Alloc(purpose, dt, shape...)
}

// Free frees the wrapped backend's tensors.
func (b *Backend) Free(t backend.Tensor) {
	if _, ok := t.(*pos); !ok {
		b.Backend.Free(t)
	}
}

// CaptureGraph records fn without running it.
func (b *Backend) CaptureGraph(fn func() error) (backend.Graph, error) {
	b.Captures++
	return &graph{b: b, fn: fn}, nil
}

func position(t backend.Tensor) (*pos, error) {
	p, ok := t.(*pos)
	if !ok {
		return nil, errors.New("replay: not a position")
	}
	return p, nil
}

// UploadI32 sets a position.
func (b *Backend) UploadI32(dst backend.Tensor, src []int32) error {
	p, err := position(dst)
	if err != nil {
		return err
	}
	if len(src) != 1 {
		return errors.New("replay: one position at a time")
	}
	p.v = int(src[0])
	return nil
}

// CopyRowsAt copies src's rows into dst from the position's row.
func (b *Backend) CopyRowsAt(dst, src, at backend.Tensor) error {
	p, err := position(at)
	if err != nil {
		return err
	}
	rows, _ := backend.Matrix(src)
	view, err := b.Rows(dst, p.v, rows)
	if err != nil {
		return err
	}
	return b.Copy(view, src)
}

// AttentionAt is Attention at the position.
func (b *Backend) AttentionAt(dst, q, k, v backend.Tensor, o backend.AttnOpts, at backend.Tensor) error {
	if b.RefuseAttention {
		return errors.New("replay: no device positions for this cache")
	}
	p, err := position(at)
	if err != nil {
		return err
	}
	rows, _ := backend.Matrix(q)
	o.QPos0, o.NKV = p.v, p.v+rows
	return b.Attention(dst, q, k, v, o)
}

// HostTable is a weight of the wrapped backend.
func (b *Backend) HostTable(dt tensor.DType, rows, cols int, data []byte) (backend.Tensor, error) {
	return b.Weight("host-table", dt, []int{rows, cols}, data)
}

// EmbeddingAt embeds the id a one-element int tensor holds (zeros for an
// id outside the table).
func (b *Backend) EmbeddingAt(dst, table, ids backend.Tensor) error {
	p, err := position(ids)
	if err != nil {
		return err
	}
	if p.v < 0 || p.v >= table.Shape()[0] {
		return b.Upload(dst, make([]float32, backend.Elements(dst)))
	}
	return b.Embedding(dst, table, []int32{int32(p.v)})
}

// ArgmaxAt sets the int tensor dst to sample.Greedy of x's values with
// those at [maskLo, maskHi] taken as -Inf.
func (b *Backend) ArgmaxAt(dst, x backend.Tensor, maskLo, maskHi int) error {
	p, err := position(dst)
	if err != nil {
		return err
	}
	v, err := b.Download(x)
	if err != nil {
		return err
	}
	for i := max(maskLo, 0); i <= maskHi && i < len(v); i++ {
		v[i] = float32(math.Inf(-1))
	}
	p.v = sample.Greedy(v)
	return nil
}

// FetchI32 reads the int tensor's value now (the wrapped backend's ops
// have run).
func (b *Backend) FetchI32(src backend.Tensor) (backend.Fetch, error) {
	p, err := position(src)
	if err != nil {
		return nil, err
	}
	b.Fetches++
	return fetched(int32(p.v)), nil
}

// fetched is a value FetchI32 read.
type fetched int32

func (f fetched) Wait() ([]int32, error) { return []int32{int32(f)}, nil }
func (f fetched) Release()               {}

// Fourier computes backend.FlowFeed's features on the host
// (backend.FourierFeatures), the time's row at the int tensor step (row 0
// for nil).
func (b *Backend) Fourier(dst, x, freqs, tf, step backend.Tensor) error {
	row := 0
	if step != nil {
		p, err := position(step)
		if err != nil {
			return err
		}
		row = p.v
	}
	T, C := backend.Matrix(x)
	_, H := backend.Matrix(freqs)
	xv, err := b.Download(x)
	if err != nil {
		return err
	}
	fv, err := b.Download(freqs)
	if err != nil {
		return err
	}
	tv, err := b.Download(tf)
	if err != nil {
		return err
	}
	per := (C + 1) * 2 * H
	out := make([]float32, T*per)
	for w := range T {
		for c := range C {
			backend.FourierFeatures(out[w*per+c*2*H:w*per+(c+1)*2*H], xv[w*C+c], fv[c*H:(c+1)*H])
		}
		copy(out[w*per+C*2*H:(w+1)*per], tv[row*2*H:(row+1)*2*H])
	}
	return b.Upload(dst, out)
}

// EulerStep sets x += float32(dt[step]·v) on the host, then advances the
// int tensor step.
func (b *Backend) EulerStep(x, v, dt, step backend.Tensor) error {
	p, err := position(step)
	if err != nil {
		return err
	}
	xv, err := b.Download(x)
	if err != nil {
		return err
	}
	vv, err := b.Download(v)
	if err != nil {
		return err
	}
	dv, err := b.Download(dt)
	if err != nil {
		return err
	}
	h := dv[p.v]
	b.EulerSteps++
	for i := range xv {
		xv[i] += float32(h * vv[i])
	}
	p.v++
	return b.Upload(x, xv)
}

// NewExchange is the wrapped backend's backend.HostExchange (an exchange
// is no graph capability: the wrapped backend's own serves).
func (b *Backend) NewExchange(out, in int) (backend.Exchange, error) {
	hx, ok := b.Backend.(backend.HostExchange)
	if !ok {
		return nil, fmt.Errorf("replay: the wrapped %s backend has no host exchange", b.Backend.Name())
	}
	return hx.NewExchange(out, in)
}
