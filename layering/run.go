package layering

import (
	"errors"
	"fmt"
	"time"

	"vlanode/placement"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// kind is how a turn gets its weights.
type kind int

const (
	inPlace  kind = iota // resident, host, or in its home already: no copy
	slotted              // copied (whole, or the GPU's share) into a DFB slot
	entering             // copied into its home, the first turn of its stage
	cpuWhole             // the CPU computes it all: no copy
)

// turn is one unit's place in a Run.
type turn struct {
	pass  int // index into the Run's passes
	unit  *Unit
	place placement.Placement
	kind  kind
	home  bool  // it computes from its home (entering, or in its home already)
	j     int   // position among the slotted turns; -1 if not slotted
	slot  Slot  // slot j mod len(slots), the home's arena, or NoSlot
	off   int64 // where its home starts in the arena
	cpu   int   // the CPU's share of the split dimension
	rects []weights.Rect
	bytes int64 // what its copy moves (raw: a compressed turn moves z.Size())
	// z says the copy moves compressed bytes (zu: Unit.Z, or the GPU's
	// share from Unit.ZShares) into a staging buffer and a decode expands
	// them.
	z  bool
	zu *bf16z.Unit

	copied bool         // its copy is queued
	ready  bool         // the compute stream waits for its weights
	join   func() error // takes the CPU's result back (Shard.Join)
	// stage is the index of the turn's stage in the Run (Runner.stages).
	stage int

	// Timing events (Config.Profile): around the copy (slotted and
	// entering turns), the decode (compressed turns) and the compute.
	// Zero when not profiling.
	copyStart, copyEnd, decStart, decEnd, exeStart, exeEnd Event
}

// copies says whether the turn copies weights.
func (t *turn) copies() bool { return t.kind == slotted || t.kind == entering }

// offloads says the CPU computes some of t (a share, or the whole unit).
func (t *turn) offloads() bool { return t.cpu > 0 || t.kind == cpuWhole }

// stageHomes is one stage of a Run: its name and the units that have a
// home in it.
type stageHomes struct {
	name  string
	homes map[*Unit]bool
}

// Runner runs one schedule of passes a unit at a time, driven by the model
// code that computes them: Do queues the next unit's compute (and, before
// it, the copies the protocol needs), Skip drops the rest of a stage that
// ended early (a decode that sampled its stop token), Finish waits for the
// work and returns its timing. Slotted turns are counted across all
// passes, so the copies of a pass's first streamed units overlap the
// previous pass's last computes.
//
// Where a stage gives a unit a home (placement resident for a unit whose
// weights are not loaded for good), the unit's first turn in the stage
// copies it there and its later turns compute in place. At the stage's
// start the homes the stage does not keep are freed (after the device has
// finished with them) and the new ones allocated: a stage boundary
// re-places weights, within the same budget.
type Runner struct {
	e      *Executor
	passes []Pass
	turns  []*turn // the schedule still to compute is turns[cur:]
	cur    int
	stages []stageHomes
	// entered is the last stage whose homes are in place (-1 before the
	// first).
	entered int

	// order is every copying turn in copy order, wasted copies of skipped
	// turns included; order[:next] are queued.
	order []*turn
	next  int

	marks  int // timing events handed out
	failed error
	ended  bool
	// HomeErrors says why a stage's homes could not be allocated (the
	// units were streamed instead).
	homeErrors []error
}

// Start begins a Run over passes: it checks that every unit was given to
// New and every placement is one the executor can run, lays out the turns,
// places the first stage's homes and queues the first copies. The caller
// then calls Do once per turn, in order, and Finish (or Abort).
func (e *Executor) Start(passes []Pass) (*Runner, error) {
	r := &Runner{e: e, passes: passes, entered: -1}
	e.zRecs, e.zJobs = nil, 0
	cur := map[*Unit]bool{}
	for u := range e.homes {
		cur[u] = true
	}
	for p, pass := range passes {
		if pass.Place != nil && len(pass.Place) != len(pass.Units) {
			return nil, fmt.Errorf("layering: pass %s: %d placements for %d units", pass.Name, len(pass.Place), len(pass.Units))
		}
		if len(r.stages) == 0 || r.stages[len(r.stages)-1].name != pass.Stage || pass.Stage == "" {
			r.stages = append(r.stages, stageHomes{name: pass.Stage, homes: map[*Unit]bool{}})
		}
		st := &r.stages[len(r.stages)-1]
		for k, u := range pass.Units {
			if !e.known[u] {
				return nil, fmt.Errorf("layering: pass %s: unit %v was not given to New", pass.Name, unitName(u))
			}
			t, err := e.newTurn(p, u, pass.placeOf(k, u))
			if err != nil {
				return nil, fmt.Errorf("layering: pass %s: %w", pass.Name, err)
			}
			t.stage = len(r.stages) - 1
			if t.home {
				st.homes[u] = true
			}
			if err := r.mark(t); err != nil {
				return nil, err
			}
			r.turns = append(r.turns, t)
		}
	}
	// Which turns enter a home: the first of a unit in a stage whose
	// homes did not hold it before.
	seen := map[*Unit]int{}
	for _, t := range r.turns {
		if !t.home {
			continue
		}
		if last, ok := seen[t.unit]; !ok || last != t.stage {
			if (t.stage == 0 && !cur[t.unit]) || (t.stage > 0 && !r.stages[t.stage-1].homes[t.unit]) {
				t.kind = entering
			}
			seen[t.unit] = t.stage
		}
	}
	for _, t := range r.turns {
		if t.copies() {
			r.order = append(r.order, t)
		}
	}
	r.number(0)
	e.startedAt = time.Now()
	if e.engine != nil {
		e.engine.start(e.startedAt)
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
	if len(r.stages) > 0 {
		if err := r.enter(0); err != nil {
			return nil, r.fail(err)
		}
	}
	if e.cfg.Mode == Pipelined {
		if err := r.prefetch(len(e.slots)); err != nil {
			return nil, r.fail(err)
		}
	}
	return r, nil
}

// placeOf is unit k's placement in the pass.
func (p Pass) placeOf(k int, u *Unit) placement.Placement {
	if p.Place != nil {
		return p.Place[k]
	}
	switch u.Weights {
	case placement.Streamed:
		return placement.StreamGPU
	case placement.Host:
		return placement.HostCPU
	}
	return placement.OnGPU
}

// newTurn makes the turn of u placed pl in pass p.
func (e *Executor) newTurn(p int, u *Unit, pl placement.Placement) (*turn, error) {
	t := &turn{pass: p, unit: u, place: pl, j: -1, slot: NoSlot}
	if err := pl.Validate(max(pl.CPUSplit+1, 1)); err != nil {
		return nil, fmt.Errorf("unit %s: %w", u.ID, err)
	}
	switch {
	case u.Weights == placement.Host && pl.Engine == placement.CPU:
		// Host weights read in place by the model (the embedding's rows).
	case e.cfg.Mode == Preload && (pl.Engine == placement.CPU || pl.CPUSplit > 0):
		return nil, fmt.Errorf("unit %s placed %s in preload mode, which computes every unit on the GPU in place", u.ID, pl)
	case e.cfg.Mode == Preload:
		// The caller loaded every unit resident: in place.
	case pl.Engine == placement.CPU:
		if u.Share == nil {
			return nil, fmt.Errorf("unit %s placed on the CPU cannot split", u.ID)
		}
		t.kind = cpuWhole
	case pl.Weights == placement.Resident && u.Weights == placement.Resident:
		// Loaded into VRAM for good: in place.
	case pl.Weights == placement.Resident:
		t.home = true
	case pl.Weights == placement.Streamed:
		t.kind, t.bytes, t.z, t.zu = slotted, u.size(), u.Z != nil, u.Z
		if pl.CPUSplit > 0 {
			t.z, t.zu = false, nil
			if !u.hasRaw() {
				return nil, fmt.Errorf("unit %s has no raw host bytes: the CPU cannot read a share of it", u.ID)
			}
			if u.Share == nil {
				return nil, fmt.Errorf("unit %s split with the CPU cannot split", u.ID)
			}
			rects, n, err := u.Share(pl.CPUSplit)
			if err != nil {
				return nil, fmt.Errorf("unit %s: the GPU's share of a split at %d: %w", u.ID, pl.CPUSplit, err)
			}
			t.cpu, t.rects, t.bytes = pl.CPUSplit, rects, n
			if zs := u.ZShares[pl.CPUSplit]; zs != nil {
				if zs.RawSize < n {
					return nil, fmt.Errorf("unit %s: its compressed share at %d decodes %d bytes, the share has %d", u.ID, pl.CPUSplit, zs.RawSize, n)
				}
				t.z, t.zu = true, zs // the GPU's share, compressed
			}
		}
		if t.bytes > e.SlotBytes {
			return nil, fmt.Errorf("unit %s streams %d bytes into slots of %d", u.ID, t.bytes, e.SlotBytes)
		}
	default:
		return nil, fmt.Errorf("unit %s: placement %s", u.ID, pl)
	}
	if t.kind == cpuWhole {
		if !u.hasRaw() {
			return nil, fmt.Errorf("unit %s has no raw host bytes: the CPU cannot compute it", u.ID)
		}
		t.cpu = -1 // the whole split dimension: the model knows it
	}
	if t.home {
		t.bytes, t.z, t.zu = u.size(), u.Z != nil, u.Z
	}
	return t, nil
}

// enter places the homes of stage k: the device's work is finished with
// the homes the stage does not keep, which are freed, then the new ones
// are allocated (a refused allocation streams the unit instead for the
// stage, and says why in HomeErrors).
func (r *Runner) enter(k int) error {
	e := r.e
	st := r.stages[k]
	var leaving []*Unit
	for u := range e.homes {
		if !st.homes[u] {
			leaving = append(leaving, u)
		}
	}
	if len(leaving) > 0 {
		if err := e.dev.Synchronize(); err != nil {
			return fmt.Errorf("layering: entering stage %s: %w", st.name, err)
		}
		for _, u := range leaving {
			h := e.homes[u]
			delete(e.homes, u)
			e.homeReady[u] = -1
			if e.arenas[h.arena]--; e.arenas[h.arena] > 0 {
				continue
			}
			delete(e.arenas, h.arena)
			if err := e.dev.FreeSlot(h.arena); err != nil {
				return fmt.Errorf("layering: freeing the homes of stage %s: %w", st.name, err)
			}
		}
	}
	// The stage's new homes: one arena for them all (one allocation, not
	// one a unit), each at an aligned offset; if the budget refuses it,
	// one allocation each, and a unit refused its own is streamed.
	var newHomes []*Unit
	seen := map[*Unit]bool{}
	for _, t := range r.turns[r.cur:] {
		if t.stage != k || !t.home || t.kind != entering || seen[t.unit] {
			continue
		}
		if _, ok := e.homes[t.unit]; ok {
			continue
		}
		seen[t.unit] = true
		newHomes = append(newHomes, t.unit)
	}
	refused := map[*Unit]bool{}
	if len(newHomes) > 0 {
		var total int64
		for _, u := range newHomes {
			total += roundUp(u.size(), weights.Align)
		}
		if a, err := e.dev.AllocSlot(total); err == nil {
			var off int64
			for _, u := range newHomes {
				e.homes[u] = home{arena: a, off: off}
				off += roundUp(u.size(), weights.Align)
			}
			e.arenas[a] = len(newHomes)
		} else {
			for _, u := range newHomes {
				a, err := e.dev.AllocSlot(roundUp(u.size(), weights.Align))
				if err != nil {
					r.homeErrors = append(r.homeErrors, fmt.Errorf("home of %s in %s: %w", u.ID, st.name, err))
					refused[u] = true
					continue
				}
				e.homes[u] = home{arena: a}
				e.arenas[a] = 1
			}
		}
		for _, u := range newHomes {
			if refused[u] || e.homeReady[u] >= 0 {
				continue
			}
			ev, err := e.dev.NewEvent("home-ready " + u.ID.String())
			if err != nil {
				return fmt.Errorf("layering: %w", err)
			}
			e.homeReady[u] = ev
		}
	}
	for _, t := range r.turns[r.cur:] {
		if t.stage != k || !t.home {
			continue
		}
		if refused[t.unit] {
			if len(e.slots) == 0 || t.unit.size() > e.SlotBytes {
				return fmt.Errorf("layering: %w, and no slot can stream it", errors.Join(r.homeErrors...))
			}
			t.kind, t.home, t.bytes = slotted, false, t.unit.size()
			continue
		}
		h := e.homes[t.unit]
		t.slot, t.off = h.arena, h.off
	}
	if len(refused) > 0 {
		kept := r.order[:r.next:r.next]
		for _, t := range r.turns[r.cur:] {
			if t.stage == k && t.kind == slotted && refused[t.unit] && !t.copied {
				kept = append(kept, t)
			}
		}
		// Keep the copy order the turns' order.
		var rest []*turn
		for _, t := range r.order[r.next:] {
			if !refused[t.unit] || t.stage != k {
				rest = append(rest, t)
			}
		}
		r.order = mergeOrder(kept, rest, r.turns)
		r.number(r.next)
	}
	r.entered = k
	return nil
}

// mergeOrder puts the copying turns a and b (each in turn order, a's
// first r.next ones already queued) back into turn order.
func mergeOrder(a, b []*turn, turns []*turn) []*turn {
	in := map[*turn]bool{}
	for _, t := range a {
		in[t] = true
	}
	for _, t := range b {
		in[t] = true
	}
	var out []*turn
	for _, t := range turns {
		if in[t] {
			out = append(out, t)
		}
	}
	return out
}

// number gives the slotted turns of order[from:] their copy positions
// and slots.
func (r *Runner) number(from int) {
	j := 0
	for _, t := range r.order[:from] {
		if t.kind == slotted {
			j = t.j + 1
		}
	}
	for _, t := range r.order[from:] {
		if t.kind != slotted {
			t.j = -1
			continue
		}
		t.j, t.slot = j, r.e.slots[j%len(r.e.slots)]
		j++
	}
}

// mark gives t its timing events when profiling.
func (r *Runner) mark(t *turn) (err error) {
	if !r.e.cfg.Profile {
		return nil
	}
	var m []Event
	if m, err = r.e.mark(&r.marks); err != nil {
		return err
	}
	t.copyStart, t.copyEnd, t.decStart, t.decEnd, t.exeStart, t.exeEnd = m[0], m[1], m[2], m[3], m[4], m[5]
	return nil
}

// Failed reports whether the Run has failed (every later call fails).
func (r *Runner) Failed() bool { return r.failed != nil }

// HomeErrors says why homes the plan gave units could not be allocated
// (those units were streamed instead in the stage).
func (r *Runner) HomeErrors() error { return errors.Join(r.homeErrors...) }

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
// u.Run when run is nil) is called with the shard that says where u's
// weights are, once the protocol has queued the copy and the waits it
// needs. An error ends the Run: the Runner waits for the queued work, so
// no copy still writes a slot, and every later call fails.
func (r *Runner) Do(u *Unit, run func(Shard) error) error {
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
	if t.stage > r.entered {
		if err := r.enter(t.stage); err != nil {
			return r.fail(err)
		}
		if err := r.keepAhead(); err != nil {
			return r.fail(err)
		}
	}
	if run == nil {
		run = u.Run
	}
	pipelined := r.e.cfg.Mode == Pipelined
	if t.copies() && !t.copied && !pipelined {
		if err := r.e.copyTurn(t); err != nil {
			return r.fail(err)
		}
		t.copied = true
	}
	if t.copies() && !t.copied {
		// A pipelined copy not yet queued (an entering copy behind a
		// stage boundary): queue the copies up to it now.
		if err := r.prefetchTo(t); err != nil {
			return r.fail(err)
		}
	}
	if err := r.e.computeTurn(r, t, run); err != nil {
		return r.fail(err)
	}
	r.cur++
	if t.j >= 0 && pipelined {
		// The next user of this slot is slotted turn j+2.
		if err := r.prefetch(t.j + 1 + len(r.e.slots)); err != nil {
			return r.fail(err)
		}
	}
	return nil
}

// offload queues a CPU task of unit, timed on a HostTimer device.
func (r *Runner) offload(unit placement.ID, task func(func()) error) error {
	e := r.e
	if ht, ok := e.dev.(HostTimer); ok {
		if err := ht.HostStart(e.compute, unit); err != nil {
			return err
		}
	}
	if e.engine == nil {
		e.engine = newEngine()
		e.engine.start(e.startedAt)
	}
	e.engine.submit(unit, task)
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
// that read the slot. A dropped turn that would have entered its home
// leaves that to the unit's next turn in the stage, if any.
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
	for t := range dropped {
		if t.kind != entering || t.copied {
			continue
		}
		// Its home is filled by the unit's next turn in the stage.
		for _, n := range r.turns[r.cur:] {
			if n.unit == t.unit && n.stage == t.stage {
				n.kind = entering
				break
			}
		}
	}
	var order []*turn
	for _, t := range r.turns[r.cur:] {
		if t.copies() && !t.copied {
			order = append(order, t)
		}
	}
	// Keep the queued copies (wasted or not) in place; renumber the rest.
	r.order = append(r.order[:r.next:r.next], order...)
	r.number(r.next)
	return r.keepAhead() // two copies ahead of the next slotted compute
}

// keepAhead queues, in pipelined mode, the copies of the next slotted
// turns up to the two slots (after the schedule changed).
func (r *Runner) keepAhead() error {
	if r.e.cfg.Mode != Pipelined {
		return nil
	}
	for _, t := range r.turns[r.cur:] {
		if t.j >= 0 {
			return r.prefetch(t.j + len(r.e.slots))
		}
		if t.kind == entering {
			if t.stage > r.entered {
				return nil // its stage's homes come first
			}
			return r.prefetchTo(t)
		}
	}
	return nil
}

// prefetch queues the copies in order up to the slotted turn at position
// upTo (excluded), stopping at an entering copy whose stage's homes are
// not placed yet.
func (r *Runner) prefetch(upTo int) error {
	for ; r.next < len(r.order); r.next++ {
		t := r.order[r.next]
		if (t.kind == slotted && t.j >= upTo) || (t.kind == entering && t.stage > r.entered) {
			return nil
		}
		if err := r.e.copyTurn(t); err != nil {
			return err
		}
		t.copied = true
	}
	return nil
}

// prefetchTo queues the copies in order up to and including t's (which
// the caller is about to compute), as far as the slots allow: a slotted
// copy before it waits for its slot on the copy stream.
func (r *Runner) prefetchTo(t *turn) error {
	for ; r.next < len(r.order) && !t.copied; r.next++ {
		o := r.order[r.next]
		if o.kind == entering && o.stage > r.entered {
			return fmt.Errorf("layering: the copy of %s waits for the homes of a later stage", o.unit.ID)
		}
		if err := r.e.copyTurn(o); err != nil {
			return err
		}
		o.copied = true
	}
	return nil
}

// Finish checks that the whole schedule ran, waits for the work (the
// device's and the CPU engine's) and returns its timing.
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
	tasks, err := e.drainEngine()
	if err != nil {
		return nil, errors.Join(err, e.decodeStatus())
	}
	if err := e.decodeStatus(); err != nil {
		return nil, err
	}
	p, err := e.profile(r.passes, r.turns)
	if err != nil {
		return nil, err
	}
	p.CPUTasks = tasks
	p.attachCPU(r.turns)
	p.HomeErrors = r.HomeErrors()
	return p, nil
}

// Abort ends a Run early (the caller's own error): it waits for the
// queued work so no copy still writes a slot. Later calls fail.
func (r *Runner) Abort() error {
	if r.ended || r.failed != nil {
		return nil
	}
	r.ended = true
	_, eerr := r.e.drainEngine()
	serr := r.e.dev.Synchronize()
	return errors.Join(serr, eerr, r.e.decodeStatus())
}

// fail ends the Run with err after the queued work has finished.
func (r *Runner) fail(err error) error {
	if r.failed == nil {
		_, eerr := r.e.drainEngine()
		serr := r.e.dev.Synchronize()
		r.failed = errors.Join(err, serr, eerr, r.e.decodeStatus())
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

// turnMarks is the timing events of a turn: around its copy, its decode
// and its compute.
const turnMarks = 6

// mark hands out the next turnMarks timing events of the pool, growing
// it.
func (e *Executor) mark(used *int) ([]Event, error) {
	for len(e.marks) < *used+turnMarks {
		ev, err := e.dev.NewEvent(fmt.Sprintf("mark[%d]", len(e.marks)))
		if err != nil {
			return nil, fmt.Errorf("layering: timing event: %w", err)
		}
		e.marks = append(e.marks, ev)
	}
	m := e.marks[*used : *used+turnMarks]
	*used += turnMarks
	return m, nil
}

// unitName names u in errors, nil included.
func unitName(u *Unit) string {
	if u == nil {
		return "<nil>"
	}
	return u.ID.String()
}
