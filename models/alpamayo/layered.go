package alpamayo

import (
	"errors"
	"fmt"
	"slices"

	"vlanode/backend"
	"vlanode/layering"
	"vlanode/models"
	"vlanode/models/qwen3"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/weights"
)

// Layering runs the model through a layering executor, its units placed by
// a residency plan: resident units are uploaded once, streamed ones stay in
// pinned host memory and are copied into the DFB slots before each use,
// the embedding table stays on the host.
type Layering struct {
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
	// Profile times every copy and compute (Result.Layers.Turns).
	Profile bool
	// CPU is the CPU engine's backend (a cpu.Backend on the host's cores)
	// for a plan that computes shares of units on the CPU; nil refuses
	// such a plan.
	CPU backend.Backend
	// Compress codes the units the plan streams compressed
	// (UnitPlan.Compressed) with models.Compress before the executor pins
	// them; its Alloc and Release must handle HostAlloc's memory. Nil
	// streams every unit raw, whatever the plan says.
	Compress *models.CompressOptions
	// Replan, when set with Compress, plans again with the units' exact
	// compressed sizes (the first plan estimated them); the new plan is
	// used when it places every unit as the loaded model has them
	// (resident, streamed or host; compressed or raw), else the first is
	// kept and Model.PlanNote says so.
	Replan func(stored map[placement.ID]int64, shareRatios map[placement.ID]float64) (*residency.Plan, error)
}

// layered is a loaded model's executor and its unit tables; it is the
// models.Runner of the VLM and the expert.
type layered struct {
	exec  *layering.Executor
	units map[*models.Unit]*layering.Unit
	slot  map[layering.Slot]int
	run   *layering.Runner // the inference in progress

	be   backend.Backend
	dev  layering.Device
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
}

// direct says whether inferences skip the executor (see resident).
func (l *layered) direct() bool { return l.resident && !l.profile }

// Direct reports that units run in place, outside any executor run
// (models.Direct).
func (l *layered) Direct() bool { return l.run == nil && l.direct() }

// placement returns the plan's units by ID, and the number of LM head
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

// unplanned is the weights of a unit the plan does not place: an unknown
// home, which the loader refuses with the unit's name.
const unplanned placement.Weights = "not in the plan"

// configureLoader makes ld place units as the plan says.
func (l *Layering) configureLoader(ld *models.Loader) error {
	if l.Plan == nil || l.Device == nil || l.View == nil {
		return errors.New("alpamayo: layering needs a plan, a device and a view function")
	}
	places, heads := placementOf(l.Plan)
	ld.HeadBlocks = heads
	ld.HostAlloc = l.HostAlloc
	ld.Place = func(id placement.ID) placement.Weights {
		p, ok := places[id]
		if !ok {
			return unplanned
		}
		return p.Weights
	}
	return nil
}

// newLayered checks the loaded units against the plan, makes the
// executor (its DFB slots and CPU engine) and binds the streamed units to
// the slots.
func (m *Model) newLayered(l *Layering, units []*models.Unit) error {
	places, _ := placementOf(l.Plan)
	lay := &layered{units: map[*models.Unit]*layering.Unit{}, slot: map[layering.Slot]int{}, be: m.be, dev: l.Device, view: l.View,
		cpu: l.CPU, place: map[*models.Unit]map[placement.Stage]placement.Placement{}, home: map[*models.Unit]string{},
		resident: true, profile: l.Profile}
	var all []*layering.Unit
	var errs []error
	for _, u := range units {
		p, ok := places[u.ID]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("alpamayo: the plan has no unit %s", u.ID))
			continue
		case p.Bytes != u.Blob.Size():
			errs = append(errs, fmt.Errorf("alpamayo: unit %s has %d bytes, the plan %d", u.ID, u.Blob.Size(), p.Bytes))
			continue
		case u.Weights == placement.Host:
			continue // read on the host, never by the executor
		case l.Mode == layering.Preload && u.Streamed():
			errs = append(errs, fmt.Errorf("alpamayo: preload mode with unit %s streamed by the plan", u.ID))
			continue
		}
		for s, pl := range p.Place {
			if (pl.Engine == placement.CPU || pl.CPUSplit > 0) && l.CPU == nil {
				errs = append(errs, fmt.Errorf("alpamayo: the plan computes a share of %s on the CPU in %s, and no CPU engine was given", u.ID, s))
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
		return err
	}
	staging, err := m.compress(l, units, lay)
	if err != nil {
		return err
	}
	exec, err := layering.New(l.Device, layering.Config{Mode: l.Mode, Profile: l.Profile, SlotBytes: roundUp(m.plan.SlotBytes), StagingBytes: staging}, all)
	if err != nil {
		return fmt.Errorf("alpamayo: %w", err)
	}
	lay.exec = exec
	slots := exec.Slots()
	for i, s := range slots {
		lay.slot[s] = i
	}
	m.layered = lay
	m.VLM.Vision.Exec, m.VLM.Text.Exec, m.Expert.Exec = lay, lay, lay
	return nil
}

