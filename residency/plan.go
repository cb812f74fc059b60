package residency

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"vlanode/placement"
)

// Plan is the planner's answer: where each unit lives and which engine
// computes it in each stage, where every byte of the budget goes, and the
// predicted latency of each stage and each engine.
type Plan struct {
	Model    string
	Workload placement.Workload
	Options  Options
	// BudgetBytes is the budget planned for; 0 means unlimited.
	BudgetBytes int64
	// MinBudgetBytes is the smallest budget that plans: the largest
	// stage's fixed costs plus two DFB slots for the largest unit,
	// everything streamed.
	MinBudgetBytes int64
	// Bytes says where the budget goes in the stage that uses the most,
	// by purpose; with a budget they add up to it (PurposeFree is the
	// rest). Stages[i].Bytes has every stage's.
	Bytes map[Purpose]int64
	// SlotBytes is one DFB slot (the largest unit some stage streams); 0
	// when nothing is streamed.
	SlotBytes int64
	// HostBytes is the host memory the weights take: every unit keeps its
	// blob there (pinned where it is ever copied or read by the CPU),
	// compressed where it streams compressed; HostRawBytes is the same
	// with every blob raw.
	HostBytes, HostRawBytes int64
	// Compressed says some unit streams compressed (Options.Compress);
	// StagingBytes is one staging buffer, the largest compressed unit
	// (0: none). CompressNote says why Options.Compress planned no
	// compression, when it did not.
	Compressed   bool
	StagingBytes int64
	CompressNote string
	// Units are every unit in execution order.
	Units []UnitPlan
	// Stages are the stages that run, in order.
	Stages []StagePlan
	// PredictedMs is the simulated latency of each stage that runs.
	PredictedMs map[placement.Stage]float64
	// TotalMs is their sum.
	TotalMs float64
	// PreloadMs is ΣR·C_EXE per stage, the latency with every unit
	// resident (the paper's C_opt); no GPU-only plan predicts less.
	PreloadMs map[placement.Stage]float64
	// PreloadTotalMs is their sum.
	PreloadTotalMs float64
	// Timing counts the units' compute times by where they came from
	// ("profile", "scaled", "roofline": see Profile.Cost).
	Timing map[string]int
	// Roofline lists the modules and stages timed by the roofline alone
	// (the profile has nothing for them), e.g. "action_in/diffusion".
	Roofline []string
}

// StagePlan is one stage of a plan: its token tier, the plan kind that
// won it, and its predicted timeline.
type StagePlan struct {
	Stage placement.Stage `json:"stage"`
	// Rows are the rows a pass multiplies (its largest unit's); Tier is
	// its token tier (placement.Tier); Passes its repetitions.
	Rows   int `json:"rows"`
	Tier   int `json:"tier"`
	Passes int `json:"passes"`
	// Kind is the plan that computes the stage's non-resident units;
	// CPUShare the CPU's share of each split unit (Dynamic; 1 for Static).
	Kind     Kind    `json:"kind"`
	CPUShare float64 `json:"cpu_share"`
	// PredictedMs is the stage's simulated latency plus EntryMs; CopyMs,
	// GPUMs and CPUMs are each engine's busy time in it.
	PredictedMs float64 `json:"predicted_ms"`
	// EntryMs is the profile's calibrated cost of the stage beyond the
	// simulation (Profile.StageEntryMs), for a stage that copies anything.
	EntryMs float64 `json:"entry_ms,omitempty"`
	CopyMs  float64 `json:"copy_ms"`
	GPUMs   float64 `json:"gpu_ms"`
	CPUMs   float64 `json:"cpu_ms"`
	// EnterBytes are copied into homes in the stage's first pass (units
	// whose home starts with it).
	EnterBytes int64 `json:"enter_bytes"`
	// StreamedBytes go through the DFB slots in each pass; CPUBytes are
	// read by the CPU in each pass.
	StreamedBytes int64 `json:"streamed_bytes"`
	CPUBytes      int64 `json:"cpu_bytes"`
	// CopiedBytes and EnterCopiedBytes are what the copy engine moves for
	// StreamedBytes and EnterBytes: the compressed bytes of compressed
	// units (equal without compression). DecodeMs is the decode engine's
	// busy time.
	CopiedBytes      int64   `json:"copied_bytes"`
	EnterCopiedBytes int64   `json:"enter_copied_bytes"`
	DecodeMs         float64 `json:"decode_ms"`
	// Bytes is the device memory of the stage, by purpose.
	Bytes map[Purpose]int64 `json:"bytes"`
}

