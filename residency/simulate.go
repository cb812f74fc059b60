package residency

// step is one unit's turn in a pass, as the executor runs it on its three
// engines: the copy stream, the GPU's compute stream and the CPU.
type step struct {
	// exe is the GPU's compute time (its share, for a split unit), dma
	// the copy time of what the GPU reads (its share).
	exe, dma float64
	// streamed units are copied into a DFB slot before every use.
	streamed bool
	// enter units are copied once, in the stage's first pass, into a
	// home of their own (no slot: the copy waits for nothing but the
	// copy stream), and computed in place after.
	enter bool
	// cpu is the CPU's compute time of its share (0: the GPU computes the
	// unit alone); hop is one hand-off of activations between the GPU and
	// the CPU (each way).
	cpu, hop float64
	// z units copy their compressed bytes (dma) into a staging buffer and
	// a decode of dec ms expands them into the slot or the home.
	z   bool
	dec float64
}

// dfbSlots is the number of DFB slots; streamed unit j uses slot j mod 2.
const dfbSlots = 2

// timeline is the result of a simulated stage: its end and each engine's
// busy time (gpuMs counts the decodes' share of the compute engine,
// decMs the decode stream's).
type timeline struct {
	end                         float64
	copyMs, gpuMs, cpuMs, decMs float64
}

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
func simulate(passes int, seq []step) float64 { return simulate3(passes, seq).end }

// simulate3 is simulate with the CPU as a third engine (paper 2's
// pipelined sharding, DESIGN.md "Where the architecture goes next"). A
// unit whose share runs on the CPU hands its input over when the GPU has
// finished the unit before it (one hop), the CPU computes in order, and
// the GPU adds the CPU's result after its own share (one hop back) before
// the next unit: the GPU stream's next op waits for it. Copies run ahead
// as far as the slots allow, while the CPU computes.
//
// A compressed unit (z) is the executor's three-stream turn
// (layering.Executor.copyZ): its copy goes to the next staging buffer of
// a ring of their own (the compressed copies in order) once that
// buffer's last decode has read it; its decode, on an engine of its own,
// starts when the decode engine is free, its copy is done and, for a
// streamed unit, its slot's last user has computed; its compute waits for
// the decode. The decode engine is a stream, not spare silicon: the
// decode kernel runs on the SMs and reads and writes HBM beside the
// compute kernels, so its time is also taken from the compute engine:
// the part of the decode during which the compute engine was busy (the
// previous unit's compute ran past the decode's start) is added to the
// compute of the unit it decoded. In a compute-bound stage compression
// then costs ΣC_DEC and the planner keeps it raw; in a copy-bound one the
// decode runs while the compute engine waits and the copies it saves
// still pay. (Measured on the H200, 10B at 16 GiB, GPU-only: the
// decode stage took 138.8 ms compressed against ΣC_EXE + ΣC_DEC = 137.3,
// vision 43.0 against 43.5; a decode engine beside the compute predicted
// 124.8 and 37.7.)
func simulate3(passes int, seq []step) timeline {
	var t timeline
	var copyFree, gpuEnd, cpuFree, decFree float64
	busy := 0.0                       // when the compute engine's last compute ended
	var slotFree [dfbSlots]float64    // when each slot's last user finished computing
	var stagingFree [dfbSlots]float64 // when each staging buffer's last decode finished
	j, k := 0, 0                      // streamed turns, compressed copies so far
	for p := range passes {
		for _, s := range seq {
			ready, dec := 0.0, 0.0 // dec: the decode's time taken from the compute engine
			slot := j % dfbSlots
			switch {
			case s.z && (s.streamed || (s.enter && p == 0)):
				st := k % dfbSlots
				copyFree = max(copyFree, stagingFree[st]) + s.dma
				t.copyMs += s.dma
				start := max(decFree, copyFree)
				if s.streamed {
					start = max(start, slotFree[slot])
				}
				decFree = start + s.dec
				stagingFree[st] = decFree
				t.decMs += s.dec
				ready = decFree
				dec = min(max(busy-start, 0), s.dec) // its time beside a compute
				k++
			case s.streamed:
				start := max(copyFree, slotFree[slot])
				copyFree = start + s.dma
				ready = copyFree
				t.copyMs += s.dma
			case s.enter && p == 0:
				copyFree += s.dma
				ready = copyFree
				t.copyMs += s.dma
			}
			input := gpuEnd // the previous unit's output
			shareEnd := max(input, ready) + s.exe + dec
			t.gpuMs += s.exe + dec
			gpuEnd, busy = shareEnd, shareEnd
			if s.cpu > 0 {
				cpuStart := max(cpuFree, input+s.hop)
				cpuFree = cpuStart + s.cpu
				t.cpuMs += s.cpu
				gpuEnd = max(shareEnd, cpuFree+s.hop)
			}
			if s.streamed {
				slotFree[slot] = shareEnd
				j++
			}
		}
	}
	t.end = gpuEnd
	return t
}
