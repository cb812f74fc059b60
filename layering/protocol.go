package layering

import (
	"fmt"

	"vlanode/weights"
)

// The protocol, for slotted turn j in slot s = j mod 2 (Pipelined):
// the copy waits compute-done[s], copies, records dma-done[s]; the
// compute waits dma-done[s], runs, records compute-done[s]. Runner.Do
// queues the copy of turn j+2 right after the compute of turn j. An
// entering turn's copy into its home waits for nothing (the stage's homes
// were placed after the device finished with what they replace) and
// records its unit's home-ready event, which its compute waits for.

// copyTurn is the copy side of the protocol for a slotted turn in slot
// s: wait compute-done[s] (the slot's previous user has run), copy the
// unit's blob (or the GPU's share of it), record dma-done[s]; or, for an
// entering turn, copy the blob into its home and record home-ready.
func (e *Executor) copyTurn(t *turn) error {
	if t.z {
		return e.copyZ(t)
	}
	pipelined := e.cfg.Mode == Pipelined
	s := max(t.j, 0) % max(len(e.slots), 1)
	if pipelined && t.kind == slotted {
		// The slot's previous user (slotted turn j-2) has computed. Before
		// any user, the event has no record and the wait is a no-op.
		if err := e.dev.Wait(e.copy, e.computeDone[s]); err != nil {
			return e.fail(t, "copy stream waits for compute-done", err)
		}
	}
	if err := e.stamp(t.copyStart, e.copy); err != nil {
		return e.fail(t, "timing", err)
	}
	switch {
	case t.rects == nil && t.off == 0:
		if err := e.dev.CopyAsync(t.slot, t.unit.Blob, e.copy); err != nil {
			return e.fail(t, "copy", err)
		}
	case t.rects == nil:
		n := t.unit.Blob.Size()
		r := weights.Rect{SrcPitch: n, DstOffset: t.off, DstPitch: n, Width: n, Height: 1}
		if err := e.dev.CopyRectAsync(t.slot, t.unit.Blob, r, e.copy); err != nil {
			return e.fail(t, "copy into its home", err)
		}
	default:
		for _, rc := range t.rects {
			if err := e.dev.CopyRectAsync(t.slot, t.unit.Blob, rc, e.copy); err != nil {
				return e.fail(t, "copy of the GPU's share", err)
			}
		}
	}
	if pipelined {
		ev := e.dmaDone[s] // the slot now holds this unit's blob
		if t.kind == entering {
			ev = e.homeReady[t.unit] // its home now holds it
		}
		if err := e.dev.Record(ev, e.copy); err != nil {
			return e.fail(t, "record the copy's end", err)
		}
	}
	return e.stamp(t.copyEnd, e.copy)
}

// computeTurn is the compute side: for a slotted turn in slot s, wait
// dma-done[s] (its blob has arrived), run the unit, record
// compute-done[s]; an entering turn waits for its home's copy; a unit in
// place just runs.
func (e *Executor) computeTurn(r *Runner, t *turn, run func(Shard) error) error {
	pipelined := e.cfg.Mode == Pipelined
	s := max(t.j, 0) % max(len(e.slots), 1)
	if t.cpu == 0 {
		// A turn the CPU shares waits for its weights when its compute says
		// so (Shard.Ready), after handing its input over.
		t.ready = true
		if err := e.waitWeights(t); err != nil {
			return err
		}
	}
	if err := e.stamp(t.exeStart, e.compute); err != nil {
		return e.fail(t, "timing", err)
	}
	sh := Shard{Slot: t.slot, Offset: t.off, CPU: t.cpu, Whole: t.kind == cpuWhole, unit: t.unit.ID, r: r, t: t}
	if err := e.dev.Launch(e.compute, Compute{Unit: t.unit.ID.String(), Slot: t.slot, Offset: t.off, Run: func(Slot) error {
		if run != nil {
			if err := run(sh); err != nil {
				return err
			}
		}
		if !t.ready && t.copies() {
			return fmt.Errorf("the compute of a split unit never waited for its weights (Shard.Ready)")
		}
		return nil
	}}); err != nil {
		return e.fail(t, "compute", err)
	}
	if pipelined && t.kind == slotted {
		// The slot may be overwritten by its next user (slotted turn j+2).
		if err := e.dev.Record(e.computeDone[s], e.compute); err != nil {
			return e.fail(t, "record compute-done", err)
		}
	}
	if t.join != nil {
		if ht, ok := e.dev.(HostTimer); ok {
			if err := ht.HostJoin(e.compute, t.unit.ID); err != nil {
				return e.fail(t, "join the CPU", err)
			}
		}
		err := t.join()
		t.join = nil
		if err != nil {
			return e.fail(t, "take the CPU's result back", err)
		}
	}
	return e.stamp(t.exeEnd, e.compute)
}

