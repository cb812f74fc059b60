package residency

import "vlanode/placement"

// item is a unit with its copy time C_DMA.
type item struct {
	placement.Unit
	dma float64 // ms: the copy of what the unit streams (compressed when zok)
	// zok says the unit can stream compressed (Options.Compress, and the
	// coding pays): stored is its compressed size, dec its decode time.
	zok    bool
	stored int64
	dec    float64 // ms
	// shareRatio is the compressed-to-raw ratio of the GPU's share of a
	// split (the CPU's rows stay raw): exact from Options.ShareRatio, else
	// the unit's own.
	shareRatio float64
}

// group is the key of a stack of like units: a module's units of one
// part (the VLM's attention parts, its MLP parts), whose residents are
// placed together.
func (it *item) group() placement.ID {
	return placement.ID{Module: it.ID.Module, Part: it.ID.Part}
}

// position is a unit's place in its stack, which decides how much of its
// copy a pipeline exposes (paper 1, Tables IV–VI).
type position int

const (
	posFirst position = iota
	posMiddle
	posLast
)

// bytesPerMB: benefits are in ms per MB (10⁶ bytes), as in the paper.
const bytesPerMB = 1e6

// saving is ΔC of one stage for a resident at pos: R·C_DMA, except that an
// EXE-intensive stage (C_DMA ≤ C_EXE) only ever exposes its first copy
// (Table IV), and the last unit of a DMA-intensive stack saves
// R·(C_DMA − C_EXE), its compute becoming the new pipeline tail's
// (Table V). A hybrid unit sums its stages (Table VI).
func saving(pos position, w placement.Work, dma float64) float64 {
	r := float64(w.Passes)
	switch {
	case dma <= w.ExeMs && pos != posFirst:
		return 0
	case dma > w.ExeMs && pos == posLast:
		return r * (dma - w.ExeMs)
	}
	return r * dma
}

// layout groups the GPU items of a plan: each module's items in order, and
// where each stage's pass starts and ends.
type layout struct {
	items   []item
	modules []moduleItems
	// stageFirst and stageLast are the first and last GPU item of each
	// stage's pass.
	stageFirst, stageLast map[placement.Stage]int
}

// moduleItems are the indices (into layout.items) of one group's units
// (item.group).
type moduleItems struct {
	group placement.ID
	idxs  []int
}

func newLayout(items []item) *layout {
	l := &layout{items: items, stageFirst: map[placement.Stage]int{}, stageLast: map[placement.Stage]int{}}
	at := map[placement.ID]int{}
	for i, it := range items {
		if it.HostOnly {
			continue
		}
		k, ok := at[it.group()]
		if !ok {
			k = len(l.modules)
			at[it.group()] = k
			l.modules = append(l.modules, moduleItems{group: it.group()})
		}
		l.modules[k].idxs = append(l.modules[k].idxs, i)
		for _, w := range it.Work {
			if _, ok := l.stageFirst[w.Stage]; !ok {
				l.stageFirst[w.Stage] = i
			}
			l.stageLast[w.Stage] = i
		}
	}
	return l
}

// positionIn is where the k-th unit of module m stands in stage s: first
// or last if it opens or closes the stage's pass, else middle. When a
// module is the whole stage (the paper's setting) this is its place in the
// module's stack; otherwise the units around it decide what its copy can
// hide behind (a ViT's first block follows the patch embedding, whose
// compute hides the block's copy).
func (l *layout) positionIn(m moduleItems, k int, s placement.Stage) position {
	switch m.idxs[k] {
	case l.stageFirst[s]:
		return posFirst
	case l.stageLast[s]:
		return posLast
	}
	return posMiddle
}

// benefit is B = ΣR·ΔC / M of the k-th unit of module m resident alone,
// in ms per MB.
func (l *layout) benefit(m moduleItems, k int) float64 {
	it := &l.items[m.idxs[k]]
	var dc float64
	for _, w := range it.Work {
		dc += saving(l.positionIn(m, k, w.Stage), w, it.dma)
	}
	return dc / (float64(it.Bytes) / bytesPerMB)
}

// marginals returns, for k = 1…L, the time the k-th resident of module m
// saves, residents being added as the interleaved placement adds them: the
// first unit, then middle ones, the last only when all are resident. A
// middle resident that Eq. 8 can only place in a run longer than the
// consecutive-residency limit ⌊C_DMA/C_EXE⌋ of a DMA-intensive stage
// saves R·(C_DMA − C_EXE) there: the run's compute is no longer hidden
// under one copy.
func (l *layout) marginals(m moduleItems) []float64 {
	n := len(m.idxs)
	out := make([]float64, n)
	for k := 1; k <= n; k++ {
		at := min(k-1, n-1) // which unit stands for the k-th resident
		if k > 1 && k < n {
			at = 1
		}
		it := &l.items[m.idxs[at]]
		for _, w := range it.Work {
			pos := l.positionIn(m, at, w.Stage)
			dc := saving(pos, w, it.dma)
			if pos == posMiddle && it.dma > w.ExeMs && maxRun(interleave(n, k)) > consecutiveLimit(it.dma, w.ExeMs) {
				dc = float64(w.Passes) * (it.dma - w.ExeMs)
			}
			out[k-1] += dc
		}
	}
	return out
}

// consecutiveLimit is ⌊C_DMA/C_EXE⌋: how many resident units' compute one
// copy can hide.
func consecutiveLimit(dma, exe float64) int {
	if exe <= 0 {
		return int(^uint(0) >> 1)
	}
	return int(dma / exe)
}
