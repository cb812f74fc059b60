package residency

import (
	"fmt"
	"math"
	"slices"

	"vlanode/placement"
)

// Kind is one of paper 2's three plans for a stage's token tier.
type Kind string

// The kinds.
const (
	// GPUOnly streams what is not resident through the DFB slots and
	// computes every unit on the GPU (paper 1's demand layering).
	GPUOnly Kind = "gpu-only"
	// Static keeps attention (and the KV cache) on the GPU and runs the
	// MLP of every non-resident layer on the CPU from host memory.
	Static Kind = "static"
	// Dynamic splits each non-resident MLP: the GPU computes the share the
	// copy engine streams while the CPU computes the rest, so that PCIe
	// and the CPU's memory bandwidth add.
	Dynamic Kind = "dynamic"
)

// Options change how a plan is chosen.
type Options struct {
	// Exact forbids CPU shards: every unit is computed by the GPU, and
	// GPU-computed plans stay bit-identical across budgets.
	Exact bool
	// Kind, when set, forces that plan for every stage whose units
	// stream (comparisons; the cheapest wins otherwise).
	Kind Kind
	// Compress streams units compressed (bf16z) where the coding pays:
	// each keeps its compressed bytes in pinned host memory, copies them
	// into a staging buffer and the GPU decodes them into the slot or the
	// home. A unit the CPU computes a share of in some stage stays raw
	// (the CPU reads raw host weights), as do resident and host units.
	Compress bool
	// ZRatio is the share of a coded bf16 tensor's bytes that compression
	// keeps, for units whose exact size Stored lacks; 0 means
	// DefaultZRatio.
	ZRatio float64
	// Stored are the exact compressed sizes of units (bf16z.Unit.Size,
	// after encoding); a unit whose stored size is not below ZMaxRatio of
	// its bytes stays raw.
	Stored map[placement.ID]int64
	// ShareRatio are the exact compressed-to-raw ratios of the GPU's
	// shares of units the CPU shares (after encoding them); other units'
	// shares take their unit's ratio.
	ShareRatio map[placement.ID]float64
	// RawStages are stages whose units stream raw with Compress: a unit
	// any of them computes is not compressed (NewPlan sets them to the
	// stages where compression predicted a loss, compute-bound ones whose
	// decodes take the compute engine's time).
	RawStages []placement.Stage `json:",omitempty"`
}

// Validate checks the options.
func (o Options) Validate() error {
	switch o.Kind {
	case "", GPUOnly, Static, Dynamic:
	default:
		return fmt.Errorf("residency: unknown plan kind %q (want %s, %s or %s)", o.Kind, GPUOnly, Static, Dynamic)
	}
	if o.Exact && (o.Kind == Static || o.Kind == Dynamic) {
		return fmt.Errorf("residency: --exact forbids the CPU shards of a %s plan", o.Kind)
	}
	if !(o.ZRatio >= 0 && o.ZRatio <= 1) {
		return fmt.Errorf("residency: compression ratio %g is not in [0, 1] (0: the default, %g)", o.ZRatio, DefaultZRatio)
	}
	for id, n := range o.Stored {
		if n <= 0 {
			return fmt.Errorf("residency: unit %s stored in %d bytes", id, n)
		}
	}
	for id, r := range o.ShareRatio {
		if !(r > 0) {
			return fmt.Errorf("residency: the GPU's share of unit %s compresses to %g of its bytes", id, r)
		}
	}
	return nil
}

// homeArenas bounds the arenas a stage's homes are carved from (the
// executor allocates the homes that enter at a stage's start as one): the
// homes that entered with the prefill and those the decode adds; each may
// take up to a page more than its homes.
const homeArenas = 3

// splitAlign is the granularity of a CPU/GPU split of a unit's split
// dimension: whole tiles of the CPU kernels and of the copies.
const splitAlign = 128

// stageSet is a set of stages, one bit per stage in placement.Stages()
// order.
type stageSet uint8

func stageBit(s placement.Stage) stageSet {
	return 1 << slices.Index(placement.Stages(), s)
}

