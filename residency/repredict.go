package residency

import (
	"fmt"
	"slices"

	"vlanode/placement"
)

// Repredict is plan's prediction under profile p: the same homes, the same
// CPU share in each stage (so the same cuts of every split unit) and the
// same coded units, timed with p's figures. units and arch are the ones
// the plan was made from. On a host whose rates move (the H200's CPU
// memory bandwidth: bench/results/budgets.md runs 34–38), it says what
// the plan the executor ran predicts at the rates measured while it ran
// (vlanode bench), apart from what the planner would have chosen at them.
func Repredict(arch *Arch, units []placement.Unit, plan *Plan, p *Profile) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	items, err := itemsOf(units, p, plan.Options)
	if err != nil {
		return nil, err
	}
	pl := newPlanner(arch, items, plan.Workload, p, plan.BudgetBytes, plan.Options)
	byID := map[placement.ID]*UnitPlan{}
	for i := range plan.Units {
		byID[plan.Units[i].ID] = &plan.Units[i]
	}
	c := &choice{slot: plan.SlotBytes, homes: make([]stageSet, len(items)), stages: map[placement.Stage]stagePick{}}
	for i, it := range items {
		u, ok := byID[it.ID]
		if !ok {
			return nil, fmt.Errorf("residency: unit %s is not in the plan", it.ID)
		}
		for _, s := range u.Home {
			c.homes[i] |= stageBit(s)
		}
	}
	for _, s := range pl.stages {
		sp, ok := plan.Stage(s)
		if !ok {
			return nil, fmt.Errorf("residency: the plan has no stage %s", s)
		}
		pick := pl.simulateStage(c.homes, s, sp.CPUShare)
		if pick.kind != sp.Kind {
			return nil, fmt.Errorf("residency: stage %s re-simulated as %s, planned %s", s, pick.kind, sp.Kind)
		}
		pick.enter = pl.enterBytes(c.homes, s)
		c.stages[s] = pick
		c.total += pick.tl.end
	}
	out := pl.assemble(c, plan.MinBudgetBytes)
	out.Model, out.Workload, out.Options = plan.Model, plan.Workload, plan.Options
	if plan.Workload.Name == placement.StandardWorkloadName {
		out.applyGraphs(p)
	}
	return out, nil
}

// WithCPURate is a copy of p whose tier nearest rows reads gbps (10⁹
// bytes/s), its compute roof scaled with it, as profile --calibrate sets
// a tier from the executor: the profile at the rate a run measured.
func (p *Profile) WithCPURate(rows int, gbps float64) (*Profile, error) {
	if p.CPU == nil || len(p.CPU.Rates) == 0 {
		return nil, fmt.Errorf("residency: the profile has no CPU rates")
	}
	if !(gbps > 0) {
		return nil, fmt.Errorf("residency: a CPU rate of %g GB/s", gbps)
	}
	q := *p
	c := *p.CPU
	c.Rates = slices.Clone(p.CPU.Rates)
	c.Tier(rows).SetGBps(gbps)
	q.CPU = &c
	return &q, nil
}

// Tier is the profiled tier whose rows are nearest rows (the first of two
// as near): the one a calibration of that many rows sets.
func (c *CPUProfile) Tier(rows int) *CPURate {
	best := 0
	for i, r := range c.Rates {
		if max(r.Rows-rows, rows-r.Rows) < max(c.Rates[best].Rows-rows, rows-c.Rates[best].Rows) {
			best = i
		}
	}
	return &c.Rates[best]
}

// SetGBps sets the tier's rate, scaling its compute roof with it: at few
// rows the roof is the byte rate in FLOPs, measured from the same calls
// (a roof left behind would cap the new rate: CPUProfile.Ms).
func (r *CPURate) SetGBps(gbps float64) {
	r.TFLOPs *= gbps / r.GBps
	r.GBps = gbps
}
