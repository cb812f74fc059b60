package layering

import (
	"errors"
	"fmt"
)

// turn is one unit's place in a Run.
type turn struct {
	pass int // index into the Run's passes
	unit *Unit
	j    int  // streamed turns before this one in the Run; -1 if in place
	slot Slot // slot j mod len(slots), or NoSlot

	// Timing events (Config.Profile): around the copy (streamed turns)
	// and around the compute. Zero when not profiling.
	copyStart, copyEnd, exeStart, exeEnd Event
}

// Run queues every pass in order, waits for the work, and returns its
// timing. Streamed turns are counted across all passes, so the copies of
// a pass's first streamed units overlap the previous pass's last computes.
// Each Run starts after the previous one has finished.
func (e *Executor) Run(passes []Pass) (*Profile, error) {
	turns, streamed, err := e.turns(passes)
	if err != nil {
		return nil, err
	}
	if err := e.dev.Record(e.begin, e.compute); err != nil {
		return nil, fmt.Errorf("layering: begin: %w", err)
	}
	if e.copy != e.compute {
		// Copies start with the Run, not before the work queued ahead of it.
		if err := e.dev.Wait(e.copy, e.begin); err != nil {
			return nil, fmt.Errorf("layering: copy stream waits for begin: %w", err)
		}
	}
	if err := e.queue(passes, turns, streamed); err != nil {
		// Let queued work finish before reporting, so no copy still writes
		// a slot the caller may reuse.
		return nil, errors.Join(err, e.dev.Synchronize())
	}
	if err := e.dev.Record(e.end, e.compute); err != nil {
		return nil, fmt.Errorf("layering: end: %w", err)
	}
	if err := e.dev.Synchronize(); err != nil {
		return nil, fmt.Errorf("layering: synchronize: %w", err)
	}
	return e.profile(passes, turns)
}

// turns lays out the Run: every unit of every pass, with its streamed
// index and slot, and its timing events when profiling.
func (e *Executor) turns(passes []Pass) (turns []turn, streamed []int, err error) {
	marks := 0
	for p, pass := range passes {
		for _, u := range pass.Units {
			if !e.known[u] {
				return nil, nil, fmt.Errorf("layering: pass %s: unit %v was not given to New", pass.Name, unitName(u))
			}
			t := turn{pass: p, unit: u, j: -1, slot: NoSlot}
			if u.streamed(e.cfg.Mode) {
				t.j = len(streamed)
				t.slot = e.slots[t.j%len(e.slots)]
				streamed = append(streamed, len(turns))
			}
			if e.cfg.Profile {
				if t.copyStart, t.copyEnd, t.exeStart, t.exeEnd, err = e.mark(&marks); err != nil {
					return nil, nil, err
				}
			}
			turns = append(turns, t)
		}
	}
	return turns, streamed, nil
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
	return u.Name
}