func (m stageSet) has(s placement.Stage) bool { return m&stageBit(s) != 0 }

// list is the stages of m in order.
func (m stageSet) list() []placement.Stage {
	var out []placement.Stage
	for _, s := range placement.Stages() {
		if m.has(s) {
			out = append(out, s)
		}
	}
	return out
}

// workSet is the stages it works in.
func (it *item) workSet() stageSet {
	var m stageSet
	for _, w := range it.Work {
		m |= stageBit(w.Stage)
	}
	return m
}

// planner places one model's items within a budget.
type planner struct {
	items  []item
	prof   *Profile
	opts   Options
	budget int64
	seqs   int // sequences run together (Workload.Seqs)
	// entries are the profile's calibrated stage entry costs where they
	// apply: the standard workload they were measured on (a text
	// workload's stages start without its host work).
	entries map[placement.Stage]float64
	stages  []placement.Stage                     // the stages that run, in order
	fixed   map[placement.Stage]map[Purpose]int64 // fixed costs per stage
	all     stageSet                              // every stage that runs
	// staging is one staging buffer (the largest unit that can stream
	// compressed), reserved in every stage; 0 without compression.
	staging int64
	// handoffsReserved says the fixed costs of every stage hold the
	// hand-off's scratch for any split (reserveHandoffs).
	handoffsReserved bool
}

// reserveHandoffs sets aside in each stage's activations the hand-off
// scratch of the widest split any unit of the stage could make, so that
// every stage may share units with the CPU whatever its homes.
func (pl *planner) reserveHandoffs() {
	none := make([]stageSet, len(pl.items))
	for _, s := range pl.stages {
		pl.fixed[s][PurposeActivations] += pl.handoffBytes(none, s)
	}
	pl.handoffsReserved = true
}

// z says whether item i streams compressed where the GPU computes it
// whole.
func (pl *planner) z(i int) bool { return pl.items[i].zok }

// fixedSum is the fixed costs of stage s.
func (pl *planner) fixedSum(s placement.Stage) int64 {
	var n int64
	for _, v := range pl.fixed[s] {
		n += v
	}
	return n
}

// choice is a candidate plan: where each item's weights stay (the stages
// of its home in VRAM; 0: never) and, per stage, its kind and timeline.
type choice struct {
	slot   int64
	homes  []stageSet
	stages map[placement.Stage]stagePick
	total  float64
}

// stagePick is one stage of a choice.
type stagePick struct {
	kind  Kind
	share float64 // the CPU's share of the split units
	cpu   []int   // per item: the CPU's share of its split dimension
	tl    timeline
	enter int64 // bytes copied into homes in the stage's first pass
}

// cpuStages are the stages of c whose plan gives the CPU shares.
func (c *choice) cpuStages() stageSet {
	var set stageSet
	for s, p := range c.stages {
		if p.kind != GPUOnly {
			set |= stageBit(s)
		}
	}
	return set
}

