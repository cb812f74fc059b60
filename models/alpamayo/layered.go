package alpamayo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"vlanode/backend"
	"vlanode/layering"
	"vlanode/models"
	"vlanode/models/qwen3"
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
	// promote are the units the plan promotes after the prefill; home are
	// their slots of the inference in progress.
	promote []*models.Unit
	home    []layering.Slot
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

// plannerUnit is the residency planner's name of a model unit.
func plannerUnit(name string) (string, error) {
	index := func(prefix string) (int, bool) {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return 0, false
		}
		i, err := strconv.Atoi(rest)
		return i, err == nil && i >= 0
	}
	fixed := map[string]residency.Module{
		"vision.embed": residency.PatchEmbed, "vision.merger": residency.Merger, "embedding": residency.Embedding,
		"head": residency.LMHead, "action_in_proj": residency.ActionIn, "expert.head": residency.ActionOut,
	}
	if m, ok := fixed[name]; ok {
		return string(m) + ".0", nil
	}
	for _, p := range []struct {
		prefix string
		module residency.Module
	}{
		{"vision.block.", residency.Vision}, {"vision.deepstack.", residency.Deepstack}, {"layer.", residency.VLM},
		{"head.", residency.LMHead}, {"expert.layer.", residency.Expert},
	} {
		if i, ok := index(p.prefix); ok {
			return fmt.Sprintf("%s.%d", p.module, i), nil
		}
	}
	return "", fmt.Errorf("alpamayo: unit %s has no counterpart in the residency planner", name)
}

// placement returns the plan's placement of each unit by planner name,
// and the number of LM head blocks it assumes.
func placement(plan *residency.Plan) (map[string]residency.Placement, int) {
	out := map[string]residency.Placement{}
	heads := 0
	for _, p := range plan.Units {
		out[fmt.Sprintf("%s.%d", p.Module, p.Index)] = p
		if p.Module == residency.LMHead {
			heads++
		}
	}
	return out, heads
}

// configureLoader makes ld place units as the plan says.
func (l *Layering) configureLoader(ld *models.Loader) error {
	if l.Plan == nil || l.Device == nil || l.View == nil {
		return errors.New("alpamayo: layering needs a plan, a device and a view function")
	}
	places, heads := placement(l.Plan)
	ld.HeadBlocks = heads
	ld.HostAlloc = l.HostAlloc
	ld.Place = func(name string) models.Place {
		pn, err := plannerUnit(name)
		if err != nil {
			return models.Place("unplanned unit " + name)
		}
		p, ok := places[pn]
		if !ok {
			return models.Place("unplanned unit " + name)
		}
		return models.Place(p.Placement)
	}
	return nil
}

