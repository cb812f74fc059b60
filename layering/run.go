package layering

import (
	"errors"
	"fmt"
)

// turn is one unit's place in a Run.
type turn struct {
	pass int // index into the Run's passes
	unit *Unit
	j    int  // position in the copy order (streamed turns); -1 if in place
	slot Slot // slot j mod len(slots), or NoSlot

	copied bool // its copy is queued
	// home: the unit was promoted (Runner.Promote) and computes in place
	// from slot; waitHome: the first such turn waits for the promotion
	// copies.
	home, waitHome bool

	// Timing events (Config.Profile): around the copy (streamed turns)
	// and around the compute. Zero when not profiling.
	copyStart, copyEnd, exeStart, exeEnd Event
}

// Runner runs one schedule of passes a unit at a time, driven by the model
// code that computes them: Do queues the next unit's compute (and, before
// it, the copies the protocol needs), Skip drops the rest of a stage that
// ended early (a decode that sampled its stop token), Finish waits for the
// work and returns its timing. Streamed turns are counted across all
// passes, so the copies of a pass's first streamed units overlap the
// previous pass's last computes.
type Runner struct {
	e      *Executor
	passes []Pass
	turns  []*turn // the schedule still to compute is turns[cur:]
	cur    int

	// order is every streamed turn in copy order, wasted copies of skipped
	// turns included; order[:next] are queued.
	order []*turn
	next  int

	marks  int // timing events handed out
	failed error
	ended  bool
}

// Start begins a Run over passes: it checks that every unit was given to
// New, lays out the turns and queues the first copies. The caller then
// calls Do once per turn, in order, and Finish (or Abort).
func (e *Executor) Start(passes []Pass) (*Runner, error) {
	r := &Runner{e: e, passes: passes}
	for p, pass := range passes {
		for _, u := range pass.Units {
			if !e.known[u] {
				return nil, fmt.Errorf("layering: pass %s: unit %v was not given to New", pass.Name, unitName(u))
			}
			t := &turn{pass: p, unit: u, j: -1, slot: NoSlot}
			if u.streamed(e.cfg.Mode) {
				r.order = append(r.order, t)
			}
			if err := r.mark(t); err != nil {
				return nil, err
			}
			r.turns = append(r.turns, t)
		}
	}
	r.number(0)
	if err := e.dev.Record(e.begin, e.compute); err != nil {
		return nil, fmt.Errorf("layering: begin: %w", err)
	}
	if e.copy != e.compute {
		// Copies start with the Run, not before the work queued ahead of it.
		if err := e.dev.Wait(e.copy, e.begin); err != nil {
			return nil, fmt.Errorf("layering: copy stream waits for begin: %w", err)
		}
	}
	if e.cfg.Mode == Pipelined {
		if err := r.prefetch(len(e.slots)); err != nil {
			return nil, r.fail(err)
		}
	}
	return r, nil
}

// number gives the streamed turns order[from:] their copy positions and
// slots.
func (r *Runner) number(from int) {
	for j := from; j < len(r.order); j++ {
		t := r.order[j]
		t.j, t.slot = j, r.e.slots[j%len(r.e.slots)]
	}
}

// mark gives t its timing events when profiling.
func (r *Runner) mark(t *turn) (err error) {
	if !r.e.cfg.Profile {
		return nil
	}
	t.copyStart, t.copyEnd, t.exeStart, t.exeEnd, err = r.e.mark(&r.marks)
	return err
}

// Failed reports whether the Run has failed (every later call fails).
func (r *Runner) Failed() bool { return r.failed != nil }

// Next is the unit the schedule computes next, nil when none is left.
func (r *Runner) Next() *Unit {
	if r.cur >= len(r.turns) {
		return nil
	}
	return r.turns[r.cur].unit
}

// Pass is the name of the pass of the next turn, "" when none is left.
func (r *Runner) Pass() string {
	if r.cur >= len(r.turns) {
		return ""
	}
	return r.passes[r.turns[r.cur].pass].Name
}