// plan chooses the best placement.
func (pl *planner) plan() (*choice, int64, error) {
	var all int64
	slot := int64(0)
	for _, it := range pl.items {
		if !it.HostOnly {
			all += it.Bytes
			slot = max(slot, it.Bytes)
		}
	}
	var fixedMax int64
	for _, s := range pl.stages {
		fixedMax = max(fixedMax, pl.fixedSum(s))
	}
	minimum := fixedMax + dfbSlots*pages(slot) + dfbSlots*pages(pl.staging)
	if pl.budget == 0 || fixedMax+all <= pl.budget {
		homes := make([]stageSet, len(pl.items))
		for i, it := range pl.items {
			if !it.HostOnly {
				homes[i] = pl.all
			}
		}
		return pl.evaluate(homes, 0), minimum, nil
	}
	if pl.budget < minimum {
		worst := pl.stages[0]
		for _, s := range pl.stages {
			if pl.fixedSum(s) > pl.fixedSum(worst) {
				worst = s
			}
		}
		return nil, minimum, &BudgetError{Budget: pl.budget, Min: minimum, Fixed: pl.fixed[worst], Slot: slot, Staging: pl.staging}
	}
	// The slots hold the largest unit some stage streams: a plan that
	// keeps the largest units home wherever they work can use smaller
	// slots and leave the room to more residents. Try the largest sizes.
	var sizes []int64
	for _, it := range pl.items {
		if !it.HostOnly && !slices.Contains(sizes, it.Bytes) {
			sizes = append(sizes, it.Bytes)
		}
	}
	slices.SortFunc(sizes, func(a, b int64) int { return int(min(max(b-a, -1), 1)) })
	var best *choice
	for _, slot := range sizes[:min(len(sizes), 3)] {
		cands := [][]stageSet{pl.fill(slot, 0), pl.classic(slot)}
		coexec := -1 // the co-executing fill's candidate
		if pl.cpuAllowed() {
			coexec = len(cands)
			cands = append(cands, pl.fill(slot, pl.all))
		}
		for k := 0; k < len(cands); k++ {
			homes := cands[k]
			if pl.streamedSlot(homes) > slot {
				continue // it streams a unit the slots cannot hold
			}
			c := pl.evaluate(homes, slot)
			if best == nil || c.total < best.total-1e-9 {
				best = c
			}
			if k == coexec {
				// The co-executing fill weighed every stage's CPU
				// alternative; where the evaluation gave some stages
				// the GPU alone, fill again weighing only the stages
				// that share (a cheap CPU tier of a stage that stays
				// GPU-only must not cost it its homes).
				if shared := c.cpuStages(); shared != 0 && shared != pl.all {
					cands = append(cands, pl.fill(slot, shared))
				}
			}
		}
	}
	return best, minimum, nil
}

// streamedSlot is the largest unit that some stage streams (0: none).
func (pl *planner) streamedSlot(homes []stageSet) int64 {
	var n int64
	for i, it := range pl.items {
		if !it.HostOnly && it.workSet()&^homes[i] != 0 {
			n = max(n, it.Bytes)
		}
	}
	return n
}

// rooms is the room for homes in each stage after the fixed costs and the
// slots.
func (pl *planner) rooms(slot int64) map[placement.Stage]int64 {
	out := map[placement.Stage]int64{}
	for _, s := range pl.stages {
		out[s] = pl.budget - pl.fixedSum(s) - dfbSlots*pages(slot) - dfbSlots*pages(pl.staging) - homeArenas*pageBytes
	}
	return out
}

// classic is paper 1's placement, generalized to every module: one
// resident set for every stage, filled by benefit per byte, and the
// promotions after the prefill into the activations it frees (its homes
// run from the stage after the prefill to the end).
func (pl *planner) classic(slot int64) []stageSet {
	rooms := pl.rooms(slot)
	room := int64(math.MaxInt64)
	for _, r := range rooms {
		room = min(room, r)
	}
	late := int64(-1)
	if r, ok := rooms[placement.StageDecode]; ok && rooms[placement.StagePrefill] < r {
		late = r - room
	}
	resident, promoted := fillSide(pl.items, room, late)
	homes := make([]stageSet, len(pl.items))
	for i, it := range pl.items {
		switch {
		case resident[i]:
			homes[i] = pl.all
		case promoted[i]:
			homes[i] = it.workSet() &^ stageBit(placement.StagePrefill)
		}
	}
	return homes
}

// fill is the placement per stage: each group of modules that work in the
// same stages (the vision tower; the language model in prefill and
// decode; the action side in diffusion) fills its own stages' room, homes
// for exactly those stages (a unit is copied into its home in the first
// pass of its first stage, where it would be copied anyway, and its VRAM
// serves the other groups in the other stages), with the language model's
// promotions into the activations the prefill frees (a unit the CPU can
// share, whose busiest stage is in coexec, counts only the copy time the
// CPU leaves to PCIe);
// then residents whose
// homes fit in every other stage's leftover room stay for good, never
// copied again, the ones that save the most first.
func (pl *planner) fill(slot int64, coexec stageSet) []stageSet {
	rooms := pl.rooms(slot)
	homes := make([]stageSet, len(pl.items))
	var sides []stageSet
	for _, it := range pl.items {
		if w := it.workSet(); !it.HostOnly && w != 0 && !slices.Contains(sides, w) {
			sides = append(sides, w)
		}
	}
	for _, side := range sides {
		var idx []int
		var sub []item
		for i, it := range pl.items {
			if !it.HostOnly && it.workSet() == side {
				idx = append(idx, i)
				if coexec != 0 {
					it.dma *= pl.coexecFactor(&it, coexec)
				}
				sub = append(sub, it)
			}
		}
		stages := side.list()
		room := rooms[stages[0]]
		for _, s := range stages {
			room = min(room, rooms[s])
		}
		late := int64(-1)
		if len(stages) > 1 {
			later := int64(math.MaxInt64)
			for _, s := range stages[1:] {
				later = min(later, rooms[s])
			}
			if later > room {
				late = later - room
			}
		}
		resident, promoted := fillSide(sub, room, late)
		for k, i := range idx {
			switch {
			case resident[k]:
				homes[i] = side
			case promoted[k]:
				homes[i] = side &^ stageBit(stages[0])
			}
		}
	}
	pl.upgrade(homes, rooms)
	return homes
}

// coexecFactor is the part of a splittable unit's copy that residency
// saves when the CPU may compute it instead: in its busiest stage, the
// copy stream and the CPU share it in the ratio of their rates, so a
// resident byte of it saves only the copy stream's part (1 for a unit the
// CPU cannot share, whose busiest stage is not in stages, or without CPU
// shards).
func (pl *planner) coexecFactor(it *item, stages stageSet) float64 {
	if !pl.cpuAllowed() || it.SplitDim <= 0 || it.Bytes <= 0 {
		return 1
	}
	var busiest placement.Work
	for _, w := range it.Work {
		if w.Passes > busiest.Passes {
			busiest = w
		}
	}
	if busiest.Passes <= 1 || !stages.has(busiest.Stage) {
		return 1
	}
	copyMs := float64(it.Bytes) / (pl.prof.CPU.H2DBusyGBps * 1e9) * 1e3
	if it.zok {
		copyMs *= it.shareRatio // the GPU's share streams compressed
	}
	cpuMs := pl.prof.CPU.Ms(it.MatrixBytes(), it.MatrixFLOPs(busiest.Rows), busiest.Rows)
	return cpuMs / (copyMs + cpuMs)
}

// fillSide fills room with residents of items (paper 1's filler, the
// slots already out of room) and, when late is not negative, promotes more
// into late bytes for the stages after the first.
func fillSide(items []item, room, late int64) (resident, promoted []bool) {
	l := newLayout(items)
	best := math.Inf(1)
	resident = make([]bool, len(items))
	for _, pr := range []int64{-1, late} {
		f := &filler{l: l, count: make([]int, len(l.modules)), blocked: make([]bool, len(l.modules)),
			resident: make([]bool, len(items)), room: room, promoteRoom: pr, fixedSlots: true}
		for _, m := range l.modules {
			f.marg = append(f.marg, l.marginals(m))
		}
		f.total = f.predict(f.resident)
		f.fill()
		if t := predictStages(items, f.resident, late).total; t < best {
			best, resident = t, f.resident
		}
	}
	pred := predictStages(items, resident, late)
	promoted = make([]bool, len(items))
	for i := range items {
		promoted[i] = pred.later[i] && !resident[i]
	}
	return resident, promoted
}

// upgrade makes homes permanent where the other stages' leftover room
// holds them: each such unit is then never copied. Those that save the
// most per byte go first.
func (pl *planner) upgrade(homes []stageSet, rooms map[placement.Stage]int64) {
	left := map[placement.Stage]int64{}
	for _, s := range pl.stages {
		left[s] = rooms[s]
		for i, h := range homes {
			if h.has(s) {
				left[s] -= pl.items[i].Bytes
			}
		}
	}
	type cand struct {
		i    int
		gain float64
	}
	var cands []cand
	for i, h := range homes {
		if h == 0 || h == pl.all {
			continue
		}
		// Copied once per inference where its home starts, in that stage's
		// first pass: what it saves is that copy.
		cands = append(cands, cand{i, pl.items[i].dma / float64(pl.items[i].Bytes)})
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		switch {
		case a.gain > b.gain:
			return -1
		case a.gain < b.gain:
			return 1
		}
		return 0
	})
	for _, c := range cands {
		n := pl.items[c.i].Bytes
		fits := true
		for _, s := range pl.stages {
			if !homes[c.i].has(s) && left[s] < n {
				fits = false
			}
		}
		if !fits {
			continue
		}
		for _, s := range pl.stages {
			if !homes[c.i].has(s) {
				left[s] -= n
			}
		}
		homes[c.i] = pl.all
	}
}

// entry is the stage at which a unit home in s (by homes h) entered its
// home: the first of the run of h's stages that holds s, cyclically.
func (pl *planner) entry(h stageSet, s placement.Stage) placement.Stage {
	for range pl.stages {
		p := pl.prev(s)
		if !h.has(p) {
			return s
		}
		s = p
	}
	return s
}

// prev is the stage that runs before s, cyclically: an inference's first
// stage follows the previous inference's last.
func (pl *planner) prev(s placement.Stage) placement.Stage {
	k := slices.Index(pl.stages, s)
	return pl.stages[(k+len(pl.stages)-1)%len(pl.stages)]
}

// evaluate times homes: per stage, the cheapest of the plan kinds the
// options allow. With compression, a unit streams compressed wherever the
// GPU computes it whole, and the GPU's share of a split streams
// compressed too (a second coding of that share, at load); a unit the
// CPU shares keeps its raw blob as well, which the CPU reads.
func (pl *planner) evaluate(homes []stageSet, slot int64) *choice {
	c := &choice{slot: slot, homes: homes, stages: map[placement.Stage]stagePick{}}
	rooms := pl.rooms(slot)
	for _, s := range pl.stages {
		room := pl.budget == 0 || pl.handoffsReserved || pl.handoffBytes(homes, s) <= pl.leftIn(homes, s, rooms[s])
		pick := pl.pickStage(homes, s, room)
		c.stages[s] = pick
		c.total += pick.tl.end
	}
	return c
}

// cpuAllowed says whether the plan may run shards on the CPU: not with
// --exact, and not for a batch (a CPU share is one hand-off a unit turn,
// and a batch's turn computes every sequence's rows one after the other;
// alpamayo.Model.InferBatch runs a batch through a plan without shares).
func (pl *planner) cpuAllowed() bool {
	return !pl.opts.Exact && pl.prof.CPU != nil && pl.opts.Kind != GPUOnly && pl.seqs == 1
}

// handoffBytes is the device memory the hand-off to the CPU takes in
// stage s when it shares a unit with the CPU: the exchange's scratch, a
// float32 row of the widest hand-off per row the stage passes
// (cuda.Backend.NewExchange; 128 MiB for an 8,192-token prefill chunk of
// Qwen3-8B); 0 when no unit of s can split.
func (pl *planner) handoffBytes(homes []stageSet, s placement.Stage) int64 {
	var n int64
	for i, it := range pl.items {
		if w, ok := it.WorkIn(s); ok && !it.HostOnly && !homes[i].has(s) && it.SplitDim > 0 && w.Rows > 0 {
			n = max(n, accounted(int64(w.Rows)*int64(it.HandoffWidth())*f32Bytes))
		}
	}
	return n
}

// leftIn is what stage s leaves of room (rooms' figure for s) once its
// homes are in.
func (pl *planner) leftIn(homes []stageSet, s placement.Stage, room int64) int64 {
	for i, it := range pl.items {
		if !it.HostOnly && homes[i].has(s) {
			room -= (it.Bytes + 255) / 256 * 256
		}
	}
	return room
}

// pickStage chooses stage s's kind: GPU-only, Static (every split unit on
// the CPU) or Dynamic (each split unit shared so that the copy stream and
// the CPU finish together, and shares around it), by simulating each; the
// CPU kinds only where handoff (the stage's room holds the hand-off's
// scratch).
func (pl *planner) pickStage(homes []stageSet, s placement.Stage, handoff bool) stagePick {
	splittable := false
	for i, it := range pl.items {
		w, ok := it.WorkIn(s)
		if ok && !it.HostOnly && !homes[i].has(s) && it.SplitDim > 0 && w.Rows > 0 {
			splittable = true
		}
	}
	shares := []float64{0}
	if splittable && handoff && pl.cpuAllowed() {
		star := pl.balance(homes, s)
		switch pl.opts.Kind {
		case Static:
			shares = []float64{1}
		case Dynamic:
			shares = nil
		default:
			shares = append(shares, 1)
		}
		if pl.opts.Kind != Static {
			for _, f := range []float64{star, star - 0.1, star + 0.1, star - 0.05, star + 0.05} {
				if f > 0 && f < 1 {
					shares = append(shares, f)
				}
			}
			if len(shares) == 0 {
				shares = []float64{star}
			}
		}
	}
	var best stagePick
	for k, f := range shares {
		p := pl.simulateStage(homes, s, f)
		if k == 0 || p.tl.end < best.tl.end-1e-9 {
			best = p
		}
	}
	if best.kind == Dynamic {
		// Refine the share around the best: the copy stream and the CPU
		// rarely balance exactly at the closed form (hand-offs, the
		// pipeline's fill and drain).
		for step := 0.04; step >= 0.005; step /= 2 {
			for _, f := range []float64{best.share - step, best.share + step} {
				if f <= 0 || f >= 1 {
					continue
				}
				if p := pl.simulateStage(homes, s, f); p.tl.end < best.tl.end-1e-9 {
					best = p
				}
			}
		}
	}
	best.enter = pl.enterBytes(homes, s)
	return best
}

// enterBytes is what stage s copies into homes in its first pass: the
// units at home in s and not in the stage before.
func (pl *planner) enterBytes(homes []stageSet, s placement.Stage) int64 {
	var enter int64
	for i, it := range pl.items {
		if _, ok := it.WorkIn(s); ok && !it.HostOnly && homes[i].has(s) && !homes[i].has(pl.prev(s)) {
			enter += it.Bytes
		}
	}
	return enter
}

// balance is the CPU share that makes the copy stream and the CPU equally
// busy in stage s: with N ms of copies that cannot split, B ms to copy the
// split units and C ms for the CPU to compute them, N + (1−f)·B = f·C.
func (pl *planner) balance(homes []stageSet, s placement.Stage) float64 {
	var n, b, c float64
	busy := pl.prof.CPU.H2DBusyGBps
	for i, it := range pl.items {
		w, ok := it.WorkIn(s)
		if !ok || it.HostOnly || homes[i].has(s) {
			continue
		}
		copyMs := float64(it.Bytes) / (busy * 1e9) * 1e3
		if it.SplitDim > 0 {
			if it.zok {
				copyMs *= it.shareRatio // the GPU's share streams compressed
			}
			b += copyMs
			c += pl.prof.CPU.Ms(it.MatrixBytes(), it.MatrixFLOPs(w.Rows), w.Rows)
		} else {
			n += float64(it.storedBytes(pl.z(i))) / (busy * 1e9) * 1e3
		}
	}
	if b+c <= 0 {
		return 0
	}
	return min(max((n+b)/(b+c), 0), 1)
}