// UnitPlan is one unit's place in a plan.
type UnitPlan struct {
	placement.ID
	Bytes int64 `json:"bytes"`
	// Stages are the stages the unit runs in.
	Stages []placement.Stage `json:"stages"`
	// Weights sums up where the unit's weights live: resident for a unit
	// in VRAM in every stage (loaded once, never copied), host for one the
	// GPU never holds, streamed for one copied at least once an inference.
	Weights placement.Weights `json:"weights"`
	// Home are the stages in which its weights stay in VRAM: all of them
	// for a resident unit; its own stages for one copied into its home in
	// the first pass of its first stage (Place says resident there); none
	// for one streamed wherever it runs.
	Home []placement.Stage `json:"home,omitempty"`
	// Place is the unit's placement in each stage it runs in.
	Place map[placement.Stage]placement.Placement `json:"place"`
	// SplitDim is the length a CPU/GPU split divides (placement.Unit).
	SplitDim int `json:"split_dim,omitempty"`
	// BenefitMsPerMB is the unit's residency benefit B by paper 1's
	// position rules (0 for host units).
	BenefitMsPerMB float64 `json:"benefit_ms_per_mb"`
	// Compressed says the unit is kept compressed (bf16z) in host memory
	// and copied compressed wherever the GPU computes it whole; ZBytes is
	// that compressed size. StoredBytes is all the unit keeps in host
	// memory: ZBytes, or Bytes raw, or both when the CPU shares it (it
	// reads the raw blob), plus ShareBytes.
	Compressed  bool  `json:"compressed,omitempty"`
	ZBytes      int64 `json:"z_bytes,omitempty"`
	StoredBytes int64 `json:"stored_bytes"`
	// CompressedShares are, for a unit the CPU shares, the compressed
	// size of the GPU's share by cut (the CPU's share of the split
	// dimension) at which it streams compressed: each is coded at load
	// beside the raw blob, which the CPU reads. ShareBytes is their sum.
	CompressedShares map[int]int64 `json:"compressed_shares,omitempty"`
	ShareBytes       int64         `json:"share_bytes,omitempty"`
}

// HomeIn says whether the unit's weights are in VRAM during stage s.
func (u UnitPlan) HomeIn(s placement.Stage) bool { return slices.Contains(u.Home, s) }

// Entered says whether the unit is copied into its home at the start of
// stage s (in the stage's first pass).
func (u UnitPlan) Entered(s placement.Stage, stages []placement.Stage) bool {
	if !u.HomeIn(s) || u.Weights == placement.Resident {
		return false
	}
	k := slices.Index(stages, s)
	return k >= 0 && !u.HomeIn(stages[(k+len(stages)-1)%len(stages)])
}

