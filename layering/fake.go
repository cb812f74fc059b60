package layering

import (
	"errors"
	"fmt"

	"vlanode/placement"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// Fake is a Device that simulates a GPU with one copy engine and one
// compute engine: an operation starts when its stream has reached it and
// its engine is free, and lasts the time Copy or Exe gives it. Times are
// computed as work is queued (each stream in order, Wait reading the
// event's latest record, as CUDA does), so a Run's timeline is exact and
// deterministic. With one stream per engine, as the executor uses them,
// engine order is queue order.
type Fake struct {
	// Copy is the duration in ms of copying a blob; Exe that of a
	// unit's compute; CPU that of a CPU engine's task for a unit; Hop
	// one hand-off between the GPU and the CPU. Nil means 0.
	Copy func(blob string, bytes int64) float64
	Exe  func(unit string) float64
	CPU  func(unit string) float64
	Hop  float64
	// Dec is the duration in ms of decoding a compressed unit of raw
	// bytes into its slot (Decoder), on a decode engine of its own. Nil
	// means 0.
	Dec func(unit string, raw int64) float64
	// SlotBudget, when positive, refuses AllocSlot past that many bytes.
	SlotBudget int64
	// Corrupt names units whose decodes report a failed tile (the GPU
	// kernel's status word), for tests of how failures surface.
	Corrupt map[string]bool

	// Timeline is every copy, decode and compute, in the order queued.
	Timeline []Op
	// SlotBytes is the bytes of every slot allocated; StagingBytes of
	// every staging buffer (AllocStaging).
	SlotBytes, StagingBytes int64

	streams       []fakeStream
	events        []fakeEvent
	slots         []int64 // bytes of each slot
	pinned        map[*weights.Blob]bool
	copyFree, exe float64 // when each engine is next free
	cpuFree       float64 // when the CPU engine is next free
	decFree       float64 // when the decode engine is next free
	staging       map[Slot]bool
	status        DecodeStatus // the decodes' failures since the last DecodeStatus
	// decoded are the decodes on a stream of their own not yet charged to
	// the compute engine, by where they wrote (the compute that reads it
	// pays them: Decode).
	decoded map[fakeAt][2]float64
}

// fakeAt is a place in a slot: where a decode writes, a compute reads.
type fakeAt struct {
	slot Slot
	off  int64
}

// OpKind is what an Op did.
type OpKind string

// The kinds of Op.
const (
	OpCopy    OpKind = "copy"
	OpCompute OpKind = "compute"
	OpCPU     OpKind = "cpu"    // a task of the CPU engine
	OpDecode  OpKind = "decode" // a compressed unit expanded into a slot
)

// Op is one operation on the Fake's timeline.
type Op struct {
	Kind   OpKind
	Stream string
	// Unit is the blob's name for a copy, the unit's for a compute.
	Unit string
	Slot Slot
	// Offset is where in the slot a copy or a decode writes or a compute
	// reads; Bytes is what a copy or a decode writes.
	Offset, Bytes int64
	// Src is the staging buffer a decode reads (NoSlot for the others).
	Src Slot
	// Start and End are in ms from the Fake's creation.
	Start, End float64
}

type fakeStream struct {
	name string
	tail float64 // when the last queued op ends
}

type fakeEvent struct {
	name     string
	at       float64
	recorded bool
}

var (
	_ Device  = (*Fake)(nil)
	_ Decoder = (*Fake)(nil)
)

// NewFake returns a Fake whose compute stream exists.
func NewFake(copyMs func(blob string, bytes int64) float64, exeMs func(unit string) float64) *Fake {
	return &Fake{Copy: copyMs, Exe: exeMs, streams: []fakeStream{{name: "compute"}}, pinned: map[*weights.Blob]bool{},
		staging: map[Slot]bool{}, status: DecodeStatus{FirstJob: -1}}
}

// ComputeStream is stream 0, "compute".
func (f *Fake) ComputeStream() Stream { return 0 }

// NewStream makes a stream.
func (f *Fake) NewStream(name string) (Stream, error) {
	f.streams = append(f.streams, fakeStream{name: name})
	return Stream(len(f.streams) - 1), nil
}

// NewEvent makes an event.
func (f *Fake) NewEvent(name string) (Event, error) {
	f.events = append(f.events, fakeEvent{name: name})
	return Event(len(f.events) - 1), nil
}

func (f *Fake) stream(s Stream) (*fakeStream, error) {
	if s < 0 || int(s) >= len(f.streams) {
		return nil, fmt.Errorf("fake: no stream %d", s)
	}
	return &f.streams[s], nil
}

func (f *Fake) event(e Event) (*fakeEvent, error) {
	if e < 0 || int(e) >= len(f.events) {
		return nil, fmt.Errorf("fake: no event %d", e)
	}
	return &f.events[e], nil
}

// Record marks e at s's current end.
func (f *Fake) Record(e Event, s Stream) error {
	ev, err := f.event(e)
	if err != nil {
		return err
	}
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	ev.at, ev.recorded = st.tail, true
	return nil
}

// Wait holds s's later work until e's latest record; an event never
// recorded is already reached.
func (f *Fake) Wait(s Stream, e Event) error {
	ev, err := f.event(e)
	if err != nil {
		return err
	}
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	if ev.recorded {
		st.tail = max(st.tail, ev.at)
	}
	return nil
}

// AllocSlot makes a slot, within SlotBudget.
func (f *Fake) AllocSlot(bytes int64) (Slot, error) {
	if bytes <= 0 || bytes%weights.Align != 0 {
		return NoSlot, fmt.Errorf("fake: slot of %d bytes (positive, a multiple of %d)", bytes, weights.Align)
	}
	if f.SlotBudget > 0 && f.SlotBytes+bytes > f.SlotBudget {
		return NoSlot, fmt.Errorf("fake: %s of %d bytes over the budget of %d", SlotPurpose, f.SlotBytes+bytes, f.SlotBudget)
	}
	f.slots = append(f.slots, bytes)
	f.SlotBytes += bytes
	return Slot(len(f.slots) - 1), nil
}

// FreeSlot gives a slot's bytes back to SlotBudget.
func (f *Fake) FreeSlot(s Slot) error {
	if s < 0 || int(s) >= len(f.slots) || f.slots[s] == 0 {
		return fmt.Errorf("fake: no live slot %d", s)
	}
	if f.staging[s] {
		f.StagingBytes -= f.slots[s]
	} else {
		f.SlotBytes -= f.slots[s]
	}
	f.slots[s] = 0
	return nil
}

// AllocStaging makes a staging buffer, counted in StagingBytes (and,
// with the slots, within SlotBudget).
func (f *Fake) AllocStaging(bytes int64) (Slot, error) {
	if bytes <= 0 || bytes%weights.Align != 0 {
		return NoSlot, fmt.Errorf("fake: staging of %d bytes (positive, a multiple of %d)", bytes, weights.Align)
	}
	if f.SlotBudget > 0 && f.SlotBytes+f.StagingBytes+bytes > f.SlotBudget {
		return NoSlot, fmt.Errorf("fake: %s of %d bytes over the budget of %d", StagingPurpose, f.SlotBytes+f.StagingBytes+bytes, f.SlotBudget)
	}
	f.slots = append(f.slots, bytes)
	f.StagingBytes += bytes
	s := Slot(len(f.slots) - 1)
	f.staging[s] = true
	return s, nil
}

// Decode times the decode of z from staging src into slot dst at off on
// stream s, on the decode engine, after the decodes before it; a unit
// named in Corrupt reports its first job failed. The decode kernel shares
// the GPU with the computes (residency's simulate3): on a stream other
// than the compute stream, the part of it during which the compute engine
// was busy (the compute before the one that reads dst at off ran past the
// decode's start) is added to that reading compute.
func (f *Fake) Decode(dst Slot, off int64, src Slot, z *bf16z.Unit, base int, s Stream) error {
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	switch {
	case dst < 0 || int(dst) >= len(f.slots) || f.staging[dst]:
		return fmt.Errorf("fake: decode into %d, not a slot", dst)
	case src < 0 || int(src) >= len(f.slots) || !f.staging[src]:
		return fmt.Errorf("fake: decode from %d, not a staging buffer", src)
	case off < 0 || off+z.RawSize > f.slots[dst]:
		return fmt.Errorf("fake: unit %s decodes %d bytes at %d of slot %d (%d bytes)", z.Name, z.RawSize, off, dst, f.slots[dst])
	case z.Size() > f.slots[src]:
		return fmt.Errorf("fake: unit %s has %d compressed bytes, staging %d holds %d", z.Name, z.Size(), src, f.slots[src])
	}
	d := 0.0
	if f.Dec != nil {
		d = f.Dec(z.Name, z.RawSize)
	}
	start := max(st.tail, f.decFree)
	st.tail, f.decFree = start+d, start+d
	if s != f.ComputeStream() {
		if f.decoded == nil {
			f.decoded = map[fakeAt][2]float64{}
		}
		f.decoded[fakeAt{dst, off}] = [2]float64{start, start + d}
	}
	f.Timeline = append(f.Timeline, Op{Kind: OpDecode, Stream: st.name, Unit: z.Name, Slot: dst, Offset: off, Bytes: z.RawSize, Src: src, Start: start, End: start + d})
	if f.Corrupt[z.Name] {
		if f.status.Failed == 0 || base < f.status.FirstJob {
			f.status.FirstJob = base
		}
		f.status.Failed++
		f.status.Why = "checksum mismatch"
	}
	return nil
}

// DecodeStatus returns the failures since the last call and clears them.
func (f *Fake) DecodeStatus(s Stream) (DecodeStatus, error) {
	if _, err := f.stream(s); err != nil {
		return DecodeStatus{}, err
	}
	st := f.status
	f.status = DecodeStatus{FirstJob: -1}
	return st, nil
}

// PinHost marks b pinned; pinning twice is an error, as with
// cuMemHostRegister.
func (f *Fake) PinHost(b *weights.Blob) error {
	if f.pinned[b] {
		return fmt.Errorf("fake: blob %s pinned twice", b.Name)
	}
	f.pinned[b] = true
	return nil
}

// CopyAsync copies a pinned blob into a slot that holds it.
func (f *Fake) CopyAsync(dst Slot, src *weights.Blob, s Stream) error {
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	switch {
	case dst < 0 || int(dst) >= len(f.slots):
		return fmt.Errorf("fake: no slot %d", dst)
	case !f.pinned[src]:
		return fmt.Errorf("fake: blob %s is not pinned: the copy would not be asynchronous", src.Name)
	case src.Size() > f.slots[dst]:
		return fmt.Errorf("fake: blob %s (%d bytes) does not fit slot %d (%d bytes)", src.Name, src.Size(), dst, f.slots[dst])
	}
	f.queueCopy(st, dst, src.Name, src.Size(), 0, src.Size())
	return nil
}

// queueCopy times a copy of moved bytes of blob name on stream st, after
// the copies before it on any stream (one copy engine), writing span bytes
// of slot dst from offset on.
func (f *Fake) queueCopy(st *fakeStream, dst Slot, name string, moved, offset, span int64) {
	d := 0.0
	if f.Copy != nil {
		d = f.Copy(name, moved)
	}
	start := max(st.tail, f.copyFree)
	st.tail, f.copyFree = start+d, start+d
	f.Timeline = append(f.Timeline, Op{Kind: OpCopy, Stream: st.name, Unit: name, Slot: dst, Offset: offset, Bytes: span, Src: NoSlot, Start: start, End: start + d})
}

// CopyRectAsync copies a rectangle of a pinned blob into a slot: timed as
// a copy of its bytes.
func (f *Fake) CopyRectAsync(dst Slot, src *weights.Blob, r weights.Rect, s Stream) error {
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	switch {
	case dst < 0 || int(dst) >= len(f.slots):
		return fmt.Errorf("fake: no slot %d", dst)
	case !f.pinned[src]:
		return fmt.Errorf("fake: blob %s is not pinned: the copy would not be asynchronous", src.Name)
	}
	if err := r.Check(src.Size(), f.slots[dst]); err != nil {
		return fmt.Errorf("fake: blob %s into slot %d: %w", src.Name, dst, err)
	}
	f.queueCopy(st, dst, src.Name, r.Bytes(), r.DstOffset, (r.Height-1)*r.DstPitch+r.Width)
	return nil
}

// HostStart starts a CPU task of unit once s has reached this point and
// the hand-off of its input is done, when the CPU engine is free.
func (f *Fake) HostStart(s Stream, unit placement.ID) error {
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	d := 0.0
	if f.CPU != nil {
		d = f.CPU(unit.String())
	}
	start := max(st.tail+f.Hop, f.cpuFree)
	f.cpuFree = start + d
	f.Timeline = append(f.Timeline, Op{Kind: OpCPU, Stream: "cpu", Unit: unit.String(), Slot: NoSlot, Src: NoSlot, Start: start, End: start + d})
	return nil
}

// HostJoin makes s's later work wait for the CPU engine's last task and
// the hand-back of its result.
func (f *Fake) HostJoin(s Stream, _ placement.ID) error {
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	st.tail = max(st.tail, f.cpuFree+f.Hop)
	return nil
}

// Launch runs c.Run now (it queues work, on a real device) and places
// the compute on the timeline.
func (f *Fake) Launch(s Stream, c Compute) error {
	st, err := f.stream(s)
	if err != nil {
		return err
	}
	if c.Slot != NoSlot && (c.Slot < 0 || int(c.Slot) >= len(f.slots)) {
		return fmt.Errorf("fake: unit %s reads slot %d, which does not exist", c.Unit, c.Slot)
	}
	if c.Run != nil {
		if err := c.Run(c.Slot); err != nil {
			return err
		}
	}
	d := 0.0
	if f.Exe != nil {
		d = f.Exe(c.Unit)
	}
	if dec, ok := f.decoded[fakeAt{c.Slot, c.Offset}]; ok && c.Slot != NoSlot {
		// The decode of its weights, where the compute engine was busy.
		d += min(max(f.exe-dec[0], 0), dec[1]-dec[0])
		delete(f.decoded, fakeAt{c.Slot, c.Offset})
	}
	start := max(st.tail, f.exe)
	st.tail, f.exe = start+d, start+d
	f.Timeline = append(f.Timeline, Op{Kind: OpCompute, Stream: st.name, Unit: c.Unit, Slot: c.Slot, Offset: c.Offset, Src: NoSlot, Start: start, End: start + d})
	return nil
}

// Synchronize does nothing: the times are already known.
func (f *Fake) Synchronize() error { return nil }

// Elapsed is to's time minus from's.
func (f *Fake) Elapsed(from, to Event) (float64, error) {
	a, err := f.event(from)
	if err != nil {
		return 0, err
	}
	b, err := f.event(to)
	if err != nil {
		return 0, err
	}
	if !a.recorded || !b.recorded {
		return 0, fmt.Errorf("fake: elapsed between %s and %s: not both recorded", a.name, b.name)
	}
	return b.at - a.at, nil
}

// lastWrite is the latest of the timeline's writes that match keeps which
// finished by r's start, and those that ran while r ran (overwriting
// what r reads).
func (f *Fake) lastWrite(r Op, match func(w *Op) bool) (last *Op, during []*Op) {
	for i := range f.Timeline {
		w := &f.Timeline[i]
		if !match(w) {
			continue
		}
		switch {
		case w.Start < r.End && w.End > r.Start && w.End != w.Start:
			during = append(during, w)
		case w.End <= r.Start && (last == nil || w.End >= last.End):
			last = w
		}
	}
	return last, during
}

// Verify checks the DFB invariants on the timeline: every compute that
// reads a slot finds there, at its offset and from its start to its end,
// the blob of its own unit (blobs are named as their units), fully
// written by a copy or a decode, and no copy or decode into those bytes
// in flight. The bytes a compute reads are those its unit's last write to
// its offset wrote (a home in an arena is one range of it; the GPU's
// share of a split unit, copied as rectangles, is checked by its first).
// Every decode likewise finds its own unit's compressed bytes in its
// staging buffer, fully copied, and no copy into it in flight.
func (f *Fake) Verify() error {
	var errs []error
	overlaps := func(w *Op, lo, hi int64) bool { return w.Offset < hi && lo < w.Offset+max(w.Bytes, 1) }
	writes := func(w *Op) bool { return w.Kind == OpCopy || w.Kind == OpDecode }
	// held checks that last, the latest write before r, was of r's unit,
	// or reports format with args and what the place held.
	held := func(r Op, last *Op, format string, args ...any) {
		if last == nil || last.Unit != r.Unit {
			have := "nothing"
			if last != nil {
				have = last.Unit
			}
			errs = append(errs, fmt.Errorf(format, append(args, have)...))
		}
	}
	for _, d := range f.Timeline {
		if d.Kind != OpDecode {
			continue
		}
		at := fmt.Sprintf("staging %d", d.Src)
		// the latest copy into the staging buffer finished by the decode's start
		last, bad := f.lastWrite(d, func(w *Op) bool { return w.Kind == OpCopy && w.Slot == d.Src })
		for _, w := range bad {
			errs = append(errs, fmt.Errorf("%s: copy of %s [%g, %g] overwrites it while %s decodes [%g, %g]",
				at, w.Unit, w.Start, w.End, d.Unit, d.Start, d.End))
		}
		held(d, last, "%s: %s decodes at %g while it holds %s", at, d.Unit, d.Start)
	}
	for _, c := range f.Timeline {
		if c.Kind != OpCompute || c.Slot == NoSlot {
			continue
		}
		var own *Op // the unit's last write to the compute's offset before it
		for i := range f.Timeline {
			w := &f.Timeline[i]
			if writes(w) && w.Slot == c.Slot && w.Offset == c.Offset && w.Unit == c.Unit && w.End <= c.Start && (own == nil || w.End >= own.End) {
				own = w
			}
		}
		lo, hi := c.Offset, c.Offset+1
		if own != nil {
			hi = c.Offset + max(own.Bytes, 1)
		}
		at := fmt.Sprintf("slot %d", c.Slot)
		// the latest write into those bytes finished by c's start
		last, bad := f.lastWrite(c, func(w *Op) bool { return writes(w) && w.Slot == c.Slot && overlaps(w, lo, hi) })
		for _, w := range bad {
			errs = append(errs, fmt.Errorf("%s: %s of %s [%g, %g] overwrites it while %s computes [%g, %g]",
				at, w.Kind, w.Unit, w.Start, w.End, c.Unit, c.Start, c.End))
		}
		held(c, last, "%s: %s computes at %g while the slot holds %s", at, c.Unit, c.Start)
	}
	return errors.Join(errs...)
}

// Close does nothing; a Fake holds no resources.
func (f *Fake) Close() error { return nil }
