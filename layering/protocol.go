package layering

import "fmt"

// queue issues the Run's work in host order. Pipelined: the copies of the
// first two streamed turns go first; after the compute of streamed turn j
// comes the copy of turn j+2, the next user of the same slot (possibly in
// the next pass). Sequential and Preload: each turn copies (if streamed)
// and computes on the compute stream, in order.
func (e *Executor) queue(passes []Pass, turns []turn, streamed []int) error {
	next := 0 // the next streamed turn whose copy is not queued yet
	prefetch := func(upTo int) error {
		for ; next < min(upTo, len(streamed)); next++ {
			if err := e.copyTurn(&turns[streamed[next]]); err != nil {
				return err
			}
		}
		return nil
	}
	pipelined := e.cfg.Mode == Pipelined
	if pipelined {
		if err := prefetch(len(e.slots)); err != nil {
			return err
		}
	}
	for i := range turns {
		t := &turns[i]
		if t.j >= 0 && !pipelined {
			if err := e.copyTurn(t); err != nil {
				return err
			}
		}
		if err := e.computeTurn(t); err != nil {
			return err
		}
		if t.j >= 0 && pipelined {
			if err := prefetch(t.j + 1 + len(e.slots)); err != nil {
				return err
			}
		}
		if last := i+1 == len(turns) || turns[i+1].pass != t.pass; last {
			if after := passes[t.pass].After; after != nil {
				if err := after(); err != nil {
					return fmt.Errorf("layering: after pass %s: %w", passes[t.pass].Name, err)
				}
			}
		}
	}
	return nil
}

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
func (e *Executor) computeTurn(t *turn) error {
	pipelinedSlot := t.j >= 0 && e.cfg.Mode == Pipelined
	s := t.j % max(len(e.slots), 1)
	if pipelinedSlot {
		if err := e.dev.Wait(e.compute, e.dmaDone[s]); err != nil {
			return e.fail(t, "compute stream waits for dma-done", err)
		}
	}
	if err := e.stamp(t.exeStart, e.compute); err != nil {
		return e.fail(t, "timing", err)
	}
	if err := e.dev.Launch(e.compute, Compute{Unit: t.unit.Name, Slot: t.slot, Run: t.unit.Run}); err != nil {
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
	return fmt.Errorf("layering: unit %s (slot %d): %s: %w", t.unit.Name, t.slot, step, err)
}
