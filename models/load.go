// Package models holds what every model family shares: binding checkpoint
// tensors to backend weights, one flat blob per unit, and rotary tables.
// Each family lives in its own sub-package (models/qwen3, ...).
package models

import (
	"errors"
	"fmt"

	"vlanode/backend"
	"vlanode/safetensors"
	"vlanode/tensor"
	"vlanode/weights"
)

// Spec binds one checkpoint tensor to a field of a model block.
type Spec struct {
	// Name is the tensor's name inside its unit, e.g. "self_attn.q_proj.weight";
	// the checkpoint name is the unit's prefix followed by Name.
	Name string
	// Shape is the shape the architecture requires.
	Shape []int
	// Dst receives the backend tensor.
	Dst *backend.Tensor
	// Optional tensors may be absent from the checkpoint (Dst stays nil).
	Optional bool
}

// Unit is one unit of weights (a layer, a head, an embedding table): its
// tensors packed into one flat host blob, and their backend tensors bound.
type Unit struct {
	Name string
	Blob *weights.Blob
}

// LoadUnit checks every spec against the checkpoint (presence, float dtype,
// shape), packs the present tensors into one flat blob named name, and binds
// each spec's Dst to a backend weight over that blob.
func LoadUnit(be backend.Backend, ck *safetensors.Checkpoint, name, prefix string, specs []Spec) (*Unit, error) {
	refs := make([]weights.Ref, 0, len(specs))
	present := make([]Spec, 0, len(specs))
	for _, s := range specs {
		full := prefix + s.Name
		if s.Optional && !ck.Has(full) {
			continue
		}
		info, err := ck.Expect(full, tensor.Invalid, s.Shape...)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", name, err)
		}
		if !info.DType.IsFloat() || info.DType == tensor.F64 {
			return nil, fmt.Errorf("loading %s: tensor %q has dtype %v, want F32, F16 or BF16", name, full, info.DType)
		}
		refs = append(refs, weights.Ref{Local: s.Name, Checkpoint: full})
		present = append(present, s)
	}
	blob, err := weights.Pack(name, ck, refs, nil)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", name, err)
	}
	for _, s := range present {
		e, data, err := blob.Tensor(s.Name)
		if err != nil {
			return nil, err
		}
		t, err := be.Weight("weights", e.DType, e.Shape, data)
		if err != nil {
			return nil, fmt.Errorf("loading %s: binding %s: %w", name, s.Name, err)
		}
		*s.Dst = t
	}
	return &Unit{Name: name, Blob: blob}, nil
}

// ErrBadInput is wrapped by errors about model inputs (token ids out of
// range, sequences too long).
var ErrBadInput = errors.New("bad model input")
