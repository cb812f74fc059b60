// Package models holds what every model family shares: binding checkpoint
// tensors to backend weights, one flat blob per unit, where each unit's
// weights live (Loader), how a unit's compute is run (Runner), and rotary
// tables. Each family lives in its own sub-package (models/qwen3, ...).
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
	// Rows, when set, takes rows [Rows[0], Rows[1]) of the checkpoint
	// tensor (a block of an LM head); Shape is the block's shape.
	Rows *[2]int
}

// Place is where a unit's weights live (residency.Place's values).
type Place string

// The placements.
const (
	// Resident weights are uploaded to the backend once, at load.
	Resident Place = "resident"
	// Streamed weights stay in pinned host memory; a layering executor
	// copies them into a slot before each use (Unit.BindSlots, Unit.Use).
	Streamed Place = "streamed"
	// Host weights stay in host memory and are read there (the embedding
	// table, whose rows are gathered on the host).
	Host Place = "host"
)

// Unit is one unit of weights (a layer, a head, an embedding table): its
// tensors packed into one flat host blob, and their backend tensors bound.
type Unit struct {
	Name  string
	Blob  *weights.Blob
	Place Place

	dsts   []*backend.Tensor // bound specs' fields, in blob order
	derive func() error      // recomputes views of the bound tensors
	slots  [][]backend.Tensor
}

// Streamed reports whether the unit's weights are streamed through slots.
func (u *Unit) Streamed() bool { return u.Place == Streamed }

// BindSlots prepares a streamed unit for n slots: view(s, e) returns the
// tensor that e's bytes become when the blob is copied into slot s.
func (u *Unit) BindSlots(n int, view func(slot int, e weights.Entry) (backend.Tensor, error)) error {
	if u.Place != Streamed {
		return fmt.Errorf("models: unit %s is %s, not streamed", u.Name, u.Place)
	}
	u.slots = make([][]backend.Tensor, n)
	for s := range n {
		u.slots[s] = make([]backend.Tensor, len(u.dsts))
		for i, e := range u.Blob.Entries {
			t, err := view(s, e)
			if err != nil {
				return fmt.Errorf("models: unit %s, slot %d: %w", u.Name, s, err)
			}
			u.slots[s][i] = t
		}
	}
	return nil
}

// BindSlot (re)binds a streamed unit's tensors in slot index i (growing
// the table), e.g. to a slot of its own after a promotion.
func (u *Unit) BindSlot(i int, view func(e weights.Entry) (backend.Tensor, error)) error {
	if u.Place != Streamed {
		return fmt.Errorf("models: unit %s is %s, not streamed", u.Name, u.Place)
	}
	for len(u.slots) <= i {
		u.slots = append(u.slots, nil)
	}
	ts := make([]backend.Tensor, len(u.dsts))
	for k, e := range u.Blob.Entries {
		t, err := view(e)
		if err != nil {
			return fmt.Errorf("models: unit %s, slot %d: %w", u.Name, i, err)
		}
		ts[k] = t
	}
	u.slots[i] = ts
	return nil
}

// DropSlot forgets the tensors bound in slot index i and returns them, for
// the caller to free (a promotion slot that goes away with its inference).
func (u *Unit) DropSlot(i int) []backend.Tensor {
	if i < 0 || i >= len(u.slots) {
		return nil
	}
	ts := u.slots[i]
	u.slots[i] = nil
	return ts
}

// Use points a streamed unit's fields at its weights in slot s (the ops
// queued afterwards read that slot). Resident and host units ignore it.
func (u *Unit) Use(slot int) error {
	if u.Place != Streamed {
		return nil
	}
	if slot < 0 || slot >= len(u.slots) || u.slots[slot] == nil {
		return fmt.Errorf("models: unit %s has no weights bound in slot %d (BindSlots made %d)", u.Name, slot, len(u.slots))
	}
	for i, d := range u.dsts {
		*d = u.slots[slot][i]
	}
	if u.derive != nil {
		return u.derive()
	}
	return nil
}

// Loader loads units from a checkpoint onto a backend, placing each as
// Place says.
type Loader struct {
	Backend    backend.Backend
	Checkpoint *safetensors.Checkpoint
	// Place says where the unit named name lives; nil means every unit is
	// resident.
	Place func(name string) Place
	// HostAlloc allocates the blobs of streamed units (memory that can be
	// page-locked); nil means weights.AlignedAlloc.
	HostAlloc weights.Allocator
	// HeadBlocks cuts an LM head into that many blocks of rows, one unit
	// each ("head.0" ...), as the residency planner does; 0 or 1 keeps
	// one "head" unit.
	HeadBlocks int
	// Units are every unit loaded, in load order.
	Units []*Unit
}

// NewLoader returns a Loader that keeps every unit resident on be.
func NewLoader(be backend.Backend, ck *safetensors.Checkpoint) *Loader {
	return &Loader{Backend: be, Checkpoint: ck}
}

