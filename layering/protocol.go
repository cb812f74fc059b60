package layering

import "fmt"

// The protocol, for streamed turn j in slot s = j mod 2 (Pipelined):
// the copy waits compute-done[s], copies, records dma-done[s]; the
// compute waits dma-done[s], runs, records compute-done[s]. Runner.Do
// queues the copy of turn j+2 right after the compute of turn j.

// copyTurn is the copy side of the protocol for a streamed turn in slot
// s: wait compute-done[s] (the slot's previous user has run), copy the
// unit's blob, record dma-done[s].
func (e *Executor) copyTurn(t *turn) error {
	s := t.j % len(e.slots)
	if e.cfg.Mode == Pipelined {
		// The slot's previous user (streamed turn j-2) has computed. Before
		// any user, the event has no record and the wait is a no-op.
		if err := e.dev.Wait(e.copy, e.computeDone[s]); err != nil {
			return e.fail(t, "copy stream waits for compute-done", err)
		}
	}
	if err := e.stamp(t.copyStart, e.copy); err != nil {
		return e.fail(t, "timing", err)
	}
	if err := e.dev.CopyAsync(t.slot, t.unit.Blob, e.copy); err != nil {
		return e.fail(t, "copy", err)
	}
	if e.cfg.Mode == Pipelined {
		// The slot now holds this unit's blob.
		if err := e.dev.Record(e.dmaDone[s], e.copy); err != nil {
			return e.fail(t, "record dma-done", err)
		}
	}
	return e.stamp(t.copyEnd, e.copy)
}

// computeTurn is the compute side: for a streamed turn in slot s, wait
// dma-done[s] (its blob has arrived), run the unit, record
// compute-done[s]; a unit in place just runs.
func (e *Executor) computeTurn(t *turn, run func(Slot) error) error {
	pipelinedSlot := t.j >= 0 && e.cfg.Mode == Pipelined
	s := t.j % max(len(e.slots), 1)
	if t.waitHome {
		if err := e.dev.Wait(e.compute, e.promoted); err != nil {
			return e.fail(t, "compute stream waits for the promotion copies", err)
		}
	}
	if pipelinedSlot {
		if err := e.dev.Wait(e.compute, e.dmaDone[s]); err != nil {
			return e.fail(t, "compute stream waits for dma-done", err)
		}
	}
	if err := e.stamp(t.exeStart, e.compute); err != nil {
		return e.fail(t, "timing", err)
	}
	if err := e.dev.Launch(e.compute, Compute{Unit: t.unit.ID.String(), Slot: t.slot, Run: run}); err != nil {
		return e.fail(t, "compute", err)
	}
	if pipelinedSlot {
		// The slot may be overwritten by its next user (streamed turn j+2).
		if err := e.dev.Record(e.computeDone[s], e.compute); err != nil {
			return e.fail(t, "record compute-done", err)
		}
	}
	return e.stamp(t.exeEnd, e.compute)
}

// stamp records a timing event on s, when profiling.
func (e *Executor) stamp(ev Event, s Stream) error {
	if !e.cfg.Profile {
		return nil
	}
	return e.dev.Record(ev, s)
}

// fail wraps err with the turn and the step that failed.
func (e *Executor) fail(t *turn, step string, err error) error {
	return fmt.Errorf("layering: unit %s (slot %d): %s: %w", t.unit.ID, t.slot, step, err)
}