// NewPlan places units, the architecture arch's units as its family
// publishes them (models/alpamayo.PlanUnits), under workload w with profile
// p within budget bytes (0: unlimited), as opts allow. A budget below the
// minimum is a *BudgetError.
//
// Options.Compress compresses where it pays: the plan with compressed
// streaming is kept when it predicts less than the plan without (the
// staging buffers take room that residents would have had), else the raw
// one is, saying why in Plan.CompressNote; a budget below the minimum
// with staging buffers is planned raw. Where the compressed plan predicts
// more than the raw one in some stages (compute-bound: the decodes take
// the compute engine's time) and less in others, a third plan streams the
// units of the losing stages raw (Options.RawStages) and competes too.
func NewPlan(arch *Arch, units []placement.Unit, w placement.Workload, p *Profile, budget int64, opts Options) (*Plan, error) {
	if !opts.Compress {
		return newPlan(arch, units, w, p, budget, opts)
	}
	rawOpts := opts
	rawOpts.Compress = false
	raw, rerr := newPlan(arch, units, w, p, budget, rawOpts)
	z, zerr := newPlan(arch, units, w, p, budget, opts)
	var be *BudgetError
	switch {
	case rerr != nil:
		return nil, rerr
	case errors.As(zerr, &be):
		raw.CompressNote = fmt.Sprintf("streamed raw: the budget does not hold the staging buffers (the minimum with them is %s)", FormatBytes(be.Min))
	case zerr != nil:
		return nil, zerr
	case raw.copiesNothing():
		raw.CompressNote = "nothing to compress: every unit is resident"
	case !z.Compressed:
		raw.CompressNote = "streamed raw: no unit that copies codes to less than " + fmt.Sprint(ZMaxRatio) + " of its bytes"
	}
	if raw.CompressNote == "" {
		// Stages where compression loses (compute-bound: the decodes take
		// the compute engine's time) stream raw in a third plan.
		if sel, err := selective(arch, units, w, p, budget, opts, raw, z); err != nil {
			return nil, err
		} else if sel != nil && sel.TotalMs < z.TotalMs {
			z = sel
		}
	}
	switch {
	case raw.CompressNote != "":
	case z.TotalMs < raw.TotalMs:
		// The smallest budget that plans is the raw plan's: below the
		// compressed plan's minimum, the budget is planned raw.
		z.MinBudgetBytes = raw.MinBudgetBytes
		return z, nil
	default:
		raw.CompressNote = fmt.Sprintf("streamed raw: compression does not pay at this budget (predicted %.1f ms compressed, %.1f ms raw)", z.TotalMs, raw.TotalMs)
	}
	raw.Options = opts
	return raw, nil
}

// selective plans again with the stages where the compressed plan z
// predicts more than the raw one streaming raw (Options.RawStages); nil
// when there is no such stage, when no stage gains, when the budget does
// not hold it or when it compresses nothing.
func selective(arch *Arch, units []placement.Unit, w placement.Workload, p *Profile, budget int64, opts Options, raw, z *Plan) (*Plan, error) {
	lose := slices.Clone(opts.RawStages)
	gain := false
	for _, s := range placement.Stages() {
		zs, ok := z.PredictedMs[s]
		if !ok || slices.Contains(lose, s) {
			continue
		}
		if zs > raw.PredictedMs[s] {
			lose = append(lose, s)
		} else {
			gain = true
		}
	}
	if !gain || len(lose) == len(opts.RawStages) {
		return nil, nil
	}
	o := opts
	o.RawStages = lose
	sel, err := newPlan(arch, units, w, p, budget, o)
	var be *BudgetError
	switch {
	case errors.As(err, &be):
		return nil, nil
	case err != nil:
		return nil, err
	case !sel.Compressed:
		return nil, nil
	}
	return sel, nil
}

// newPlan is NewPlan for the options as they are.
func newPlan(arch *Arch, units []placement.Unit, w placement.Workload, p *Profile, budget int64, opts Options) (*Plan, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if budget < 0 {
		return nil, fmt.Errorf("residency: negative budget %d", budget)
	}
	if err := arch.checkUnits(units, w); err != nil {
		return nil, err
	}
	items, err := itemsOf(units, p, opts)
	if err != nil {
		return nil, err
	}
	pl := newPlanner(arch, items, w, p, budget, opts)
	c, minimum, err := pl.plan()
	if err != nil {
		return nil, err
	}
	if budget > 0 && pl.cpuAllowed() {
		// A stage shares units with the CPU only where its room holds the
		// hand-off's scratch besides its homes; a plan that sets that room
		// aside in every stage first (fewer homes) may do better, and is
		// the one a forced CPU kind asks for.
		res := newPlanner(arch, items, w, p, budget, opts)
		res.reserveHandoffs()
		forced := opts.Kind == Static || opts.Kind == Dynamic
		c2, min2, err := res.plan()
		switch {
		case err != nil && forced:
			return nil, fmt.Errorf("%w, with the hand-off to the CPU that the %s plan needs in every stage", err, opts.Kind)
		case err == nil && forced:
			pl, c, minimum = res, c2, min2
		case err == nil && c2.total < c.total-1e-9:
			pl, c = res, c2
		}
	}
	plan := pl.assemble(c, minimum)
	plan.Model, plan.Workload, plan.Options = arch.Name, w, opts
	if w.Name == placement.StandardWorkloadName {
		// The profile's stage times are the standard workload's: another
		// workload (a text prompt) keeps the sums of its unit times.
		plan.applyGraphs(p)
	}
	return plan, nil
}

