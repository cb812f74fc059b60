// Package models holds what every model family shares: binding checkpoint
// tensors to backend weights, one flat blob per unit, where each unit's
// weights live (Loader), how a unit's compute is run (Runner), and rotary
// tables. Each family lives in its own sub-package (models/qwen3, ...).
package models

import (
	"errors"
	"fmt"
	"slices"

	"vlanode/backend"
	"vlanode/placement"
	"vlanode/safetensors"
	"vlanode/tensor"
	"vlanode/weights"
	"vlanode/weights/bf16z"
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
	// Part is the sub-layer shard the tensor belongs to (LoadParts packs
	// one blob per part); Whole in a table of one unit.
	Part placement.Part
	// Split is how the tensor divides when its part is split between the
	// CPU and the GPU.
	Split placement.Axis
	// Table marks a 2-D tensor that is read by rows, not multiplied by
	// every row (an embedding or position table).
	Table bool
}

// Unit is one unit of weights (a layer or a part of one, a head, an
// embedding table): its tensors packed into one flat host blob, and their
// backend tensors bound. Where its weights live (Weights) is fixed at
// load: resident weights are uploaded to the backend once; streamed ones
// stay in pinned host memory and a layering executor copies them into a
// slot or a home before each use, where UseAt binds them; host ones stay in
// host memory and are read there.
type Unit struct {
	ID      placement.ID
	Name    string // ID.String(), for messages
	Blob    *weights.Blob
	Weights placement.Weights
	// Z is the blob compressed, for a streamed unit that streams
	// compressed (Compress): Blob then keeps only its layout (Entries),
	// its bytes released, and the executor copies Z.Data and decodes it.
	Z *bf16z.Unit
	// ZShares are, by the CPU's cut, the GPU's share of the unit (Share)
	// compressed, for a unit the CPU shares (its raw blob stays).
	ZShares map[int]*bf16z.Unit
	// hostRead says the model reads some of the blob's bytes on the host
	// (a position table, Spec.Table): they are never released.
	hostRead bool

	dsts   []*backend.Tensor // bound specs' fields, in blob order
	splits []placement.Axis  // how each entry divides in a CPU/GPU split
	derive func() error      // recomputes views of the bound tensors
	// at are the views UseAt bound (a DFB slot, a home, the GPU's share of
	// a split in a slot), by the key it was given.
	at map[string][]backend.Tensor
	// host are the blob's tensors on a CPU engine's backend.
	host   []backend.Tensor
	hostBE backend.Backend
	// split is the CPU/GPU split of the compute in progress (Split).
	split *Split
	// shares are the GPU's shares laid out by Share, by the CPU's cut.
	shares map[int]share
}

// share is the GPU's share of a unit at one cut (Unit.Share).
type share struct {
	entries []weights.Entry
	rects   []weights.Rect
	bytes   int64
}

// Streamed reports whether the unit's weights are streamed through slots.
func (u *Unit) Streamed() bool { return u.Weights == placement.Streamed }

// UseAt points the unit's fields at views of its weights where the
// executor put them: a DFB slot, a home of its own, or a slot holding the
// GPU's share of a split (entries: the share's layout, from Share; nil for
// the whole blob). view makes each tensor the first time key is seen; the
// views are kept for the next uses of key.
func (u *Unit) UseAt(key string, entries []weights.Entry, view func(e weights.Entry) (backend.Tensor, error)) error {
	if entries == nil {
		entries = u.Blob.Entries
	}
	if len(entries) != len(u.dsts) {
		return fmt.Errorf("models: unit %s: %d entries for %d tensors", u.Name, len(entries), len(u.dsts))
	}
	ts, ok := u.at[key]
	if !ok {
		ts = make([]backend.Tensor, len(entries))
		for i, e := range entries {
			t, err := view(e)
			if err != nil {
				return fmt.Errorf("models: unit %s at %s: %w", u.Name, key, err)
			}
			ts[i] = t
		}
		if u.at == nil {
			u.at = map[string][]backend.Tensor{}
		}
		u.at[key] = ts
	}
	for i, d := range u.dsts {
		*d = ts[i]
	}
	if u.derive != nil {
		return u.derive()
	}
	return nil
}

