// Package replay is a test double for the graph capabilities of a
// backend (backend.Capturer, backend.DevicePos) on any backend, typically
// the cpu one: a "graph" is the captured function, run again at each
// Launch (its ops read their tensors then, as a replayed CUDA graph does),
// and device positions are int tensors of its own. Models' graph logic
// (capture once, replay, positions set before each launch, fall back when
// refused) runs with it without a GPU, against the same model op by op.
package replay

import (
	"errors"

	"vlanode/backend"
	"vlanode/tensor"
)

// Backend wraps a backend with Capturer and DevicePos done on the host.
type Backend struct {
	backend.Backend
	// Captures and Launches count the graphs made and replayed.
	Captures, Launches int
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