// itemsOf are the planner's items for units (a copy, timed by p) under
// opts: their copy times, and which stream compressed.
func itemsOf(units []placement.Unit, p *Profile, opts Options) ([]item, error) {
	units = slices.Clone(units)
	p.Cost(units)
	items := make([]item, len(units))
	for i, u := range units {
		items[i] = item{Unit: u, dma: p.DMAMs(u.Bytes)}
	}
	compress(items, p, opts)
	if err := checkPasses(items); err != nil {
		return nil, err
	}
	return items, nil
}

// assemble writes the plan of a choice.
func (pl *planner) assemble(c *choice, minimum int64) *Plan {
	p := &Plan{BudgetBytes: pl.budget, MinBudgetBytes: minimum, Bytes: map[Purpose]int64{},
		PredictedMs: map[placement.Stage]float64{}, PreloadMs: map[placement.Stage]float64{}, Timing: map[string]int{}}
	l := newLayout(pl.items)
	benefit := map[int]float64{}
	for _, m := range l.modules {
		for k, i := range m.idxs {
			benefit[i] = l.benefit(m, k)
		}
	}
	zs := make([]bool, len(pl.items)) // the units that stream compressed
	for i, it := range pl.items {
		zs[i] = pl.z(i) && !it.HostOnly && c.homes[i] != pl.all && pl.copiedWhole(c, i)
		p.HostBytes += it.storedBytes(zs[i])
		p.HostRawBytes += it.Bytes
		u := UnitPlan{ID: it.ID, Bytes: it.Bytes, Stages: stagesOf(it.Unit), Home: c.homes[i].list(),
			Place: map[placement.Stage]placement.Placement{}, SplitDim: it.SplitDim, BenefitMsPerMB: benefit[i],
			Compressed: zs[i], StoredBytes: it.storedBytes(zs[i])}
		if zs[i] {
			u.ZBytes = it.stored
		}
		if zs[i] {
			p.Compressed = true
			p.StagingBytes = max(p.StagingBytes, it.stored)
		}
		if pl.cpuShared(c, i) {
			// The CPU reads the raw blob: it stays beside the compressed
			// forms.
			if zs[i] {
				u.StoredBytes += it.Bytes
				p.HostBytes += it.Bytes
			}
			for _, s := range pl.stages {
				if n := c.stages[s].cpu[i]; it.zok && n > 0 && n < it.SplitDim && u.CompressedShares[n] == 0 {
					if u.CompressedShares == nil {
						u.CompressedShares = map[int]int64{}
					}
					u.CompressedShares[n] = it.shareStored(n)
					u.ShareBytes += it.shareStored(n)
					p.StagingBytes = max(p.StagingBytes, it.shareStored(n))
					p.Compressed = true
				}
			}
			u.StoredBytes += u.ShareBytes
			p.HostBytes += u.ShareBytes
		}
		switch {
		case it.HostOnly:
			u.Weights = placement.Host
		case c.homes[i] == pl.all:
			u.Weights = placement.Resident
		default:
			u.Weights = placement.Streamed
		}
		for _, w := range it.Work {
			pick := c.stages[w.Stage]
			switch {
			case it.HostOnly:
				u.Place[w.Stage] = placement.HostCPU
			case c.homes[i].has(w.Stage):
				u.Place[w.Stage] = placement.OnGPU
			case pick.cpu[i] >= it.SplitDim && it.SplitDim > 0:
				u.Place[w.Stage] = placement.HostCPU
			default:
				// The slots hold the largest unit whose GPU share some stage
				// streams.
				p.SlotBytes = max(p.SlotBytes, it.Bytes)
				u.Place[w.Stage] = placement.Placement{Weights: placement.Streamed, Engine: placement.GPU, CPUSplit: pick.cpu[i]}
			}
			p.PreloadMs[w.Stage] += float64(w.Passes) * w.ExeMs
			p.PreloadTotalMs += float64(w.Passes) * w.ExeMs
			p.Timing[w.Timing]++
			if k := string(it.ID.Module) + "/" + string(w.Stage); w.Timing == "roofline" && !slices.Contains(p.Roofline, k) {
				p.Roofline = append(p.Roofline, k)
			}
		}
		p.Units = append(p.Units, u)
	}
	var peak int64 = -1
	for _, s := range pl.stages {
		pick := c.stages[s]
		sp := StagePlan{Stage: s, Kind: pick.kind, CPUShare: pick.share, PredictedMs: pick.tl.end,
			CopyMs: pick.tl.copyMs, GPUMs: pick.tl.gpuMs, CPUMs: pick.tl.cpuMs, DecodeMs: pick.tl.decMs, EnterBytes: pick.enter,
			Bytes: map[Purpose]int64{}}
		for k, v := range pl.fixed[s] {
			sp.Bytes[k] = v
		}
		if pick.kind != GPUOnly && !pl.handoffsReserved {
			sp.Bytes[PurposeActivations] += pl.handoffBytes(c.homes, s)
		}
		arenas := map[placement.Stage]int64{} // the homes of s by the stage they entered with
		for i, it := range pl.items {
			w, ok := it.WorkIn(s)
			if ok {
				sp.Rows, sp.Passes = max(sp.Rows, w.Rows), w.Passes
			}
			switch {
			case it.HostOnly:
			case c.homes[i] == pl.all:
				sp.Bytes[PurposeResident] += it.Bytes
			case c.homes[i].has(s):
				arenas[pl.entry(c.homes[i], s)] += (it.Bytes + 255) / 256 * 256
				if ok && !c.homes[i].has(pl.prev(s)) {
					sp.EnterCopiedBytes += it.storedBytes(zs[i])
				}
			case ok:
				share := 0.0
				if it.SplitDim > 0 {
					share = float64(pick.cpu[i]) / float64(it.SplitDim)
				}
				cpu := int64(share * float64(it.MatrixBytes()))
				sp.CPUBytes += cpu
				switch {
				case pick.cpu[i] > 0 && pick.cpu[i] < it.SplitDim && it.zok:
					sp.StreamedBytes += it.Bytes - cpu
					sp.CopiedBytes += it.shareStored(pick.cpu[i])
				case pick.cpu[i] < it.SplitDim || it.SplitDim == 0:
					sp.StreamedBytes += it.Bytes - cpu
					sp.CopiedBytes += it.storedBytes(zs[i]) - cpu
				}
			}
		}
		for _, n := range arenas {
			sp.Bytes[PurposeResident] += pages(n)
		}
		sp.Tier = placement.Tier(sp.Rows)
		if sp.StreamedBytes+sp.EnterBytes+sp.CPUBytes > 0 {
			sp.EntryMs = pl.entries[s]
			sp.PredictedMs += sp.EntryMs
		}
		sp.Bytes[PurposeSlots] = dfbSlots * pages(p.SlotBytes)
		if p.StagingBytes > 0 {
			sp.Bytes[PurposeStaging] = dfbSlots * pages(p.StagingBytes)
		}
		var used int64
		for _, n := range sp.Bytes {
			used += n
		}
		if pl.budget > 0 {
			sp.Bytes[PurposeFree] = pl.budget - used
		}
		if used > peak {
			peak = used
			p.Bytes = sp.Bytes
		}
		p.Stages = append(p.Stages, sp)
		p.PredictedMs[s] = sp.PredictedMs
		p.TotalMs += sp.PredictedMs
	}
	return p
}

// cpuShared says whether the CPU computes a share of item i (or all of
// it) in some stage of c.
func (pl *planner) cpuShared(c *choice, i int) bool {
	for _, s := range pl.stages {
		if c.stages[s].cpu[i] > 0 {
			return true
		}
	}
	return false
}

// copiedWhole says whether some stage of c copies item i whole: streamed
// and not split, or entering its home.
func (pl *planner) copiedWhole(c *choice, i int) bool {
	it := &pl.items[i]
	for _, s := range pl.stages {
		if _, ok := it.WorkIn(s); ok && (c.homes[i].has(s) || c.stages[s].cpu[i] == 0) {
			return true
		}
	}
	return false
}

// Stage is the plan of stage s, if it runs.
func (p *Plan) Stage(s placement.Stage) (StagePlan, bool) {
	for _, sp := range p.Stages {
		if sp.Stage == s {
			return sp, true
		}
	}
	return StagePlan{}, false
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
	for _, s := range placement.Stages() {
		target := p.StageMs[s]
		if g := p.GraphStageMs[s]; g > 0 && (s == placement.StageDecode || s == placement.StageDiffusion) {
			target = min(g, target)
		}
		sum, ok := plan.PreloadMs[s]
		if target <= 0 || !ok || sum <= 0 {
			continue
		}
		f := min(target/sum, 1)
		plan.PreloadMs[s] = sum * f
		plan.PreloadTotalMs += sum*f - sum
		if ms, ok := plan.PredictedMs[s]; ok && plan.SlotBytes == 0 && plan.copiesNothing() {
			plan.PredictedMs[s] = ms * f
			plan.TotalMs += ms*f - ms
			for i := range plan.Stages {
				if plan.Stages[i].Stage == s {
					plan.Stages[i].PredictedMs = ms * f
				}
			}
		}
	}
}

