// Package layered runs a model family's units through a layering executor
// as a residency plan places them, for any family: it configures the
// loader (where each unit's weights live, how many LM head blocks), checks
// the loaded units against the plan, makes the executor (its DFB slots and
// CPU engine), binds each unit's fields to the weights the executor hands
// it (a DFB slot, the GPU's share of a split, a home) and builds the
// passes of a schedule. models/alpamayo and models/qwen3 share it.
package layered

import (
	"errors"
	"fmt"
	"slices"

	"vlanode/backend"
	"vlanode/layering"
	"vlanode/models"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/weights"
)

// Config runs a model through a layering executor, its units placed by a
// residency plan: resident units are uploaded once, streamed ones stay in
// pinned host memory and are copied into the DFB slots before each use,
// the embedding table stays on the host.
type Config struct {
	// Plan places every unit (residency.NewPlan for the model's
	// architecture). Its unit sizes must match the checkpoint's.
	Plan *residency.Plan
	// Mode is the executor's mode. Preload needs a plan that streams
	// nothing.
	Mode layering.Mode
	// Device is the executor's device (cuda.DFBDevice, layering.Host).
	Device layering.Device
	// View is the weight tensor the blob entry e becomes in slot s
	// (cuda.DFBDevice.WeightAt; for layering.Host, a backend weight over
	// SlotData).
	View func(s layering.Slot, e weights.Entry) (backend.Tensor, error)
	// HostAlloc allocates the streamed units' host blobs (cuda.HostAlloc,
	// so that they can be pinned); nil means the Go heap.
	HostAlloc weights.Allocator
	// Profile times every copy and compute (layering.Profile.Turns).
	Profile bool
	// CPU is the CPU engine's backend (a cpu.Backend on the host's cores)
	// for a plan that computes shares of units on the CPU; nil refuses
	// such a plan.
	CPU backend.Backend
	// Replaceable loads every unit so that another plan of the same units
	// can place them later without reading the checkpoint again
	// (models.Loader.Replaceable): the blobs of resident units are
	// allocated by HostAlloc too and kept in host memory.
	Replaceable bool
	// Compress codes what the plan streams compressed (UnitPlan.Compressed
	// and CompressedShares) with models.Compress before the executor pins
	// anything; its Alloc and Release must handle HostAlloc's memory. Nil
	// streams every unit raw, whatever the plan says; so does Replaceable
	// (a later plan re-places the raw blobs).
	Compress *models.CompressOptions
	// Replan, when set with Compress, plans again with the units' exact
	// compressed sizes (the first plan estimated them); the new plan is
	// used when it places every unit as the loaded model has them
	// (resident, streamed or host; compressed or raw; shares coded at the
	// same cuts), else the first is kept and Executor.PlanNote says so.
	Replan func(stored map[placement.ID]int64, shareRatios map[placement.ID]float64) (*residency.Plan, error)
}

// unplanned is the weights of a unit the plan does not place: an unknown
// home, which the loader refuses with the unit's name.
const unplanned placement.Weights = "not in the plan"

// placementOf returns the plan's units by ID, and the number of LM head
// blocks it assumes.
func placementOf(plan *residency.Plan) (map[placement.ID]residency.UnitPlan, int) {
	out := map[placement.ID]residency.UnitPlan{}
	heads := 0
	for _, p := range plan.Units {
		out[p.ID] = p
		if p.ID.Module == placement.LMHead {
			heads++
		}
	}
	return out, heads
}

// ConfigureLoader makes ld place units as the plan says and cut the LM
// head into the plan's blocks.
func (c *Config) ConfigureLoader(ld *models.Loader) error {
	if c.Plan == nil || c.Device == nil || c.View == nil {
		return errors.New("layered: the executor needs a plan, a device and a view function")
	}
	places, heads := placementOf(c.Plan)
	ld.HeadBlocks = heads
	ld.HostAlloc = c.HostAlloc
	ld.Replaceable = c.Replaceable
	ld.Place = func(id placement.ID) placement.Weights {
		p, ok := places[id]
		if !ok {
			return unplanned
		}
		return p.Weights
	}
	return nil
}

