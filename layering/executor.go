package layering

import (
	"errors"
	"fmt"
	"time"

	"vlanode/placement"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// Mode is how the executor moves streamed units' weights.
type Mode int

// The modes (DESIGN.md, "Executor").
const (
	// Preload computes every unit in place: the caller loaded every unit
	// resident (a plan without a budget). No slots, no copies.
	Preload Mode = iota + 1
	// Sequential copies each streamed unit into one slot on the compute
	// stream, then computes it: copies never overlap computes (§IV-B).
	Sequential
	// Pipelined streams through two slots with the DFB protocol (§IV-C).
	Pipelined
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Preload:
		return "preload"
	case Sequential:
		return "sequential"
	case Pipelined:
		return "pipelined"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// slotsOf is the number of DFB slots a mode uses.
func (m Mode) slotsOf() int {
	switch m {
	case Sequential:
		return 1
	case Pipelined:
		return 2
	}
	return 0
}

// Unit is one flat weight blob and the computes that read it.
type Unit struct {
	// ID identifies the unit.
	ID placement.ID
	// Blob is the unit's host weights: streamed units are copied from it
	// into a slot, units with a home in a stage into the home, and the CPU
	// reads its share of a split unit there. Resident units need none.
	Blob *weights.Blob
	// Weights is the unit's placement in a pass that gives none
	// (Pass.Place): resident units compute in place, from the weights the
	// model loaded into VRAM once; streamed units go through the DFB
	// slots; host units compute in place from host memory.
	Weights placement.Weights
	// Z, when set, is the unit's blob compressed (bf16z): its whole copies
	// move Z.Data into a staging buffer and a decode expands it into the
	// slot or the home (the device must be a Decoder). Blob then gives the
	// layout; its Data may be released, unless the CPU computes a share
	// of the unit (it reads raw host weights). Only streamed units are
	// compressed.
	Z *bf16z.Unit
	// ZShares are, by the CPU's cut c, the GPU's share of the unit (the
	// layout Share(c) fills a slot with) compressed: a split turn at a cut
	// it holds copies and decodes that instead of the share's rectangles.
	ZShares map[int]*bf16z.Unit
	// Share, for a unit the CPU and the GPU can split, gives the GPU's
	// share when the CPU takes c of the split dimension: the rectangles of
	// the blob to copy into a slot and the bytes they fill there.
	Share func(c int) (rects []weights.Rect, bytes int64, err error)
	// Run queues the unit's compute; the shard says where its weights are
	// and what the CPU takes. Nil runs nothing (tests).
	Run func(Shard) error
}

// size is the unit's raw blob size: what a slot or a home holds.
func (u *Unit) size() int64 {
	if u.Z != nil {
		return u.Z.RawSize
	}
	return u.Blob.Size()
}

// hasRaw says whether the unit's raw host bytes are there (the CPU reads
// them; the share's rectangles are copied from them).
func (u *Unit) hasRaw() bool { return u.Blob != nil && u.Blob.Size() == u.size() && u.size() > 0 }

// streamed reports whether u goes through the slots in mode m by default.
func (u *Unit) streamed(m Mode) bool { return m != Preload && u.Weights == placement.Streamed }

// Pass is one sweep of a stage over its units: a vision pass, a prefill,
// one decode step, one Euler step.
type Pass struct {
	// Name labels the pass in profiles and errors, e.g. "decode.3".
	Name string
	// Stage groups passes for Runner.Skip, e.g. "decode".
	Stage string
	Units []*Unit
	// Place, when set, is each unit's placement in this pass (Units[i] is
	// placed Place[i]); nil takes each unit's Weights.
	Place []placement.Placement
	// After, when set, runs on the host once the pass's computes and the
	// copies that prefetch the next pass's first streamed units are queued
	// (e.g. read the logits and sample): waiting on the GPU there does not
	// hold the prefetch back.
	After func() error
}

// Repeat returns n passes named name.0 … name.(n-1) over the same units
// (decode steps, Euler steps).
func Repeat(name string, units []*Unit, n int) []Pass {
	out := make([]Pass, n)
	for i := range out {
		out[i] = Pass{Name: fmt.Sprintf("%s.%d", name, i), Stage: name, Units: units}
	}
	return out
}

// Config configures an Executor.
type Config struct {
	Mode Mode
	// Profile records a pair of timing events around every copy and every
	// compute, for Profile.Turns.
	Profile bool
	// SlotBytes, when positive, sizes the DFB slots (the plan's largest
	// streamed unit); 0 sizes them to the largest unit not resident.
	SlotBytes int64
	// StagingBytes, when positive, sizes the staging buffers of
	// compressed units (the plan's); 0 sizes them to the largest
	// compressed unit. A compressed unit larger than it is refused.
	StagingBytes int64
}

// Executor runs units on a Device in passes. It serves one goroutine at a
// time. Its streams, events and slots belong to the Device, which
// releases them at its Close.
type Executor struct {
	cfg   Config
	dev   Device
	known map[*Unit]bool

	compute Stream // the backend's stream: every compute
	copy    Stream // the copy stream (Pipelined); the compute stream otherwise

	slots     []Slot
	SlotBytes int64 // one slot's size: the largest streamed blob, aligned

	// One event per (stream, slot).
	dmaDone     []Event // [slot] on the copy stream: the slot holds its unit's blob
	computeDone []Event // [slot] on the compute stream: the slot's unit has run

	begin, end Event   // around a whole Run, on the compute stream
	marks      []Event // timing events for Profile, reused by every Run

	// homes are the units' homes of the current stage (they outlive a Run:
	// the next Run's first stage keeps those it needs); homeReady is each
	// unit's event recorded after the copy into its home (-1: none yet).
	homes     map[*Unit]home
	homeReady map[*Unit]Event
	// arenas are the allocations the homes are carved from, with the
	// number of homes each still holds.
	arenas map[Slot]int
	// engine is the CPU engine, started by the first offloaded task.
	engine *engine
	// startedAt is when the Run began, by the host's clock.
	startedAt time.Time

	// Compressed streaming (Unit.Z): one staging buffer per slot, used in
	// turn by the compressed copies in copy order (a ring of its own,
	// since entering copies use it too), and the decode stream.
	zdev         Decoder
	decode       Stream // the decode stream (Pipelined); the compute stream otherwise
	staging      []Slot
	StagingBytes int64 // one staging buffer's size: the largest compressed unit, aligned
	// One event per (stream, staging buffer).
	copied      []Event                       // [k] on the copy stream: staging k holds its unit's compressed bytes
	stagingFree []Event                       // [k] on the decode stream: staging k's decode has read it
	zblobs      map[*bf16z.Unit]*weights.Blob // what each compressed form's copies move
	nz          int                           // compressed copies queued so far (the ring's position)
	zJobs       int                           // jobs decoded since the last status read
	zRecs       []zDecodeRec
}

// zDecodeRec is one decode since the last status read: its unit, the
// compressed form decoded and the number its first job has in the status
// (Decoder.Decode's base).
type zDecodeRec struct {
	unit *Unit
	z    *bf16z.Unit
	base int
}

// New prepares an executor for units: it pins the host blobs of the
// streamed ones (once, here), allocates the slots sized to the largest
// streamed blob, and makes the copy stream and the events.
func New(dev Device, cfg Config, units []*Unit) (*Executor, error) {
	if cfg.Mode.slotsOf() == 0 && cfg.Mode != Preload {
		return nil, fmt.Errorf("layering: unknown mode %v", cfg.Mode)
	}
	e := &Executor{cfg: cfg, dev: dev, known: map[*Unit]bool{}, compute: dev.ComputeStream(),
		homes: map[*Unit]home{}, homeReady: map[*Unit]Event{}, arenas: map[Slot]int{}}
	e.copy, e.decode = e.compute, e.compute
	e.zblobs = map[*bf16z.Unit]*weights.Blob{}
	for _, u := range units {
		if err := e.add(u); err != nil {
			return nil, err
		}
	}
	var err error
	if e.begin, err = dev.NewEvent("begin"); err != nil {
		return nil, fmt.Errorf("layering: %w", err)
	}
	if e.end, err = dev.NewEvent("end"); err != nil {
		return nil, fmt.Errorf("layering: %w", err)
	}
	if cfg.SlotBytes > 0 && e.SlotBytes > 0 {
		if cfg.SlotBytes%weights.Align != 0 {
			return nil, fmt.Errorf("layering: slots of %d bytes: not a multiple of %d", cfg.SlotBytes, weights.Align)
		}
		e.SlotBytes = cfg.SlotBytes
	}
	if e.SlotBytes == 0 {
		return e, nil // nothing streamed
	}
	if err := e.allocSlots(); err != nil {
		return nil, err
	}
	if err := e.allocStaging(); err != nil {
		return nil, err
	}
	return e, nil
}

// Staging are the executor's staging buffers for compressed units (none
// when no unit is compressed).
func (e *Executor) Staging() []Slot { return append([]Slot(nil), e.staging...) }

// Slots are the executor's DFB slots, in the order turns use them (none
// when nothing is streamed).
func (e *Executor) Slots() []Slot { return append([]Slot(nil), e.slots...) }

// SetProfile turns the per-turn timing events (Config.Profile) on or off
// for the next Runs.
func (e *Executor) SetProfile(on bool) { e.cfg.Profile = on }

// Mode is the executor's mode.
func (e *Executor) Mode() Mode { return e.cfg.Mode }

// add checks and pins one unit and grows the slot size to hold it.
func (e *Executor) add(u *Unit) error {
	switch {
	case u == nil || u.ID.Module == "":
		return errors.New("layering: a unit without a name")
	case e.known[u]:
		return fmt.Errorf("layering: unit %s listed twice", u.ID)
	case u.Weights != placement.Streamed && u.Weights != placement.Resident && u.Weights != placement.Host:
		return fmt.Errorf("layering: unit %s: unknown placement %q", u.ID, u.Weights)
	}
	e.known[u] = true
	e.homeReady[u] = -1
	if (u.Z != nil || len(u.ZShares) > 0) && !u.streamed(e.cfg.Mode) {
		return fmt.Errorf("layering: unit %s is compressed and not streamed (%s, %s mode): only streamed units are", u.ID, u.Weights, e.cfg.Mode)
	}
	if !u.streamed(e.cfg.Mode) {
		return nil
	}
	if u.Blob == nil || u.size() == 0 {
		return fmt.Errorf("layering: streamed unit %s has no blob", u.ID)
	}
	var pins []*weights.Blob
	if u.hasRaw() {
		pins = append(pins, u.Blob)
	}
	if u.Z != nil {
		if err := e.addCompressed(u, u.Z, u.Blob.Entries, true); err != nil {
			return err
		}
		pins = append(pins, e.zblobs[u.Z])
	}
	for c, z := range u.ZShares {
		if u.Share == nil || !u.hasRaw() {
			return fmt.Errorf("layering: unit %s has a compressed share at %d, and no raw blob to share with the CPU", u.ID, c)
		}
		if err := e.addCompressed(u, z, u.Blob.Entries, false); err != nil {
			return err
		}
		pins = append(pins, e.zblobs[z])
	}
	for _, b := range pins {
		if err := e.dev.PinHost(b); err != nil {
			return fmt.Errorf("layering: pinning %s: %w", u.ID, err)
		}
	}
	e.SlotBytes = max(e.SlotBytes, roundUp(u.size(), weights.Align))
	return nil
}

// addCompressed checks a compressed form z of unit u against its blob's
// layout (the same offsets when whole, the same tensors for a share) and
// the device, and wraps its compressed bytes in the blob its copies move.
func (e *Executor) addCompressed(u *Unit, z *bf16z.Unit, layout []weights.Entry, whole bool) error {
	switch {
	case z.RawSize != roundUp(z.RawSize, weights.Align) || len(z.Entries) != len(layout):
		return fmt.Errorf("layering: compressed unit %s decodes %d bytes of %d tensors, its blob has %d tensors", u.ID, z.RawSize, len(z.Entries), len(layout))
	case z.Size() == 0:
		return fmt.Errorf("layering: compressed unit %s has no bytes", u.ID)
	}
	for i, en := range z.Entries {
		if b := layout[i]; b.Name != en.Name || (whole && (b.Offset != en.Offset || b.Size != en.Size)) {
			return fmt.Errorf("layering: compressed unit %s: tensor %d is %s at %d, its blob's %s at %d", u.ID, i, en.Name, en.Offset, b.Name, b.Offset)
		}
	}
	if e.zdev == nil {
		zd, ok := e.dev.(Decoder)
		if !ok {
			return fmt.Errorf("layering: unit %s is compressed, and the device cannot decode", u.ID)
		}
		e.zdev = zd
	}
	e.zblobs[z] = &weights.Blob{Name: u.ID.String(), Data: z.Data}
	e.StagingBytes = max(e.StagingBytes, roundUp(z.Size(), weights.Align))
	return nil
}

// allocStaging makes the staging buffers, the decode stream and their
// events, when some unit is compressed.
func (e *Executor) allocStaging() error {
	if e.zdev == nil {
		return nil
	}
	if n := e.cfg.StagingBytes; n > 0 {
		if n < e.StagingBytes || n%weights.Align != 0 {
			return fmt.Errorf("layering: staging buffers of %d bytes: the largest compressed unit needs %d, in multiples of %d", n, e.StagingBytes, weights.Align)
		}
		e.StagingBytes = n
	}
	for k := range e.cfg.Mode.slotsOf() {
		b, err := e.zdev.AllocStaging(e.StagingBytes)
		if err != nil {
			return fmt.Errorf("layering: staging buffer %d of %d bytes: %w", k, e.StagingBytes, err)
		}
		e.staging = append(e.staging, b)
	}
	if e.cfg.Mode != Pipelined {
		e.decode = e.compute
		return nil
	}
	var err error
	if e.decode, err = e.dev.NewStream("decode"); err != nil {
		return fmt.Errorf("layering: %w", err)
	}
	for k := range e.staging {
		c, err := e.dev.NewEvent(fmt.Sprintf("copied[%d]", k))
		if err != nil {
			return fmt.Errorf("layering: %w", err)
		}
		f, err := e.dev.NewEvent(fmt.Sprintf("staging-free[%d]", k))
		if err != nil {
			return fmt.Errorf("layering: %w", err)
		}
		e.copied, e.stagingFree = append(e.copied, c), append(e.stagingFree, f)
	}
	return nil
}

// decodeStatus reads the failures of the decodes since the last read and
// names the first one's unit and tile: an error that wraps
// bf16z.ErrCorrupt. The run's results MUST then be discarded: a failed
// tile's bytes in the slot are garbage.
func (e *Executor) decodeStatus() error {
	if e.zdev == nil || len(e.zRecs) == 0 {
		return nil
	}
	recs := e.zRecs
	e.zRecs, e.zJobs = nil, 0
	st, err := e.zdev.DecodeStatus(e.decode)
	if err != nil {
		return fmt.Errorf("layering: reading the decodes' status: %w", err)
	}
	if st.Failed == 0 {
		return nil
	}
	where := fmt.Sprintf("job %d", st.FirstJob)
	for i := len(recs) - 1; i >= 0; i-- {
		if r := recs[i]; st.FirstJob >= r.base {
			where = fmt.Sprintf("unit %s: %s", r.unit.ID, r.z.JobName(st.FirstJob-r.base))
			break
		}
	}
	return fmt.Errorf("layering: %d tiles of compressed weights failed to decode (%s), the first in %s: %w", st.Failed, st.Why, where, bf16z.ErrCorrupt)
}

// allocSlots makes the slots, the copy stream and the slot events.
func (e *Executor) allocSlots() error {
	n := e.cfg.Mode.slotsOf()
	for s := range n {
		slot, err := e.dev.AllocSlot(e.SlotBytes)
		if err != nil {
			return fmt.Errorf("layering: DFB slot %d of %d bytes: %w", s, e.SlotBytes, err)
		}
		e.slots = append(e.slots, slot)
	}
	if e.cfg.Mode != Pipelined {
		return nil
	}
	var err error
	if e.copy, err = e.dev.NewStream("copy"); err != nil {
		return fmt.Errorf("layering: %w", err)
	}
	for s := range n {
		dma, err := e.dev.NewEvent(fmt.Sprintf("dma-done[%d]", s))
		if err != nil {
			return fmt.Errorf("layering: %w", err)
		}
		done, err := e.dev.NewEvent(fmt.Sprintf("compute-done[%d]", s))
		if err != nil {
			return fmt.Errorf("layering: %w", err)
		}
		e.dmaDone, e.computeDone = append(e.dmaDone, dma), append(e.computeDone, done)
	}
	return nil
}

// home is where a unit's home is: at off in an arena.
type home struct {
	arena Slot
	off   int64
}

// drainEngine waits for the CPU engine's tasks and returns their timings
// and first error.
func (e *Executor) drainEngine() ([]CPUTask, error) {
	if e.engine == nil {
		return nil, nil
	}
	return e.engine.drain()
}

// Close stops the CPU engine. The Device owns and releases the slots and
// homes.
func (e *Executor) Close() {
	if e.engine != nil {
		e.engine.close()
		e.engine = nil
	}
}

// roundUp rounds n up to a multiple of m.
func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }
