package residency

import (
	"cmp"
	"math"
	"slices"
)

// interleave returns the indices of k residents among n units: paper 1's
// Eq. 8 generalized to n layers, ⌊i·(n−1)/k⌋ for i = 0…k−1, which keeps
// the first unit, leaves out the last while k < n, and spaces residents at
// least ⌊(n−1)/k⌋ apart. Past k = (n−1)/2 its floors bunch residents into
// runs longer than needed (k = 34 of 36: one run of 34), and a run longer
// than the consecutive-residency limit exposes compute; there the k
// residents are cut into the most even runs instead, split by single
// streamed units (k = 34: two runs of 17), still first in and last out.
// All n when k ≥ n.
func interleave(n, k int) []int {
	k = max(0, min(k, n))
	if k == n {
		return balancedRuns(n, k)
	}
	eq8 := make([]int, 0, k)
	for i := range k {
		eq8 = append(eq8, i*(n-1)/k)
	}
	if even := balancedRuns(n, k); maxRun(even) < maxRun(eq8) {
		return even
	}
	return eq8
}

// balancedRuns places k residents among the first n−1 units as
// n−k runs as even as possible (k = n: all n), each run followed by one
// streamed unit; for 0 < k < n its longest run is ⌈k/(n−k)⌉.
func balancedRuns(n, k int) []int {
	if k >= n {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, 0, k)
	runs := n - k // the last unit closes the last run
	pos := 0
	for r := range runs {
		length := (r+1)*k/runs - r*k/runs
		for range length {
			out = append(out, pos)
			pos++
		}
		pos++ // one streamed unit
	}
	return out
}

// maxRun is the longest run of consecutive indices in an increasing list.
func maxRun(idx []int) int {
	best, run := 0, 0
	for i, v := range idx {
		if i > 0 && v == idx[i-1]+1 {
			run++
		} else {
			run = 1
		}
		best = max(best, run)
	}
	return best
}

// filler chooses residents greedily by benefit per byte across modules.
type filler struct {
	l        *layout
	marg     [][]float64 // per module: ΔC of its k-th resident
	count    []int       // residents per module
	blocked  []bool      // the module's next resident did not fit
	resident []bool      // per item
	room     int64       // budget minus fixed costs
	total    float64     // predicted ms of the current resident set
	// promoteRoom, when not negative, is the activation memory the prefill
	// frees: predictions count the promotions it holds.
	promoteRoom int64
	// fixedSlots, when set, says room already excludes the DFB slots
	// (sized for the whole model), so that a resident set needs only its
	// own bytes.
	fixedSlots bool
}

// minGainMs is the least predicted saving for which a unit is made
// resident.
const minGainMs = 1e-6

// predict is the simulated latency of all stages with the resident set
// (and the promotions after the prefill, when promoteRoom is set).
func (f *filler) predict(set []bool) float64 {
	return predictStages(f.l.items, set, f.promoteRoom).total
}

// fill makes units resident while they fit: each step takes the module
// whose next resident saves the most time per byte (ties, within a
// relative 1e-9: the module that runs first), re-placing that module's
// residents by Eq. 8. What fits counts the resident blobs plus two DFB
// slots for the largest unit still streamed. A module whose next resident
// does not fit is done, and so is one whose next resident would save
// nothing: by the position rules (B = 0), or in the simulated timeline
// (its copies were already hidden, as with the last expert layers once
// the rest are resident and the next Euler step's copies overlap their
// compute).
func (f *filler) fill() {
	for f.step() {
	}
}

// step adds the best resident that fits and saves time; false when none.
func (f *filler) step() bool {
	for _, c := range f.candidates() {
		if f.need(c.set) > f.room {
			f.blocked[c.m] = true
			continue
		}
		now := f.predict(c.set)
		if now >= f.total-minGainMs {
			f.blocked[c.m] = true
			continue
		}
		f.count[c.m]++
		f.resident, f.total = c.set, now
		return true
	}
	return false
}

// candidate is one module's next resident.
type candidate struct {
	m   int     // module
	b   float64 // ms saved per MB added
	set []bool  // the resident set with it
}

// candidates lists each open module's next resident with a positive
// benefit, best first.
func (f *filler) candidates() []candidate {
	var out []candidate
	for m := range f.l.modules {
		if f.blocked[m] || f.count[m] == len(f.l.modules[m].idxs) {
			continue
		}
		set := f.with(m, f.count[m]+1)
		grown := max(f.residentBytes(set)-f.residentBytes(f.resident), 1)
		if b := f.marg[m][f.count[m]] / (float64(grown) / bytesPerMB); b > 0 {
			out = append(out, candidate{m, b, set})
		}
	}
	slices.SortStableFunc(out, func(x, y candidate) int {
		if math.Abs(x.b-y.b) > 1e-9*max(x.b, y.b) {
			return cmp.Compare(y.b, x.b)
		}
		return cmp.Compare(x.m, y.m)
	})
	return out
}

// with returns the resident set with module m holding k residents.
func (f *filler) with(m, k int) []bool {
	set := append([]bool(nil), f.resident...)
	idxs := f.l.modules[m].idxs
	for _, i := range idxs {
		set[i] = false
	}
	for _, j := range interleave(len(idxs), k) {
		set[idxs[j]] = true
	}
	return set
}

// need is what a resident set takes beyond the fixed costs.
func (f *filler) need(set []bool) int64 {
	if f.fixedSlots {
		return f.residentBytes(set)
	}
	return f.residentBytes(set) + dfbSlots*largestStreamed(f.l.items, set)
}

func (f *filler) residentBytes(set []bool) int64 {
	var n int64
	for i, r := range set {
		if r {
			n += f.l.items[i].Bytes
		}
	}
	return n
}

// largestStreamed is the largest GPU unit not in set: one DFB slot.
func largestStreamed(items []item, set []bool) int64 {
	var n int64
	for i := range items {
		if !items[i].HostOnly && !set[i] {
			n = max(n, items[i].Bytes)
		}
	}
	return n
}