// Executor is a loaded model's layering executor and its unit tables; it
// is the models.Runner of the model's units.
type Executor struct {
	exec  *layering.Executor
	units map[*models.Unit]*layering.Unit
	slot  map[layering.Slot]int
	run   *layering.Runner // the inference in progress

	be   backend.Backend
	view func(s layering.Slot, e weights.Entry) (backend.Tensor, error)
	cpu  backend.Backend // the CPU engine's, for shares of units
	// place is each unit's placement per stage, from the plan.
	place map[*models.Unit]map[placement.Stage]placement.Placement
	// home is the key of the home each unit's views were last bound to.
	home map[*models.Unit]string
	// resident says the plan streams nothing: with profiling off, an
	// inference then needs no executor run, and each unit's compute runs
	// in place (Direct), which lets the model replay captured graphs.
	resident, profile bool
	// plan is the plan the executor runs (Plan), compression what
	// compressing the streamed units did, planNote why a re-plan with the
	// exact compressed sizes was not used.
	plan        *residency.Plan
	compression *models.CompressReport
	planNote    string
}

// Replace places units (loaded with c.Replaceable by a loader that
// another plan of the same units configured) as c's plan says
// (models.Unit.Replace: the units that stop being resident first, so
// that their memory is free before the new residents take theirs) and
// returns their new executor; the previous executor's device MUST be
// closed before (the units' views into it are freed here).
func Replace(c *Config, be backend.Backend, units []*models.Unit) (*Executor, error) {
	places, heads := placementOf(c.Plan)
	have := 0
	for _, u := range units {
		if u.ID.Module == placement.LMHead {
			have++
		}
	}
	if have != heads {
		return nil, fmt.Errorf("layered: the plan cuts the LM head into %d blocks, the model has %d", heads, have)
	}
	for pass := range 2 {
		for _, u := range units {
			p, ok := places[u.ID]
			if !ok {
				return nil, fmt.Errorf("layered: the plan has no unit %s", u.ID)
			}
			// First every unit that leaves VRAM (and every view), then the
			// new residents.
			if (pass == 0) == (p.Weights != placement.Resident) {
				if err := u.Replace(be, p.Weights); err != nil {
					return nil, fmt.Errorf("layered: %w", err)
				}
			}
		}
	}
	return New(c, be, units)
}

// New checks the loaded units (every unit the loader that c configured
// loaded) against the plan, makes the executor (its DFB slots and CPU
// engine) and returns it; be is the model's backend.
func New(c *Config, be backend.Backend, units []*models.Unit) (*Executor, error) {
	places, _ := placementOf(c.Plan)
	lay := &Executor{units: map[*models.Unit]*layering.Unit{}, slot: map[layering.Slot]int{}, be: be, view: c.View,
		cpu: c.CPU, place: map[*models.Unit]map[placement.Stage]placement.Placement{}, home: map[*models.Unit]string{},
		resident: true, profile: c.Profile}
	var all []*layering.Unit
	var errs []error
	for _, u := range units {
		p, ok := places[u.ID]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("layered: the plan has no unit %s", u.ID))
			continue
		case p.Bytes != u.Blob.Size():
			errs = append(errs, fmt.Errorf("layered: unit %s has %d bytes, the plan %d", u.ID, u.Blob.Size(), p.Bytes))
			continue
		case u.Weights == placement.Host:
			continue // read on the host, never by the executor
		case c.Mode == layering.Preload && u.Streamed():
			errs = append(errs, fmt.Errorf("layered: preload mode with unit %s streamed by the plan", u.ID))
			continue
		}
		for s, pl := range p.Place {
			if (pl.Engine == placement.CPU || pl.CPUSplit > 0) && c.CPU == nil {
				errs = append(errs, fmt.Errorf("layered: the plan computes a share of %s on the CPU in %s, and no CPU engine was given", u.ID, s))
			}
		}
		if u.Streamed() {
			lay.resident = false
		}
		lu := &layering.Unit{ID: u.ID, Blob: u.Blob, Weights: u.Weights}
		if u.Splits() {
			lu.Share = func(c int) ([]weights.Rect, int64, error) {
				_, rects, n, err := u.Share(c)
				return rects, n, err
			}
		}
		lay.units[u] = lu
		lay.place[u] = p.Place
		all = append(all, lu)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	staging, err := lay.compress(c, units)
	if err != nil {
		return nil, err
	}
	exec, err := layering.New(c.Device, layering.Config{Mode: c.Mode, Profile: c.Profile, SlotBytes: roundUp(lay.plan.SlotBytes), StagingBytes: staging}, all)
	if err != nil {
		return nil, fmt.Errorf("layered: %w", err)
	}
	lay.exec = exec
	for i, s := range exec.Slots() {
		lay.slot[s] = i
	}
	return lay, nil
}