// Replace moves the unit's weights to w (another plan's placement of the
// same blob): a unit that becomes resident gets backend weights over its
// blob (uploaded where the backend copies weights; derive runs again), one
// that stops being resident has them freed on be, and the views that
// UseAt bound (slots and homes of an executor that is going away) are
// freed in any case. Host units stay host. The blob's bytes must be
// there (Loader.Replaceable keeps them).
func (u *Unit) Replace(be backend.Backend, w placement.Weights) error {
	for key, ts := range u.at {
		for _, t := range ts {
			be.Free(t)
		}
		delete(u.at, key)
	}
	switch {
	case u.Weights == placement.Host || w == placement.Host:
		if u.Weights != w {
			return fmt.Errorf("models: unit %s: %s weights cannot become %s", u.Name, u.Weights, w)
		}
		return nil
	case w != placement.Resident && w != placement.Streamed:
		return fmt.Errorf("models: unit %s: unknown placement %q", u.Name, w)
	case u.Weights == w && w == placement.Resident:
		return nil
	case u.Weights == placement.Resident:
		for _, d := range u.dsts {
			if *d != nil {
				be.Free(*d)
			}
		}
	}
	for _, d := range u.dsts {
		*d = nil
	}
	u.Weights = w
	if w != placement.Resident {
		return nil
	}
	if len(u.Blob.Entries) > 0 && len(u.Blob.Data) == 0 {
		return fmt.Errorf("models: unit %s: its host bytes are gone: load it Replaceable", u.Name)
	}
	for i, e := range u.Blob.Entries {
		t, err := be.Weight("weights", e.DType, e.Shape, u.Blob.Data[e.Offset:e.Offset+e.Size])
		if err != nil {
			return fmt.Errorf("models: unit %s: binding %s: %w", u.Name, e.Name, err)
		}
		*u.dsts[i] = t
	}
	if u.derive != nil {
		return u.derive()
	}
	return nil
}

// DropAt forgets the views bound at key and returns them, for the caller
// to free (a home that went away).
func (u *Unit) DropAt(key string) []backend.Tensor {
	ts := u.at[key]
	delete(u.at, key)
	return ts
}

// Share is the GPU's share of the unit when the CPU takes the first c of
// its split dimension: the share's tensors laid out as they land in a slot
// (entries, in blob order), the rectangles of the blob to copy there, and
// the bytes they take. Tensors split by rows keep rows [c, n), those split
// by columns columns [c, n); the others are copied whole. Each cut is laid
// out once (the executor asks at every pass): the slices are shared, not
// to be changed.
func (u *Unit) Share(c int) ([]weights.Entry, []weights.Rect, int64, error) {
	if sh, ok := u.shares[c]; ok {
		return sh.entries, sh.rects, sh.bytes, nil
	}
	entries, rects, size, err := u.layoutShare(c)
	if err != nil {
		return nil, nil, 0, err
	}
	if u.shares == nil {
		u.shares = map[int]share{}
	}
	u.shares[c] = share{entries, rects, size}
	return entries, rects, size, nil
}