// newLayered checks the loaded units against the plan, makes the
// executor (its DFB slots) and binds the streamed units to the slots.
func (m *Model) newLayered(l *Layering, units []*models.Unit) error {
	places, _ := placement(l.Plan)
	lay := &layered{units: map[*models.Unit]*layering.Unit{}, slot: map[layering.Slot]int{}, be: m.be, dev: l.Device, view: l.View,
		resident: true, profile: l.Profile}
	var all []*layering.Unit
	var errs []error
	for _, u := range units {
		pn, err := plannerUnit(u.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p, ok := places[pn]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("alpamayo: the plan has no unit %s (%s)", pn, u.Name))
			continue
		case p.Bytes != u.Blob.Size():
			errs = append(errs, fmt.Errorf("alpamayo: unit %s (%s) has %d bytes, the plan %d", u.Name, pn, u.Blob.Size(), p.Bytes))
			continue
		case u.Place == models.Host:
			continue // read on the host, never by the executor
		case l.Mode == layering.Preload && u.Place == models.Streamed:
			errs = append(errs, fmt.Errorf("alpamayo: preload mode with unit %s streamed by the plan", u.Name))
			continue
		}
		if u.Place == models.Streamed {
			lay.resident = false
		}
		lu := &layering.Unit{Name: pn, Blob: u.Blob, Place: residency.Place(u.Place)}
		lay.units[u] = lu
		all = append(all, lu)
		if p.Promoted && u.Place == models.Streamed && l.Mode != layering.Preload {
			lay.promote = append(lay.promote, u)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	exec, err := layering.New(l.Device, layering.Config{Mode: l.Mode, Profile: l.Profile}, all)
	if err != nil {
		return fmt.Errorf("alpamayo: %w", err)
	}
	lay.exec = exec
	slots := exec.Slots()
	for i, s := range slots {
		lay.slot[s] = i
	}
	for _, u := range units {
		if u.Place != models.Streamed {
			continue
		}
		err := u.BindSlots(len(slots), func(i int, e weights.Entry) (backend.Tensor, error) { return l.View(slots[i], e) })
		if err != nil {
			return fmt.Errorf("alpamayo: %w", err)
		}
	}
	m.layered = lay
	m.VLM.Vision.Exec, m.VLM.Text.Exec, m.Expert.Exec = lay, lay, lay
	return nil
}

// promoteAfterPrefill gives the plan's promoted units slots of their own
// in the activation memory the prefill has freed, for the decode and the
// diffusion. When the budget refuses the memory (the plan's estimate of
// what the prefill frees was short) it promotes nothing and says why: the
// inference goes on, streaming them.
func (l *layered) promoteAfterPrefill() (int, error) {
	if len(l.promote) == 0 {
		return 0, nil
	}
	var units []*layering.Unit
	for _, u := range l.promote {
		s, err := l.dev.AllocSlot(u.Blob.Size())
		if err != nil {
			return 0, errors.Join(fmt.Errorf("promoting %s: %w", u.Name, err), l.releaseHomes())
		}
		l.home = append(l.home, s)
		l.slot[s] = len(l.exec.Slots())
		err = u.BindSlot(len(l.exec.Slots()), func(e weights.Entry) (backend.Tensor, error) { return l.view(s, e) })
		if err != nil {
			return 0, errors.Join(err, l.releaseHomes())
		}
		units = append(units, l.units[u])
	}
	if err := l.run.Promote(units, l.home); err != nil {
		return 0, err
	}
	return len(units), nil
}

// releaseHomes frees the promotion slots and the weight views bound in
// them (after the run's work is done).
func (l *layered) releaseHomes() error {
	var errs []error
	for i, s := range l.home {
		for _, t := range l.promote[i].DropSlot(l.slot[s]) {
			if t != nil {
				l.be.Free(t)
			}
		}
		errs = append(errs, l.dev.FreeSlot(s))
		delete(l.slot, s)
	}
	l.home = nil
	return errors.Join(errs...)
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
	return l.run.Do(lu, func(s layering.Slot) error {
		if s != layering.NoSlot {
			if err := u.Use(l.slot[s]); err != nil {
				return err
			}
		}
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
	pick := func(units []*models.Unit) []*layering.Unit {
		var out []*layering.Unit
		for _, u := range units {
			if lu, ok := lay.units[u]; ok {
				out = append(out, lu)
			}
		}
		return out
	}
	text := m.VLM.Text
	lm := append(append([]*models.Unit(nil), text.LayerUnits...), headUnits(text.Head)...)
	prefill := string(residency.StagePrefill)
	passes := []layering.Pass{
		{Name: "vision", Stage: string(residency.StageVision), Units: pick(m.VLM.Vision.Units)},
		{Name: "prefill", Stage: prefill, Units: pick(lm)},
	}
	if sp.guided {
		passes = append(passes, layering.Pass{Name: "prefill.unguided", Stage: prefill, Units: pick(lm)})
	}
	passes = append(passes, layering.Repeat(string(residency.StageDecode), pick(lm), sp.decodes)...)
	if sp.answer {
		return passes
	}
	steps := sp.steps
	if sp.guided {
		passes = append(passes, layering.Pass{Name: "feed.unguided", Stage: prefill, Units: pick(lm)})
		steps *= 2
	}
	return append(passes, layering.Repeat(string(residency.StageDiffusion), pick(m.Expert.Units), steps)...)
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
