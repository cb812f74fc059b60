package layering

import (
	"errors"
	"fmt"
	"time"

	"vlanode/placement"
	"vlanode/weights"
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
	// Share, for a unit the CPU and the GPU can split, gives the GPU's
	// share when the CPU takes c of the split dimension: the rectangles of
	// the blob to copy into a slot and the bytes they fill there.
	Share func(c int) (rects []weights.Rect, bytes int64, err error)
	// Run queues the unit's compute; the shard says where its weights are
	// and what the CPU takes. Nil runs nothing (tests).
	Run func(Shard) error
}

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
	e.copy = e.compute
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
	return e, nil
}

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
	if !u.streamed(e.cfg.Mode) {
		return nil
	}
	if u.Blob == nil || u.Blob.Size() == 0 {
		return fmt.Errorf("layering: streamed unit %s has no blob", u.ID)
	}
	if err := e.dev.PinHost(u.Blob); err != nil {
		return fmt.Errorf("layering: pinning %s: %w", u.ID, err)
	}
	e.SlotBytes = max(e.SlotBytes, roundUp(u.Blob.Size(), weights.Align))
	return nil
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