// compress codes the units the plan streams compressed (Config.Compress)
// and gives their executor units the compressed form; with Replan it
// plans again with the exact sizes. It returns the staging buffers' size
// for the executor: the plan's, when it holds every compressed unit, else
// 0 (sized by the units).
func (lay *Executor) compress(l *Config, units []*models.Unit) (int64, error) {
	lay.plan = l.Plan
	if l.Compress == nil || !l.Plan.Compressed || l.Replaceable {
		return 0, nil
	}
	places, _ := placementOf(l.Plan)
	var codings []models.Coding
	for _, u := range units {
		p, ok := places[u.ID]
		if !ok || !u.Streamed() || (!p.Compressed && len(p.CompressedShares) == 0) {
			continue
		}
		c := models.Coding{Unit: u, Whole: p.Compressed, KeepRaw: cpuShared(p)}
		for cut := range p.CompressedShares {
			c.Shares = append(c.Shares, cut)
		}
		slices.Sort(c.Shares)
		codings = append(codings, c)
	}
	rep, err := models.Compress(codings, *l.Compress)
	lay.compression = rep
	if err != nil {
		return 0, fmt.Errorf("layered: %w", err)
	}
	var largest int64
	for _, c := range codings {
		u, lu := c.Unit, lay.units[c.Unit]
		lu.Z, lu.ZShares = u.Z, u.ZShares
		if u.Z != nil {
			largest = max(largest, u.Z.Size())
		}
		for _, z := range u.ZShares {
			largest = max(largest, z.Size())
		}
	}
	if l.Replan != nil {
		exact, err := l.Replan(rep.Stored(), rep.ShareRatios())
		switch {
		case err != nil:
			lay.planNote = fmt.Sprintf("the plan with the exact compressed sizes failed (%v): the estimate's plan runs", err)
		case !samePlacement(exact, units):
			lay.planNote = "the plan with the exact compressed sizes places units otherwise: the estimate's plan runs"
		default:
			lay.plan = exact
			p, _ := placementOf(exact)
			for u := range lay.units {
				lay.place[u] = p[u.ID].Place
			}
		}
	}
	if s := roundUp(lay.plan.StagingBytes); s >= roundUp(largest) {
		return s, nil
	}
	return 0, nil
}

// samePlacement says whether plan places every loaded unit where it is:
// resident, streamed or host; compressed or raw; its GPU shares
// compressed at the cuts coded; and its raw blob kept where the CPU reads
// it.
func samePlacement(plan *residency.Plan, units []*models.Unit) bool {
	places, _ := placementOf(plan)
	for _, u := range units {
		p, ok := places[u.ID]
		if !ok || p.Weights != u.Weights || p.Compressed != (u.Z != nil) || len(p.CompressedShares) != len(u.ZShares) {
			return false
		}
		for cut := range p.CompressedShares {
			if u.ZShares[cut] == nil {
				return false
			}
		}
		if cpuShared(p) && u.Blob.Data == nil {
			return false
		}
	}
	return true
}

// cpuShared says whether the plan has the CPU compute a share of the unit
// (or all of it) in some stage: it reads the raw blob.
func cpuShared(p residency.UnitPlan) bool {
	for _, pl := range p.Place {
		if pl.Engine == placement.CPU || pl.CPUSplit > 0 {
			return true
		}
	}
	return false
}

// Plan is the plan the executor runs: Config.Plan, or the plan made again
// with the exact compressed sizes (Config.Replan).
func (l *Executor) Plan() *residency.Plan { return l.plan }

// Compression is what compressing the streamed units did (nil when
// nothing was compressed).
func (l *Executor) Compression() *models.CompressReport { return l.compression }

// PlanNote says why the plan with the exact compressed sizes was not used,
// if it was not.
func (l *Executor) PlanNote() string { return l.planNote }

// roundUp rounds n up to whole weights.Align.
func roundUp(n int64) int64 { return (n + weights.Align - 1) / weights.Align * weights.Align }

// Runs says whether inferences go through the executor: the plan streams
// something, or profiling is on. Otherwise every unit computes in place
// (Direct) and no Start is needed.
func (l *Executor) Runs() bool { return !(l.resident && !l.profile) }