// compress codes the units the plan streams compressed (Layering.Compress)
// and gives their executor units the compressed form; with Replan it
// plans again with the exact sizes. It returns the staging buffers' size
// for the executor: the plan's, when it holds every compressed unit, else
// 0 (sized by the units).
func (m *Model) compress(l *Layering, units []*models.Unit, lay *layered) (int64, error) {
	m.plan = l.Plan
	if l.Compress == nil || !l.Plan.Compressed {
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
	m.compression = rep
	if err != nil {
		return 0, fmt.Errorf("alpamayo: %w", err)
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
			m.planNote = fmt.Sprintf("the plan with the exact compressed sizes failed (%v): the estimate's plan runs", err)
		case !samePlacement(exact, units):
			m.planNote = "the plan with the exact compressed sizes places units otherwise: the estimate's plan runs"
		default:
			m.plan = exact
			p, _ := placementOf(exact)
			for u := range lay.units {
				lay.place[u] = p[u.ID].Place
			}
		}
	}
	if s := roundUp(m.plan.StagingBytes); s >= roundUp(largest) {
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

// Plan is the plan the model runs: Layering.Plan, or the plan made again
// with the exact compressed sizes (Layering.Replan); nil without
// Layering.
func (m *Model) Plan() *residency.Plan { return m.plan }

// Compression is what compressing the streamed units did (nil when none
// was compressed).
func (m *Model) Compression() *models.CompressReport { return m.compression }

// PlanNote says why the plan with the exact compressed sizes was not used,
// if it was not.
func (m *Model) PlanNote() string { return m.planNote }

// roundUp rounds n up to whole weights.Align.
func roundUp(n int64) int64 { return (n + weights.Align - 1) / weights.Align * weights.Align }

// bind points u's fields at the weights the shard says: a DFB slot, the
// GPU's share of a split in a slot, or the unit's home; and, when the CPU
// takes a share, gives the unit its split.
func (l *layered) bind(u *models.Unit, sh layering.Shard) error {
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
func (l *layered) Do(u *models.Unit, run func() error) error {
	lu, ok := l.units[u]
	if !ok {
		return fmt.Errorf("alpamayo: unit %s is not in the executor", u.Name)
	}
	if l.run == nil {
		if l.direct() {
			return run()
		}
		return fmt.Errorf("alpamayo: unit %s computed outside an inference", u.Name)
	}
	return l.run.Do(lu, func(sh layering.Shard) error {
		if err := l.bind(u, sh); err != nil {
			return err
		}
		defer u.SetSplit(nil)
		return run()
	})
}

// scheduleSpec is what one inference runs.
type scheduleSpec struct {
	decodes, steps int
	// answer: a question's answer, no diffusion.
	answer bool
	// guided: classifier-free guidance, a second prefill (the prompt
	// without the navigation text), the generated tokens fed to it in one
	// pass, and two expert passes per Euler step.
	guided bool
}

// schedule is one inference's passes: the vision pass, the prefill (and
// the unguided one), decodes decode steps (the ones a stop token makes
// unnecessary are skipped), the generated tokens fed to the unguided cache
// and steps Euler steps (two expert passes each with guidance).
func (m *Model) schedule(sp scheduleSpec) []layering.Pass {
	lay := m.layered
	pick := func(units []*models.Unit, s placement.Stage) ([]*layering.Unit, []placement.Placement) {
		var out []*layering.Unit
		var pls []placement.Placement
		for _, u := range units {
			if lu, ok := lay.units[u]; ok {
				out = append(out, lu)
				pls = append(pls, lay.place[u][s])
			}
		}
		return out, pls
	}
	text := m.VLM.Text
	var lm []*models.Unit
	for _, l := range text.LayerUnits {
		lm = append(lm, l.Attn, l.MLP)
	}
	lm = append(lm, headUnits(text.Head)...)
	stage := func(name string, s placement.Stage, units []*models.Unit, n int) []layering.Pass {
		us, pls := pick(units, s)
		out := layering.Repeat(string(s), us, n)
		for i := range out {
			out[i].Place = pls
			if n == 1 {
				out[i].Name = name
			}
		}
		return out
	}
	passes := stage("vision", placement.StageVision, m.VLM.Vision.Units, 1)
	passes = append(passes, stage("prefill", placement.StagePrefill, lm, 1)...)
	if sp.guided {
		passes = append(passes, stage("prefill.unguided", placement.StagePrefill, lm, 1)...)
	}
	passes = append(passes, stage("decode", placement.StageDecode, lm, sp.decodes)...)
	if sp.answer {
		return passes
	}
	steps := sp.steps
	if sp.guided {
		passes = append(passes, stage("feed.unguided", placement.StagePrefill, lm, 1)...)
		steps *= 2
	}
	return append(passes, stage("diffusion", placement.StageDiffusion, m.Expert.Units, steps)...)
}

// headUnits are the LM head blocks' units.
func headUnits(blocks []*qwen3.HeadBlock) []*models.Unit {
	out := make([]*models.Unit, len(blocks))
	for i, b := range blocks {
		out[i] = b.Unit
	}
	return out
}

// SetGraphs lets the decode and Euler steps replay captured graphs where
// the backend can (the default), or runs them op by op.
func (m *Model) SetGraphs(on bool) {
	m.VLM.Text.NoGraphs, m.Expert.NoGraphs = !on, !on
}

// SetProfiling turns the executor's per-unit timing on or off for the next
// inferences (Result.Layers.Turns); it does nothing without Layering.
func (m *Model) SetProfiling(on bool) {
	if m.layered != nil {
		m.layered.exec.SetProfile(on)
		m.layered.profile = on
	}
}