// cpuShare is the CPU's share of an item's split dimension for a stage
// share f, in whole tiles (of splitAlign, or an eighth of a dimension too
// small for eight of them); a share strictly between 0 and 1 keeps a tile
// on each engine.
func cpuShare(it *item, f float64) int {
	if f <= 0 || it.SplitDim <= 0 {
		return 0
	}
	if f >= 1 {
		return it.SplitDim
	}
	grain := splitAlign
	if it.SplitDim < 8*splitAlign {
		grain = max(1, it.SplitDim/8)
	}
	c := int(math.Round(f*float64(it.SplitDim)/float64(grain))) * grain
	return min(max(c, grain), it.SplitDim-grain)
}

// simulateStage times stage s with homes and CPU share f of every split
// unit that the stage does not keep home.
func (pl *planner) simulateStage(homes []stageSet, s placement.Stage, f float64) stagePick {
	pick := stagePick{kind: GPUOnly, share: f, cpu: make([]int, len(pl.items))}
	h2d := pl.prof.H2DGBps
	coexec := false
	for i := range pl.items {
		it := &pl.items[i]
		if _, ok := it.WorkIn(s); ok && !it.HostOnly && !homes[i].has(s) && cpuShare(it, f) > 0 {
			coexec = true
		}
	}
	if coexec {
		h2d = pl.prof.CPU.H2DBusyGBps
	}
	var seq []step
	passes := 0
	anyStreamed := false
	for i := range pl.items {
		it := &pl.items[i]
		w, ok := it.WorkIn(s)
		if !ok {
			continue
		}
		passes = w.Passes
		st := step{exe: w.ExeMs}
		copyMs := float64(it.Bytes) / (h2d * 1e9) * 1e3
		zcopy := func() {
			// Compressed: the copy moves its stored bytes, a decode expands them.
			if pl.z(i) {
				st.z, st.dma, st.dec = true, float64(it.stored)/(h2d*1e9)*1e3, it.dec
			}
		}
		switch {
		case it.HostOnly:
		case homes[i].has(s):
			if !homes[i].has(pl.prev(s)) {
				st.enter, st.dma = true, copyMs
				zcopy()
			}
		default:
			anyStreamed = true
			c := cpuShare(it, f)
			if c == 0 {
				st.streamed, st.dma = true, copyMs
				zcopy()
				break
			}
			pick.cpu[i] = c
			share := float64(c) / float64(it.SplitDim)
			st.cpu = pl.prof.CPU.Ms(int64(share*float64(it.MatrixBytes())), share*it.MatrixFLOPs(w.Rows), w.Rows)
			st.hop = pl.prof.CPU.Hop(w.Rows, it.HandoffWidth())
			st.exe = w.ExeMs * (1 - share)
			if c < it.SplitDim {
				st.streamed, st.dma = true, copyMs*(1-share)
				if it.zok {
					// The GPU's share, compressed: copied and decoded.
					st.z, st.dma, st.dec = true, float64(it.shareStored(c))/(h2d*1e9)*1e3, pl.prof.DecodeMs(it.gpuShare(c))
				}
			}
		}
		seq = append(seq, st)
	}
	pick.tl = simulate3(passes, seq)
	switch {
	case !anyStreamed || !coexec:
		pick.kind, pick.share = GPUOnly, 0
	case f >= 1:
		pick.kind = Static
	default:
		pick.kind = Dynamic
	}
	return pick
}

// newPlanner prepares items for planning.
func newPlanner(arch *Arch, items []item, w placement.Workload, p *Profile, budget int64, opts Options) *planner {
	pl := &planner{items: items, prof: p, opts: opts, budget: budget, seqs: w.Seqs(), fixed: map[placement.Stage]map[Purpose]int64{}}
	if w.Name != placement.TextWorkloadName {
		pl.entries = p.StageEntryMs
	}
	for _, it := range items {
		if it.zok {
			pl.staging = max(pl.staging, it.stored)
		}
	}
	for _, s := range placement.Stages() {
		for _, it := range items {
			if _, ok := it.WorkIn(s); ok && !it.HostOnly {
				pl.stages = append(pl.stages, s)
				pl.all |= stageBit(s)
				pl.fixed[s] = arch.fixedCosts(w, p, s)
				break
			}
		}
	}
	return pl
}