// CPUShares says whether the plan computes a share of some unit on the
// CPU engine in some stage.
func (l *Executor) CPUShares() bool {
	for _, places := range l.place {
		for _, p := range places {
			if p.Engine == placement.CPU || p.CPUSplit > 0 {
				return true
			}
		}
	}
	return false
}

// Direct reports that units run in place, outside any executor run
// (models.Direct).
func (l *Executor) Direct() bool { return l.run == nil && !l.Runs() }

// Start begins an inference over passes (Stage builds them): the units'
// computes go through the executor until End.
func (l *Executor) Start(passes []layering.Pass) (*layering.Runner, error) {
	run, err := l.exec.Start(passes)
	if err != nil {
		return nil, fmt.Errorf("layered: %w", err)
	}
	l.run = run
	return run, nil
}

// End ends the inference Start began; after an error it lets the queued
// copies finish (Runner.Abort). Call it after Finish too: it is then a
// no-op on the runner.
func (l *Executor) End() {
	if l.run != nil {
		_ = l.run.Abort()
		l.run = nil
	}
}

// Stage is n passes of stage s over units (those the executor knows, in
// order), placed as the plan places them in s; a single pass is named
// name.
func (l *Executor) Stage(name string, s placement.Stage, units []*models.Unit, n int) []layering.Pass {
	var us []*layering.Unit
	var pls []placement.Placement
	for _, u := range units {
		if lu, ok := l.units[u]; ok {
			us = append(us, lu)
			pls = append(pls, l.place[u][s])
		}
	}
	out := layering.Repeat(string(s), us, n)
	for i := range out {
		out[i].Place = pls
		if n == 1 {
			out[i].Name = name
		}
	}
	return out
}

// SetProfiling turns the executor's per-unit timing on or off for the
// next inferences (layering.Profile.Turns).
func (l *Executor) SetProfiling(on bool) {
	l.exec.SetProfile(on)
	l.profile = on
}

// bind points u's fields at the weights the shard says: a DFB slot, the
// GPU's share of a split in a slot, or the unit's home; and, when the CPU
// takes a share, gives the unit its split.
func (l *Executor) bind(u *models.Unit, sh layering.Shard) error {
	view := func(e weights.Entry) (backend.Tensor, error) { return l.view(sh.Slot, e) }
	switch {
	case sh.Whole || sh.Slot == layering.NoSlot:
	case sh.CPU > 0:
		entries, _, _, err := u.Share(sh.CPU)
		if err != nil {
			return err
		}
		if err := u.UseAt(fmt.Sprintf("slot %d, share from %d", sh.Slot, sh.CPU), entries, view); err != nil {
			return err
		}
	default:
		if _, ok := l.slot[sh.Slot]; ok {
			if err := u.UseAt(fmt.Sprintf("slot %d", sh.Slot), nil, view); err != nil {
				return err
			}
			break
		}
		// Its home in this stage, at an offset of the stage's arena: new
		// views when the home is new.
		key := fmt.Sprintf("home %d+%d", sh.Slot, sh.Offset)
		if old, ok := l.home[u]; ok && old != key {
			for _, t := range u.DropAt(old) {
				l.be.Free(t)
			}
		}
		l.home[u] = key
		at := func(e weights.Entry) (backend.Tensor, error) {
			e.Offset += sh.Offset
			return l.view(sh.Slot, e)
		}
		if err := u.UseAt(key, nil, at); err != nil {
			return err
		}
	}
	if sh.CPU == 0 {
		u.SetSplit(nil)
		return nil
	}
	host, err := u.HostTensors(l.cpu)
	if err != nil {
		return err
	}
	u.SetSplit(&models.Split{CPU: sh.CPU, Whole: sh.Whole, Backend: l.cpu, Host: host,
		Offload: sh.Offload, Ready: sh.Ready, Join: sh.Join})
	return nil
}

// Do runs u's compute in the inference in progress (models.Runner).
func (l *Executor) Do(u *models.Unit, run func() error) error {
	lu, ok := l.units[u]
	if !ok {
		return fmt.Errorf("layered: unit %s is not in the executor", u.Name)
	}
	if l.run == nil {
		if !l.Runs() {
			return run()
		}
		return fmt.Errorf("layered: unit %s computed outside an inference", u.Name)
	}
	return l.run.Do(lu, func(sh layering.Shard) error {
		if err := l.bind(u, sh); err != nil {
			return err
		}
		defer u.SetSplit(nil)
		return run()
	})
}