// waitWeights makes the compute stream wait for t's copy: dma-done of
// its slot, or its home's copy.
func (e *Executor) waitWeights(t *turn) error {
	if e.cfg.Mode != Pipelined {
		return nil
	}
	switch t.kind {
	case slotted:
		if err := e.dev.Wait(e.compute, e.dmaDone[t.j%len(e.slots)]); err != nil {
			return e.fail(t, "compute stream waits for dma-done", err)
		}
	case entering:
		if err := e.dev.Wait(e.compute, e.homeReady[t.unit]); err != nil {
			return e.fail(t, "compute stream waits for the home's copy", err)
		}
	}
	return nil
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

// copyZ is the copy side of a compressed turn (Unit.Z), through staging
// buffer k, the next of the staging ring (compressed copies in copy
// order, entering ones included):
//
//	copy stream:   wait staging-free[k]; copy the compressed bytes into staging k; record copied[k]
//	decode stream: wait copied[k]; slotted: wait compute-done[s];
//	               decode staging k into slot s (or the home); record staging-free[k];
//	               record dma-done[s] (or the home's home-ready)
//
// so the compute's wait for dma-done[s] (or home-ready) is a wait for the
// decode, the slot is overwritten only once its last user has run, and the
// staging buffer only once its last decode has read it. The decode is
// queued with its copy: both come after the compute of the slot's
// previous user is queued, as a raw copy does.
func (e *Executor) copyZ(t *turn) error {
	pipelined := e.cfg.Mode == Pipelined
	k := e.nz % len(e.staging)
	e.nz++
	s := max(t.j, 0) % max(len(e.slots), 1)
	if pipelined {
		// The staging buffer's last decode has read it (before any, the
		// event has no record and the wait is a no-op).
		if err := e.dev.Wait(e.copy, e.stagingFree[k]); err != nil {
			return e.fail(t, "copy stream waits for staging-free", err)
		}
	}
	if err := e.stamp(t.copyStart, e.copy); err != nil {
		return e.fail(t, "timing", err)
	}
	if err := e.dev.CopyAsync(e.staging[k], e.zblobs[t.zu], e.copy); err != nil {
		return e.fail(t, "copy of the compressed bytes", err)
	}
	if err := e.stamp(t.copyEnd, e.copy); err != nil {
		return e.fail(t, "timing", err)
	}
	if pipelined {
		if err := e.dev.Record(e.copied[k], e.copy); err != nil {
			return e.fail(t, "record copied", err)
		}
		if err := e.dev.Wait(e.decode, e.copied[k]); err != nil {
			return e.fail(t, "decode stream waits for copied", err)
		}
		if t.kind == slotted {
			// The slot's previous user (slotted turn j-2) has computed.
			if err := e.dev.Wait(e.decode, e.computeDone[s]); err != nil {
				return e.fail(t, "decode stream waits for compute-done", err)
			}
		}
	}
	if err := e.stamp(t.decStart, e.decode); err != nil {
		return e.fail(t, "timing", err)
	}
	base := e.zJobs
	e.zJobs += len(t.zu.Jobs)
	e.zRecs = append(e.zRecs, zDecodeRec{unit: t.unit, z: t.zu, base: base})
	if err := e.zdev.Decode(t.slot, t.off, e.staging[k], t.zu, base, e.decode); err != nil {
		return e.fail(t, "decode", err)
	}
	if err := e.stamp(t.decEnd, e.decode); err != nil {
		return e.fail(t, "timing", err)
	}
	if !pipelined {
		return nil
	}
	if err := e.dev.Record(e.stagingFree[k], e.decode); err != nil {
		return e.fail(t, "record staging-free", err)
	}
	ev := e.dmaDone[s] // the slot now holds this unit's weights
	if t.kind == entering {
		ev = e.homeReady[t.unit]
	}
	if err := e.dev.Record(ev, e.decode); err != nil {
		return e.fail(t, "record the decode's end", err)
	}
	return nil
}
