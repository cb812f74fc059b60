package residency

// step is one unit's turn in a pass: its compute time and, when streamed,
// its copy time.
type step struct {
	exe, dma float64
	streamed bool
}

// dfbSlots is the number of DFB slots; streamed unit j uses slot j mod 2.
const dfbSlots = 2

// simulate returns the time from the start of a stage to the end of its
// last compute, for passes repetitions of seq, as the executor runs it
// (DESIGN.md, "Executor"): one copy stream and one compute stream, both in
// order. The copy of the j-th streamed turn starts when the copy stream is
// free and its slot is: the compute of streamed turn j−2, the slot's last
// user, has finished. A turn computes when the previous turn has finished
// and, if streamed, its copy is done; resident turns need no copy. Passes
// run back to back: nothing holds a copy of the next pass until the
// current pass ends, so the first copies of a pass overlap the tail of the
// previous one (decode steps, Euler steps).
//
// Both streams are in order, so each event depends only on earlier ones
// and the simulation is this one sweep over the turns.
func simulate(passes int, seq []step) float64 {
	var copyFree, computeEnd float64
	var slotFree [dfbSlots]float64 // when each slot's last user finished computing
	j := 0                         // streamed turns so far
	for range passes {
		for _, s := range seq {
			ready := 0.0
			slot := j % dfbSlots
			if s.streamed {
				start := max(copyFree, slotFree[slot])
				copyFree = start + s.dma
				ready = copyFree
			}
			computeEnd = max(computeEnd, ready) + s.exe
			if s.streamed {
				slotFree[slot] = computeEnd
				j++
			}
		}
	}
	return computeEnd
}