// Do queues u's compute, which must be the schedule's next turn: run (or
// u.Run when run is nil) is called with the slot that holds u's weights,
// once the protocol has queued the copy and the waits it needs. An error
// ends the Run: the Runner waits for the queued work, so no copy still
// writes a slot, and every later call fails.
func (r *Runner) Do(u *Unit, run func(Slot) error) error {
	if r.failed != nil {
		return r.failed
	}
	if r.ended {
		return errors.New("layering: the run has finished")
	}
	if r.cur >= len(r.turns) {
		return r.fail(fmt.Errorf("layering: unit %s computed past the end of the schedule", unitName(u)))
	}
	t := r.turns[r.cur]
	if t.unit != u {
		return r.fail(fmt.Errorf("layering: pass %s: unit %s computed where the schedule has %s",
			r.passes[t.pass].Name, unitName(u), t.unit.ID))
	}
	if run == nil {
		run = u.Run
	}
	pipelined := r.e.cfg.Mode == Pipelined
	if t.j >= 0 && !pipelined {
		if err := r.e.copyTurn(t); err != nil {
			return r.fail(err)
		}
		t.copied = true
	}
	if err := r.e.computeTurn(t, run); err != nil {
		return r.fail(err)
	}
	r.cur++
	if t.j >= 0 && pipelined {
		// The next user of this slot is streamed turn j+2.
		if err := r.prefetch(t.j + 1 + len(r.e.slots)); err != nil {
			return r.fail(err)
		}
	}
	return nil
}

// PassDone reports whether the turn Do queued last ended its pass.
func (r *Runner) PassDone() bool {
	if r.cur == 0 {
		return false
	}
	return r.cur == len(r.turns) || r.turns[r.cur].pass != r.turns[r.cur-1].pass
}

// Skip drops the passes named stage+"." that come next in the schedule
// (the decode steps a stop token made unnecessary), which must start at
// a pass boundary. Copies already queued for them are wasted, not undone:
// the slots' events still order every later copy after the last compute
// that read the slot.
func (r *Runner) Skip(stage string) error {
	if r.failed != nil {
		return r.failed
	}
	if r.cur > 0 && !r.PassDone() {
		return r.fail(fmt.Errorf("layering: skip %s in the middle of pass %s", stage, r.passes[r.turns[r.cur].pass].Name))
	}
	k := r.cur
	for k < len(r.turns) && r.passes[r.turns[k].pass].Stage == stage {
		k++
	}
	if k == r.cur {
		return nil
	}
	dropped := map[*turn]bool{}
	for _, t := range r.turns[r.cur:k] {
		dropped[t] = true
	}
	r.turns = append(r.turns[:r.cur:r.cur], r.turns[k:]...)
	// Keep the queued copies (wasted or not) in place; renumber the rest.
	kept := r.order[:r.next:r.next]
	for _, t := range r.order[r.next:] {
		if !dropped[t] {
			kept = append(kept, t)
		}
	}
	r.order = kept
	r.number(r.next)
	return r.keepAhead() // two copies ahead of the next streamed compute
}

// Promote gives units slots of their own (bufs, from the Device's
// AllocSlot) for the rest of the Run: their blobs are copied there once, on
// the copy stream after the copies already queued, and their remaining
// turns compute in place, no longer passing through the DFB slots (turns
// whose slot copy is already queued keep it). It must be called at a pass
// boundary: after the prefill, the activation memory the vision pass and
// the prefill no longer need holds units that decode and diffusion would
// otherwise stream at every pass.
func (r *Runner) Promote(units []*Unit, bufs []Slot) error {
	if r.failed != nil {
		return r.failed
	}
	e := r.e
	switch {
	case len(units) != len(bufs):
		return r.fail(fmt.Errorf("layering: promote %d units into %d slots", len(units), len(bufs)))
	case r.cur > 0 && !r.PassDone():
		return r.fail(fmt.Errorf("layering: promote in the middle of pass %s", r.passes[r.turns[r.cur].pass].Name))
	case len(units) == 0:
		return nil
	}
	home := map[*Unit]Slot{}
	for i, u := range units {
		if !e.known[u] {
			return r.fail(fmt.Errorf("layering: promote: unit %v was not given to New", unitName(u)))
		}
		home[u] = bufs[i]
	}
	if e.promoted < 0 {
		ev, err := e.dev.NewEvent("promoted")
		if err != nil {
			return r.fail(fmt.Errorf("layering: %w", err))
		}
		e.promoted = ev
	}
	for i, u := range units {
		if !u.streamed(e.cfg.Mode) {
			return r.fail(fmt.Errorf("layering: promote: unit %s is not streamed", u.ID))
		}
		if err := e.dev.CopyAsync(bufs[i], u.Blob, e.copy); err != nil {
			return r.fail(fmt.Errorf("layering: promote: copying %s: %w", u.ID, err))
		}
	}
	if err := e.dev.Record(e.promoted, e.copy); err != nil {
		return r.fail(fmt.Errorf("layering: promote: %w", err))
	}
	waits := map[*Unit]bool{}
	for _, t := range r.turns[r.cur:] {
		b, ok := home[t.unit]
		if !ok || t.copied {
			continue
		}
		t.j, t.slot, t.home = -1, b, true
		if !waits[t.unit] {
			t.waitHome, waits[t.unit] = true, true
		}
	}
	kept := r.order[:r.next:r.next]
	for _, t := range r.order[r.next:] {
		if !t.home {
			kept = append(kept, t)
		}
	}
	r.order = kept
	r.number(r.next)
	return r.keepAhead()
}

