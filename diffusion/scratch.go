package diffusion

import (
	"fmt"

	"vlanode/backend"
	"vlanode/models/qwen3"
	"vlanode/tensor"
)

// scratch is the activation memory of one expert pass over t action tokens,
// allocated once per Expert and reused by every Euler step.
type scratch struct {
	t          int
	feats      backend.Tensor // [t, (channels+1)·fourier feats]
	mlpA, mlpB backend.Tensor // [t, action_in_proj hidden]
	x          backend.Tensor // [t, hidden] the residual stream
	h          backend.Tensor // [t, hidden]
	out        backend.Tensor // [t, action dims]
	layer      *qwen3.Scratch // the decoder layers' activations and rotary tables
	allocated  []backend.Tensor

	featsH, cosH, sinH []float32 // host staging

	// ropeFirst is the position of the first action token that cos and sin
	// hold, when ropeValid.
	ropeFirst int
	ropeValid bool
}

func newScratch(be backend.Backend, c *Config, t, channels int, features int) (*scratch, error) {
	e := c.Expert
	s := &scratch{t: t}
	half := e.HeadDim / 2
	s.featsH = make([]float32, t*features)
	s.cosH, s.sinH = make([]float32, t*half), make([]float32, t*half)
	for _, a := range []struct {
		dst  *backend.Tensor
		cols int
	}{
		{&s.feats, features}, {&s.mlpA, c.InProj.HiddenSize}, {&s.mlpB, c.InProj.HiddenSize},
		{&s.x, e.HiddenSize}, {&s.h, e.HiddenSize}, {&s.out, channels},
	} {
		tt, err := be.Alloc("activations", tensor.F32, t, a.cols)
		if err != nil {
			s.free(be)
			return nil, fmt.Errorf("diffusion: allocating activations: %w", err)
		}
		*a.dst = tt
		s.allocated = append(s.allocated, tt)
	}
	var err error
	if s.layer, err = qwen3.NewScratch(be, c.Expert.Qwen3(), t); err != nil {
		s.free(be)
		return nil, fmt.Errorf("diffusion: allocating activations: %w", err)
	}
	return s, nil
}

func (s *scratch) free(be backend.Backend) {
	if s.layer != nil {
		s.layer.Free(be)
		s.layer = nil
	}
	for _, t := range s.allocated {
		be.Free(t)
	}
	s.allocated = nil
}

// rows is a view of rows [lo, lo+n) of the scratch (its activations, and
// its layers' with their rotary tables), for one Draws' samples of a pass
// over several: computed with the shapes they have alone. It owns nothing
// and must not outlive s.
func (s *scratch) rows(be backend.Backend, lo, n int) (*scratch, error) {
	v := &scratch{t: n}
	for _, a := range []struct{ dst, src *backend.Tensor }{
		{&v.feats, &s.feats}, {&v.mlpA, &s.mlpA}, {&v.mlpB, &s.mlpB}, {&v.x, &s.x}, {&v.h, &s.h}, {&v.out, &s.out},
	} {
		t, err := be.Rows(*a.src, lo, n)
		if err != nil {
			return nil, fmt.Errorf("diffusion: rows [%d, %d) of the activations: %w", lo, lo+n, err)
		}
		*a.dst = t
	}
	var err error
	if v.layer, err = s.layer.Rows(be, lo, n); err != nil {
		return nil, fmt.Errorf("diffusion: %w", err)
	}
	return v, nil
}
