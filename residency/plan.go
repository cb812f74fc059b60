package residency

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// Plan is the planner's answer: where each unit lives, where every byte
// of the budget goes, and the predicted latency.
type Plan struct {
	Model    string
	Workload Workload
	// BudgetBytes is the budget planned for; 0 means unlimited.
	BudgetBytes int64
	// MinBudgetBytes is the smallest budget that plans: fixed costs plus
	// two DFB slots for the largest unit, everything streamed.
	MinBudgetBytes int64
	// Bytes says where the budget goes, by purpose; with a budget they add
	// up to it (PurposeFree is the rest).
	Bytes map[Purpose]int64
	// SlotBytes is one DFB slot (the largest streamed unit); 0 when every
	// unit is resident.
	SlotBytes int64
	// Units are every unit in execution order.
	Units []Placement
	// PredictedMs is the simulated latency of each stage that runs.
	PredictedMs map[Stage]float64
	// TotalMs is their sum.
	TotalMs float64
	// PreloadMs is ΣR·C_EXE per stage, the latency with every unit
	// resident (the paper's C_opt); no plan predicts less.
	PreloadMs map[Stage]float64
	// PreloadTotalMs is their sum.
	PreloadTotalMs float64
	// PromotedBytes are the streamed units promoted after the prefill
	// (Placement.Promoted); PromoteCopyMs is the time to copy them, part of
	// the decode's prediction.
	PromotedBytes int64
	PromoteCopyMs float64
	// Timing counts the units' compute times by where they came from
	// ("profile", "scaled", "roofline": see Profile.Cost).
	Timing map[string]int
	// Roofline lists the modules and stages timed by the roofline alone
	// (the profile has nothing for them), e.g. "action_in/diffusion".
	Roofline []string
}

// Placement is one unit's place in a plan.
type Placement struct {
	Module    Module `json:"module"`
	Index     int    `json:"index"`
	Bytes     int64  `json:"bytes"`
	Placement Place  `json:"placement"`
	// BenefitMsPerMB is the unit's residency benefit B by the position
	// rules (0 for host units).
	BenefitMsPerMB float64 `json:"benefit_ms_per_mb"`
	// Promoted streamed units are copied once per inference, after the
	// prefill, into the VRAM the vision pass and the prefill no longer
	// need (their activations): decode and diffusion compute them in place.
	Promoted bool `json:"promoted,omitempty"`
}

// NewPlan plans arch under workload w with profile p within budget bytes
// (0: unlimited). A budget below the minimum is a *BudgetError.
func NewPlan(arch *Arch, w Workload, p *Profile, budget int64) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	units, err := arch.Units(w)
	if err != nil {
		return nil, err
	}
	p.Cost(units)
	items := make([]item, len(units))
	for i, u := range units {
		items[i] = item{Unit: u, dma: p.DMAMs(u.Bytes)}
	}
	fixed := arch.fixedCosts(w, p)
	plan, err := planItems(items, fixed, budget, fixed[PurposeActivations]-arch.decodeActivationBytes(arch.geometry(w)))
	if err != nil {
		return nil, err
	}
	plan.Model, plan.Workload = arch.Name, w
	plan.applyGraphs(p)
	return plan, nil
}

// applyGraphs makes the stages that run with every unit resident — the
// preload times, and the prediction of a plan that streams nothing — take
// the profile's measured stage times: decode and Euler steps as timed
// replayed from captured graphs (the model replays them when nothing
// streams), vision and prefill as timed op by op. A layering executor
// computes unit by unit, as the units were timed, so a streaming plan
// keeps the sums of its unit times.
//
// Each stage scales by its measured time over the sum of its unit times,
// at most 1: the units were timed with events around each (2 more
// inferences), which can add up to more than the stage as served (a
// profile gives the excess to no unit), never less (the stage's host share
// fills the gap). A graph time is used where it is below the op-by-op
// time: a replay runs the same kernels with fewer launches, so a profile
// that timed it slower (by a few percent, from two inferences each)
// measured noise. So a plan that streams nothing is never predicted
// slower than one that streams a unit.
func (plan *Plan) applyGraphs(p *Profile) {
	for _, s := range Stages() {
		target := p.StageMs[s]
		if g := p.GraphStageMs[s]; g > 0 && (s == StageDecode || s == StageDiffusion) {
			target = min(g, target)
		}
		sum, ok := plan.PreloadMs[s]
		if target <= 0 || !ok || sum <= 0 {
			continue
		}
		f := min(target/sum, 1)
		plan.PreloadMs[s] = sum * f
		plan.PreloadTotalMs += sum*f - sum
		if ms, ok := plan.PredictedMs[s]; ok && plan.SlotBytes == 0 {
			plan.PredictedMs[s] = ms * f
			plan.TotalMs += ms*f - ms
		}
	}
}