// PlaceOf is where the unit named name lives.
func (l *Loader) PlaceOf(name string) Place {
	if l.Place == nil {
		return Resident
	}
	return l.Place(name)
}

// LoadUnit loads one unit resident on be (NewLoader(be, ck).Load).
func LoadUnit(be backend.Backend, ck *safetensors.Checkpoint, name, prefix string, specs []Spec) (*Unit, error) {
	return NewLoader(be, ck).Load(name, prefix, specs, nil)
}

// Load checks every spec against the checkpoint (presence, float dtype,
// shape), packs the present tensors into one flat blob named name, and
// binds each spec's Dst: for a resident unit to a backend weight over that
// blob, then runs derive (views of the bound tensors, e.g. a fused
// projection split into rows; nil for none). A streamed unit's fields stay
// nil until Use, which runs derive again for its slot; a host unit's stay
// nil (the model reads its blob).
func (l *Loader) Load(name, prefix string, specs []Spec, derive func() error) (*Unit, error) {
	ck := l.Checkpoint
	place := l.PlaceOf(name)
	refs := make([]weights.Ref, 0, len(specs))
	present := make([]Spec, 0, len(specs))
	for _, s := range specs {
		full := prefix + s.Name
		if s.Optional && !ck.Has(full) {
			continue
		}
		want := s.Shape
		if s.Rows != nil {
			info, err := ck.Tensor(full)
			if err != nil {
				return nil, fmt.Errorf("loading %s: %w", name, err)
			}
			if len(info.Shape) == 0 || s.Rows[0] < 0 || s.Rows[1] > info.Shape[0] || s.Rows[1]-s.Rows[0] != s.Shape[0] {
				return nil, fmt.Errorf("loading %s: rows %v of tensor %q %v do not make %v", name, *s.Rows, full, info.Shape, s.Shape)
			}
			want = append([]int{info.Shape[0]}, s.Shape[1:]...)
		}
		info, err := ck.Expect(full, tensor.Invalid, want...)
		if err != nil {
			return nil, fmt.Errorf("loading %s: %w", name, err)
		}
		if !info.DType.IsFloat() || info.DType == tensor.F64 {
			return nil, fmt.Errorf("loading %s: tensor %q has dtype %v, want F32, F16 or BF16", name, full, info.DType)
		}
		ref := weights.Ref{Local: s.Name, Checkpoint: full}
		if s.Rows != nil {
			ref.Rows = s.Rows
		}
		refs = append(refs, ref)
		present = append(present, s)
	}
	var alloc weights.Allocator
	switch place {
	case Streamed:
		alloc = l.HostAlloc
	case Resident, Host:
	default:
		return nil, fmt.Errorf("loading %s: unknown placement %q", name, place)
	}
	blob, err := weights.Pack(name, ck, refs, alloc)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", name, err)
	}
	u := &Unit{Name: name, Blob: blob, Place: place, derive: derive}
	for _, s := range present {
		u.dsts = append(u.dsts, s.Dst)
	}
	l.Units = append(l.Units, u)
	if place != Resident {
		return u, nil // streamed: bound per slot; host: read by the model
	}
	for _, s := range present {
		e, data, err := blob.Tensor(s.Name)
		if err != nil {
			return nil, err
		}
		t, err := l.Backend.Weight("weights", e.DType, e.Shape, data)
		if err != nil {
			return nil, fmt.Errorf("loading %s: binding %s: %w", name, s.Name, err)
		}
		*s.Dst = t
	}
	if derive != nil {
		if err := derive(); err != nil {
			return nil, fmt.Errorf("loading %s: %w", name, err)
		}
	}
	return u, nil
}

// Runner runs a unit's compute where the unit's weights are: in place for
// resident units, after a copy into a slot for streamed ones (a layering
// executor). Model code calls Do for each unit it computes, in order.
type Runner interface {
	// Do queues run, the ops that read u's weights, once u's fields point
	// at them (Unit.Use).
	Do(u *Unit, run func() error) error
}

// Do runs run through r, or directly when r is nil (every unit resident).
func Do(r Runner, u *Unit, run func() error) error {
	if r == nil {
		return run()
	}
	return r.Do(u, run)
}

// Direct reports whether r runs each unit's compute at once, in place:
// r is nil, or says so (a Runner with a Direct method). Only then may a
// model capture a pass in a graph: a layering executor that streams or
// times units must see every compute.
func Direct(r Runner) bool {
	if r == nil {
		return true
	}
	d, ok := r.(interface{ Direct() bool })
	return ok && d.Direct()
}

// ErrBadInput is wrapped by errors about model inputs (token ids out of
// range, sequences too long).
var ErrBadInput = errors.New("bad model input")

// ErrUnsupported is wrapped by errors about valid inputs the loaded model
// does not take (a question for a model without VQA).
var ErrUnsupported = errors.New("not supported by this model")