// layoutShare lays out the GPU's share at cut c (Share).
func (u *Unit) layoutShare(c int) ([]weights.Entry, []weights.Rect, int64, error) {
	specs := make([]weights.Spec, len(u.Blob.Entries))
	for i, e := range u.Blob.Entries {
		shape := append([]int{}, e.Shape...)
		switch u.splits[i] {
		case placement.SplitRows:
			if c <= 0 || c >= shape[0] {
				return nil, nil, 0, fmt.Errorf("models: unit %s: split %d of %s's %d rows", u.Name, c, e.Name, shape[0])
			}
			shape[0] -= c
		case placement.SplitCols:
			if len(shape) != 2 || c <= 0 || c >= shape[1] {
				return nil, nil, 0, fmt.Errorf("models: unit %s: split %d of %s's columns %v", u.Name, c, e.Name, shape)
			}
			shape[1] -= c
		}
		specs[i] = weights.Spec{Name: e.Name, DType: e.DType, Shape: shape}
	}
	entries, size := weights.Layout(specs)
	rects := make([]weights.Rect, len(entries))
	for i, e := range u.Blob.Entries {
		var r weights.Rect
		var err error
		switch u.splits[i] {
		case placement.SplitRows:
			if len(e.Shape) == 1 {
				el := int64(e.DType.Size())
				w := int64(e.Shape[0]-c) * el
				r = weights.Rect{SrcOffset: e.Offset + int64(c)*el, SrcPitch: w, DstOffset: entries[i].Offset, DstPitch: w, Width: w, Height: 1}
			} else {
				r, err = e.RowRect(c, e.Shape[0], entries[i].Offset)
			}
		case placement.SplitCols:
			r, err = e.ColumnRect(c, e.Shape[1], entries[i].Offset)
		default:
			r = weights.Rect{SrcOffset: e.Offset, SrcPitch: e.Size, DstOffset: entries[i].Offset, DstPitch: e.Size, Width: e.Size, Height: 1}
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("models: unit %s: %w", u.Name, err)
		}
		rects[i] = r
	}
	return entries, rects, size, nil
}

// Splits says whether the unit's tensors divide between the CPU and the
// GPU (some tensor splits by rows or columns).
func (u *Unit) Splits() bool {
	for _, a := range u.splits {
		if a != placement.Shared {
			return true
		}
	}
	return false
}

// HostTensors are the unit's tensors on be, a CPU engine's backend, over
// the blob's host bytes (the backend aliases them: nothing is copied), in
// the order of the unit's table; made once.
func (u *Unit) HostTensors(be backend.Backend) ([]backend.Tensor, error) {
	if u.host != nil && u.hostBE == be {
		return u.host, nil
	}
	ts := make([]backend.Tensor, len(u.Blob.Entries))
	for i, e := range u.Blob.Entries {
		t, err := be.Weight("host-weights", e.DType, e.Shape, u.Blob.Data[e.Offset:e.Offset+e.Size])
		if err != nil {
			return nil, fmt.Errorf("models: unit %s on the CPU: %w", u.Name, err)
		}
		ts[i] = t
	}
	u.host, u.hostBE = ts, be
	return ts, nil
}

// Split is the CPU/GPU split of a unit's compute in progress: what the CPU
// takes, where it computes, and the executor's hooks that order the two
// engines (layering.Shard).
type Split struct {
	// CPU is the CPU's share of the split dimension; Whole says it takes
	// everything (the GPU reads none of the unit's weights).
	CPU   int
	Whole bool
	// Backend is the CPU engine's backend and Host the unit's tensors on
	// it (HostTensors), in the unit's table order.
	Backend backend.Backend
	Host    []backend.Tensor
	// Offload runs a task on the CPU engine, in order; Ready makes the
	// device's later work wait for the GPU's share of the weights; Join
	// queues fn (the Receive of the CPU's result) once the slot is
	// released.
	Offload func(task func(computing func()) error) error
	Ready   func() error
	Join    func(fn func() error) error
}

// SetSplit sets (or, with nil, clears) the split of the compute in
// progress; the executor's adapter calls it around the unit's compute.
func (u *Unit) SetSplit(sp *Split) { u.split = sp }

// Split is the split of the compute in progress, nil when the GPU
// computes the unit alone.
func (u *Unit) Split() *Split { return u.split }

// Loader loads units from a checkpoint onto a backend, placing each as
// Place says.
type Loader struct {
	Backend    backend.Backend
	Checkpoint *safetensors.Checkpoint
	// Place says where the weights of the unit id live; nil means every
	// unit is resident.
	Place func(id placement.ID) placement.Weights
	// HostAlloc allocates the blobs of streamed units (memory that can be
	// page-locked); nil means weights.AlignedAlloc.
	HostAlloc weights.Allocator
	// HeadBlocks cuts an LM head into that many blocks of rows, one unit
	// each ("head.0" ...), as the residency planner does; 0 or 1 keeps
	// one "head" unit.
	HeadBlocks int
	// Replaceable allocates resident units' blobs with HostAlloc too, so
	// that Unit.Replace can stream them later; their host bytes MUST then
	// be kept.
	Replaceable bool
	// Units are every unit loaded, in load order.
	Units []*Unit
}