// planItems places items under budget after the fixed costs; promoteRoom
// is the activation memory that is free again after the prefill.
func planItems(items []item, fixed map[Purpose]int64, budget, promoteRoom int64) (*Plan, error) {
	if budget < 0 {
		return nil, fmt.Errorf("residency: negative budget %d", budget)
	}
	if err := checkPasses(items); err != nil {
		return nil, err
	}
	var fixedSum, all int64
	for _, n := range fixed {
		fixedSum += n
	}
	none := make([]bool, len(items))
	for i := range items {
		if !items[i].Host {
			all += items[i].Bytes
		}
	}
	slot := largestStreamed(items, none)
	minimum := fixedSum + dfbSlots*slot
	l := newLayout(items)
	resident := make([]bool, len(items))
	switch {
	case budget == 0 || fixedSum+all <= budget:
		for i := range items {
			resident[i] = !items[i].Host
		}
	case budget < minimum:
		return nil, &BudgetError{Budget: budget, Min: minimum, Fixed: fixed, Slot: slot}
	default:
		// Fill twice, judging each step without and with the promotions
		// that follow the prefill, and keep the faster plan: a resident
		// that only saves what a promotion would save anyway is worth less
		// than it seems without them.
		best := math.Inf(1)
		for _, pr := range []int64{-1, promoteRoom} {
			f := &filler{l: l, count: make([]int, len(l.modules)), blocked: make([]bool, len(l.modules)),
				resident: make([]bool, len(items)), room: budget - fixedSum, promoteRoom: pr}
			for _, m := range l.modules {
				f.marg = append(f.marg, l.marginals(m))
			}
			f.total = f.predict(f.resident)
			f.fill()
			if t := predictStages(items, f.resident, promoteRoom).total; t < best {
				best, resident = t, f.resident
			}
		}
	}
	return assemble(l, resident, fixed, budget, minimum, promoteRoom), nil
}

// checkPasses requires the units of a stage to agree on its passes.
func checkPasses(items []item) error {
	passes := map[Stage]int{}
	for _, it := range items {
		for _, w := range it.Work {
			if p, ok := passes[w.Stage]; ok && p != w.Passes {
				return fmt.Errorf("residency: %s runs %d passes of %s, other units %d", it.String(), w.Passes, w.Stage, p)
			}
			passes[w.Stage] = w.Passes
		}
	}
	return nil
}

// assemble writes the plan of a resident set.
func assemble(l *layout, resident []bool, fixed map[Purpose]int64, budget, minimum, promoteRoom int64) *Plan {
	p := &Plan{BudgetBytes: budget, MinBudgetBytes: minimum, Bytes: map[Purpose]int64{},
		PredictedMs: map[Stage]float64{}, PreloadMs: map[Stage]float64{}, Timing: map[string]int{}}
	for k, v := range fixed {
		p.Bytes[k] = v
	}
	benefit := map[int]float64{}
	for _, m := range l.modules {
		for k, i := range m.idxs {
			benefit[i] = l.benefit(m, k)
		}
	}
	for i, it := range l.items {
		pl := Placement{Module: it.Module, Index: it.Index, Bytes: it.Bytes, Placement: Streamed, BenefitMsPerMB: benefit[i]}
		switch {
		case it.Host:
			pl.Placement = Host
		case resident[i]:
			pl.Placement = Resident
			p.Bytes[PurposeResident] += it.Bytes
		}
		p.Units = append(p.Units, pl)
		for _, w := range it.Work {
			p.PreloadMs[w.Stage] += float64(w.Passes) * w.ExeMs
			p.PreloadTotalMs += float64(w.Passes) * w.ExeMs
			p.Timing[w.Timing]++
			if k := string(it.Module) + "/" + string(w.Stage); w.Timing == "roofline" && !slices.Contains(p.Roofline, k) {
				p.Roofline = append(p.Roofline, k)
			}
		}
	}
	p.SlotBytes = largestStreamed(l.items, resident)
	p.Bytes[PurposeSlots] = dfbSlots * p.SlotBytes
	if budget > 0 {
		var used int64
		for _, n := range p.Bytes {
			used += n
		}
		p.Bytes[PurposeFree] = budget - used
	}
	// Promotions use the activation memory the prefill frees, not the
	// budget's free bytes: those shrink when more budget adds a resident,
	// and more budget must never plan slower.
	room := int64(-1) // no promotion without a budget or with nothing streamed
	if budget > 0 && p.SlotBytes > 0 {
		room = promoteRoom
	}
	pred := predictStages(l.items, resident, room)
	for i := range l.items {
		if pred.later[i] && !resident[i] {
			p.Units[i].Promoted = true
			p.PromotedBytes += l.items[i].Bytes
		}
	}
	p.PromoteCopyMs, p.PredictedMs, p.TotalMs = pred.copyMs, pred.stages, pred.total
	return p
}