// keepAhead queues, in pipelined mode, the copies of the next streamed
// turns up to the two slots (after the schedule changed).
func (r *Runner) keepAhead() error {
	if r.e.cfg.Mode != Pipelined {
		return nil
	}
	for _, t := range r.turns[r.cur:] {
		if t.j >= 0 {
			if err := r.prefetch(t.j + len(r.e.slots)); err != nil {
				return r.fail(err)
			}
			break
		}
	}
	return nil
}

// prefetch queues the copies of streamed turns before position upTo.
func (r *Runner) prefetch(upTo int) error {
	for ; r.next < min(upTo, len(r.order)); r.next++ {
		if err := r.e.copyTurn(r.order[r.next]); err != nil {
			return err
		}
		r.order[r.next].copied = true
	}
	return nil
}

// Finish checks that the whole schedule ran, waits for the work and
// returns its timing.
func (r *Runner) Finish() (*Profile, error) {
	if r.failed != nil {
		return nil, r.failed
	}
	if r.ended {
		return nil, errors.New("layering: the run has finished")
	}
	if r.cur < len(r.turns) {
		t := r.turns[r.cur]
		return nil, r.fail(fmt.Errorf("layering: run finished before unit %s of pass %s", t.unit.ID, r.passes[t.pass].Name))
	}
	r.ended = true
	e := r.e
	if err := e.dev.Record(e.end, e.compute); err != nil {
		return nil, errors.Join(fmt.Errorf("layering: end: %w", err), e.dev.Synchronize())
	}
	if err := e.dev.Synchronize(); err != nil {
		return nil, fmt.Errorf("layering: synchronize: %w", err)
	}
	return e.profile(r.passes, r.turns)
}

// Abort ends a Run early (the caller's own error): it waits for the
// queued work so no copy still writes a slot. Later calls fail.
func (r *Runner) Abort() error {
	if r.ended || r.failed != nil {
		return nil
	}
	r.ended = true
	return r.e.dev.Synchronize()
}

// fail ends the Run with err after the queued work has finished.
func (r *Runner) fail(err error) error {
	if r.failed == nil {
		r.failed = errors.Join(err, r.e.dev.Synchronize())
	}
	return r.failed
}

// Run queues every pass in order, calling each pass's After once its
// computes (and the copies that prefetch the next pass) are queued, waits
// for the work, and returns its timing. Each Run starts after the previous
// one has finished.
func (e *Executor) Run(passes []Pass) (*Profile, error) {
	r, err := e.Start(passes)
	if err != nil {
		return nil, err
	}
	for u := r.Next(); u != nil; u = r.Next() {
		pass := r.passes[r.turns[r.cur].pass]
		if err := r.Do(u, nil); err != nil {
			return nil, err
		}
		if r.PassDone() && pass.After != nil {
			if err := pass.After(); err != nil {
				return nil, r.fail(fmt.Errorf("layering: after pass %s: %w", pass.Name, err))
			}
		}
	}
	return r.Finish()
}

// mark hands out the next four timing events of the pool, growing it.
func (e *Executor) mark(used *int) (a, b, c, d Event, err error) {
	for len(e.marks) < *used+4 {
		ev, err := e.dev.NewEvent(fmt.Sprintf("mark[%d]", len(e.marks)))
		if err != nil {
			return 0, 0, 0, 0, fmt.Errorf("layering: timing event: %w", err)
		}
		e.marks = append(e.marks, ev)
	}
	m := e.marks[*used : *used+4]
	*used += 4
	return m[0], m[1], m[2], m[3], nil
}

// unitName names u in errors, nil included.
func unitName(u *Unit) string {
	if u == nil {
		return "<nil>"
	}
	return u.ID.String()
}
