package layering

import (
	"fmt"

	"vlanode/placement"
)

// Profile is the timing of one Run, read from device events.
type Profile struct {
	// TotalMs is from the Run's start to its last compute.
	TotalMs float64
	// Turns are every unit's turn in order (Config.Profile only).
	Turns []Turn
	// CPUTasks are the CPU engine's tasks in the order it ran them.
	CPUTasks []CPUTask
	// HomeErrors says why homes could not be allocated (those units were
	// streamed instead in their stage); nil when all were.
	HomeErrors error
}

// Turn is one unit's copy and compute in one pass.
type Turn struct {
	Pass string
	Unit placement.ID
	Slot Slot // NoSlot for a unit computed in place
	// CopyMs is the H2D copy (0 in place; a compressed unit's compressed
	// bytes); DecodeMs the decode of a compressed unit into its slot or
	// home (0 for the others); ExeMs the compute, from the dependency
	// waits' end to the compute's end.
	CopyMs, DecodeMs, ExeMs float64
	// CopyAtMs, DecodeAtMs and ExeAtMs are when they began, from the
	// Run's start: with them the turns are a timeline of the streams,
	// where the gaps show.
	CopyAtMs, DecodeAtMs, ExeAtMs float64
	// Compressed says the copy moved compressed bytes and a decode
	// expanded them.
	Compressed bool
	// CPU is the CPU engine's task of this turn, for a unit the CPU
	// shares (nil otherwise).
	CPU *CPUTask `json:",omitempty"`
}

// CPUTask is one task of the CPU engine, timed by the host's clock: it
// was taken up AtMs after the Run's start (as the device's timeline
// counts, give or take the launch of the Run's first event), waited WaitMs
// for its input from the device, then computed for Ms (until it handed its
// result back).
type CPUTask struct {
	Unit             placement.ID
	AtMs, WaitMs, Ms float64
}

// CPUMs sums the CPU engine's compute and input waits over its tasks.
func (p *Profile) CPUMs() (busy, waiting float64) {
	for _, t := range p.CPUTasks {
		busy += t.Ms
		waiting += t.WaitMs
	}
	return busy, waiting
}

// UnitTiming is a unit's mean timing over its turns.
type UnitTiming struct {
	Unit                    placement.ID
	Turns                   int
	CopyMs, DecodeMs, ExeMs float64 // means over the turns
}

// PerUnit averages the turns per unit, in order of first appearance.
func (p *Profile) PerUnit() []UnitTiming {
	var out []UnitTiming
	at := map[placement.ID]int{}
	for _, t := range p.Turns {
		k, ok := at[t.Unit]
		if !ok {
			k = len(out)
			at[t.Unit] = k
			out = append(out, UnitTiming{Unit: t.Unit})
		}
		u := &out[k]
		u.Turns++
		u.CopyMs += t.CopyMs
		u.DecodeMs += t.DecodeMs
		u.ExeMs += t.ExeMs
	}
	for i := range out {
		out[i].CopyMs /= float64(out[i].Turns)
		out[i].DecodeMs /= float64(out[i].Turns)
		out[i].ExeMs /= float64(out[i].Turns)
	}
	return out
}

// profile reads the Run's events after it has finished.
func (e *Executor) profile(passes []Pass, turns []*turn) (*Profile, error) {
	total, err := e.dev.Elapsed(e.begin, e.end)
	if err != nil {
		return nil, fmt.Errorf("layering: total time: %w", err)
	}
	p := &Profile{TotalMs: total}
	if !e.cfg.Profile {
		return p, nil
	}
	p.Turns = make([]Turn, len(turns))
	for i, t := range turns {
		tt := Turn{Pass: passes[t.pass].Name, Unit: t.unit.ID, Slot: t.slot, Compressed: t.z && t.copies()}
		if t.copies() {
			if tt.CopyMs, err = e.dev.Elapsed(t.copyStart, t.copyEnd); err != nil {
				return nil, fmt.Errorf("layering: copy time of %s: %w", t.unit.ID, err)
			}
			if tt.CopyAtMs, err = e.dev.Elapsed(e.begin, t.copyStart); err != nil {
				return nil, fmt.Errorf("layering: copy start of %s: %w", t.unit.ID, err)
			}
		}
		if tt.Compressed {
			if tt.DecodeMs, err = e.dev.Elapsed(t.decStart, t.decEnd); err != nil {
				return nil, fmt.Errorf("layering: decode time of %s: %w", t.unit.ID, err)
			}
			if tt.DecodeAtMs, err = e.dev.Elapsed(e.begin, t.decStart); err != nil {
				return nil, fmt.Errorf("layering: decode start of %s: %w", t.unit.ID, err)
			}
		}
		if tt.ExeMs, err = e.dev.Elapsed(t.exeStart, t.exeEnd); err != nil {
			return nil, fmt.Errorf("layering: compute time of %s: %w", t.unit.ID, err)
		}
		if tt.ExeAtMs, err = e.dev.Elapsed(e.begin, t.exeStart); err != nil {
			return nil, fmt.Errorf("layering: compute start of %s: %w", t.unit.ID, err)
		}
		p.Turns[i] = tt
	}
	return p, nil
}

// attachCPU gives each turn that offloaded a task its task: a unit's tasks
// ran in the order of its turns, one each.
func (p *Profile) attachCPU(turns []*turn) {
	if len(p.Turns) != len(turns) {
		return
	}
	next := map[placement.ID][]int{}
	for i, t := range p.CPUTasks {
		next[t.Unit] = append(next[t.Unit], i)
	}
	for i, t := range turns {
		if !t.offloads() {
			continue
		}
		q := next[t.unit.ID]
		if len(q) == 0 {
			continue
		}
		task := p.CPUTasks[q[0]]
		next[t.unit.ID] = q[1:]
		p.Turns[i].CPU = &task
	}
}