// NewLoader returns a Loader that keeps every unit resident on be.
func NewLoader(be backend.Backend, ck *safetensors.Checkpoint) *Loader {
	return &Loader{Backend: be, Checkpoint: ck}
}

// PlaceOf is where the weights of unit id live.
func (l *Loader) PlaceOf(id placement.ID) placement.Weights {
	if l.Place == nil {
		return placement.Resident
	}
	return l.Place(id)
}

// LoadUnit loads one unit resident on be (NewLoader(be, ck).Load).
func LoadUnit(be backend.Backend, ck *safetensors.Checkpoint, id placement.ID, prefix string, specs []Spec) (*Unit, error) {
	return NewLoader(be, ck).Load(id, prefix, specs, nil)
}

// Load loads the unit id from one table of specs (every spec in part
// Whole): see LoadParts.
func (l *Loader) Load(id placement.ID, prefix string, specs []Spec, derive func() error) (*Unit, error) {
	for _, s := range specs {
		if s.Part != placement.Whole {
			return nil, fmt.Errorf("loading %s: spec %s belongs to part %q: use LoadParts", id, s.Name, s.Part)
		}
	}
	var d func(placement.Part) error
	if derive != nil {
		d = func(placement.Part) error { return derive() }
	}
	us, err := l.LoadParts(id, prefix, specs, d)
	if err != nil {
		return nil, err
	}
	return us[0], nil
}

// LoadParts loads a block's table of specs as one unit per part, in the
// order the parts first appear (id with Part set; one unit id when every
// spec is Whole). For each part it checks the specs against the checkpoint
// (presence, float dtype, shape), packs the present tensors into one flat
// blob, and binds each spec's Dst: for a resident unit to a backend weight
// over that blob, then runs derive for the part (views of the bound
// tensors, e.g. a fused projection split into rows; nil for none). A
// streamed unit's fields stay nil until Use, which runs derive again for
// its slot; a host unit's stay nil (the model reads its blob).
func (l *Loader) LoadParts(id placement.ID, prefix string, specs []Spec, derive func(placement.Part) error) ([]*Unit, error) {
	var out []*Unit
	for _, part := range SpecParts(specs) {
		pid := id
		pid.Part = part
		var mine []Spec
		for _, s := range specs {
			if s.Part == part {
				mine = append(mine, s)
			}
		}
		var d func() error
		if derive != nil {
			d = func() error { return derive(part) }
		}
		u, err := l.load(pid, prefix, mine, d)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// SpecParts lists the parts of a table of specs, in order of first
// appearance.
func SpecParts(specs []Spec) []placement.Part {
	var parts []placement.Part
	for _, s := range specs {
		if !slices.Contains(parts, s.Part) {
			parts = append(parts, s.Part)
		}
	}
	return parts
}

// load loads one part's specs as the unit id.
func (l *Loader) load(id placement.ID, prefix string, specs []Spec, derive func() error) (*Unit, error) {
	ck := l.Checkpoint
	name := id.String()
	place := l.PlaceOf(id)
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
	case placement.Streamed:
		alloc = l.HostAlloc
	case placement.Resident:
		if l.Replaceable {
			alloc = l.HostAlloc // it may be streamed after Unit.Replace
		}
	case placement.Host:
	default:
		return nil, fmt.Errorf("loading %s: unknown placement %q", name, place)
	}
	blob, err := weights.Pack(name, ck, refs, alloc)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", name, err)
	}
	u := &Unit{ID: id, Name: name, Blob: blob, Weights: place, derive: derive}
	for _, s := range present {
		u.dsts = append(u.dsts, s.Dst)
		u.splits = append(u.splits, s.Split)
		u.hostRead = u.hostRead || s.Table
	}
	l.Units = append(l.Units, u)
	if place != placement.Resident {
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