// checkPasses requires the units of a stage to agree on its passes.
func checkPasses(items []item) error {
	passes := map[placement.Stage]int{}
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

// prediction is the simulated latency of a resident set.
type prediction struct {
	stages map[placement.Stage]float64
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
	p := prediction{stages: map[placement.Stage]float64{}, later: later, copyMs: copyMs}
	for _, s := range placement.Stages() {
		set := resident
		if s == placement.StageDecode || s == placement.StageDiffusion {
			set = p.later
		}
		if ms, ok := stageMs(items, set, s); ok {
			if s == placement.StageDecode {
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
		if it.HostOnly || resident[i] {
			continue
		}
		passes := 0
		for _, w := range it.Work {
			if w.Stage == placement.StageDecode || w.Stage == placement.StageDiffusion {
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
func stageMs(items []item, resident []bool, s placement.Stage) (float64, bool) {
	var seq []step
	passes := 0
	for i := range items {
		w, ok := items[i].WorkIn(s)
		if !ok {
			continue
		}
		passes = w.Passes
		streamed := !items[i].HostOnly && !resident[i]
		seq = append(seq, step{exe: w.ExeMs, dma: items[i].dma, streamed: streamed})
	}
	if len(seq) == 0 {
		return 0, false
	}
	return simulate(passes, seq), true
}

// copiesNothing says whether every device unit is resident for good: the
// model then runs each stage in place, with graphs where it can.
func (plan *Plan) copiesNothing() bool {
	for _, u := range plan.Units {
		if u.Weights == placement.Streamed {
			return false
		}
	}
	return true
}

// ModuleSummary is one module of a plan.
type ModuleSummary struct {
	Module placement.Module
	Units  int
	// Resident are the resident units.
	Resident []placement.ID
	Host     bool
	// Bytes is the module's total; ResidentBytes the resident share.
	Bytes, ResidentBytes int64
	// Compressed counts the units whose whole blob streams compressed,
	// CompressedRaw and CompressedZ their raw and compressed bytes;
	// Shares counts the GPU shares coded (units the CPU shares),
	// ShareBytes their compressed bytes; HostBytes is what host memory
	// keeps of those units (UnitPlan.StoredBytes).
	Compressed                 int
	CompressedRaw, CompressedZ int64
	Shares                     int
	ShareBytes, HostBytes      int64
}

// Modules summarizes the plan per module, in execution order.
func (p *Plan) Modules() []ModuleSummary {
	var out []ModuleSummary
	for _, u := range p.Units {
		k := slices.IndexFunc(out, func(s ModuleSummary) bool { return s.Module == u.ID.Module })
		if k < 0 {
			out = append(out, ModuleSummary{Module: u.ID.Module})
			k = len(out) - 1
		}
		s := &out[k]
		s.Units++
		s.Bytes += u.Bytes
		if u.Compressed {
			s.Compressed++
			s.CompressedRaw += u.Bytes
			s.CompressedZ += u.ZBytes
		}
		if u.Compressed || len(u.CompressedShares) > 0 {
			s.Shares += len(u.CompressedShares)
			s.ShareBytes += u.ShareBytes
			s.HostBytes += u.StoredBytes
		}
		switch u.Weights {
		case placement.Resident:
			s.Resident = append(s.Resident, u.ID)
			s.ResidentBytes += u.Bytes
		case placement.Host:
			s.Host = true
		}
	}
	return out
}

// stagesOf lists the stages u works in.
func stagesOf(u placement.Unit) []placement.Stage {
	out := make([]placement.Stage, len(u.Work))
	for i, w := range u.Work {
		out[i] = w.Stage
	}
	return out
}