// prediction is the simulated latency of a resident set.
type prediction struct {
	stages map[Stage]float64
	total  float64
	later  []bool  // the resident set after the prefill (with promotions)
	copyMs float64 // copying the promoted units
}

// predictStages simulates every stage: vision and prefill with resident,
// decode and diffusion with the units promoted into room bytes after the
// prefill as well (none when room < 0), their copies at the start of the
// decode.
func predictStages(items []item, resident []bool, room int64) prediction {
	p := predictWith(items, resident, resident, 0)
	if room >= 0 {
		// Promote only when the copies pay for themselves (they do not
		// where the copies of the units hid under compute anyway).
		later, copyMs := promote(items, resident, room)
		if q := predictWith(items, resident, later, copyMs); q.total < p.total {
			return q
		}
	}
	return p
}

// predictWith simulates the stages with resident before the prefill ends
// and later after it, copyMs of promotion copies starting the decode.
func predictWith(items []item, resident, later []bool, copyMs float64) prediction {
	p := prediction{stages: map[Stage]float64{}, later: later, copyMs: copyMs}
	for _, s := range Stages() {
		set := resident
		if s == StageDecode || s == StageDiffusion {
			set = p.later
		}
		if ms, ok := stageMs(items, set, s); ok {
			if s == StageDecode {
				ms += p.copyMs
			}
			p.stages[s] = ms
			p.total += ms
		}
	}
	return p
}

// promote picks the streamed units that decode and diffusion keep in
// room bytes of VRAM: by R·C_DMA per byte (what each byte saves over the
// remaining passes), whole units, each counted in 2 MiB pages as the
// allocator counts it. It returns the resident set after the prefill and
// the time to copy the promoted units once.
func promote(items []item, resident []bool, room int64) ([]bool, float64) {
	later := append([]bool(nil), resident...)
	type cand struct {
		i       int
		benefit float64
	}
	var cands []cand
	for i, it := range items {
		if it.Host || resident[i] {
			continue
		}
		passes := 0
		for _, w := range it.Work {
			if w.Stage == StageDecode || w.Stage == StageDiffusion {
				passes += w.Passes
			}
		}
		if passes > 0 && it.Bytes > 0 {
			cands = append(cands, cand{i, float64(passes) * it.dma / float64(it.Bytes)})
		}
	}
	sort.SliceStable(cands, func(a, b int) bool { return cands[a].benefit > cands[b].benefit })
	var copyMs float64
	for _, c := range cands {
		if n := pages(items[c.i].Bytes); n <= room {
			room -= n
			later[c.i] = true
			copyMs += items[c.i].dma
		}
	}
	return later, copyMs
}

// stageMs simulates stage s; ok is false when no unit runs in it.
func stageMs(items []item, resident []bool, s Stage) (float64, bool) {
	var seq []step
	passes := 0
	for i := range items {
		w, ok := items[i].WorkIn(s)
		if !ok {
			continue
		}
		passes = w.Passes
		streamed := !items[i].Host && !resident[i]
		seq = append(seq, step{exe: w.ExeMs, dma: items[i].dma, streamed: streamed})
	}
	if len(seq) == 0 {
		return 0, false
	}
	return simulate(passes, seq), true
}

// ModuleSummary is one module of a plan.
type ModuleSummary struct {
	Module Module
	Units  int
	// Resident are the indices of the resident units.
	Resident []int
	Host     bool
	// Bytes is the module's total; ResidentBytes the resident share.
	Bytes, ResidentBytes int64
}

// Modules summarizes the plan per module, in execution order.
func (p *Plan) Modules() []ModuleSummary {
	var out []ModuleSummary
	for _, u := range p.Units {
		k := slices.IndexFunc(out, func(s ModuleSummary) bool { return s.Module == u.Module })
		if k < 0 {
			out = append(out, ModuleSummary{Module: u.Module})
			k = len(out) - 1
		}
		s := &out[k]
		s.Units++
		s.Bytes += u.Bytes
		switch u.Placement {
		case Resident:
			s.Resident = append(s.Resident, u.Index)
			s.ResidentBytes += u.Bytes
		case Host:
			s.Host = true
		}
	}
	return out
}
