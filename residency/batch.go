package residency

import (
	"errors"
	"fmt"

	"vlanode/placement"
)

// MaxBatchSearch bounds LargestBatch's search.
const MaxBatchSearch = 256

// LargestBatch is the largest batch of w's requests (each of w's
// trajectory samples, Workload.Samples), up to limit, whose plan fits
// budget: the fixed costs of every sequence (its KV cache, its vision and
// prefill activations, its decode step's) and of every sample's expert
// rows, with two DFB slots and everything else streamed. units gives the
// model's units for a workload (alpamayo.PlanUnits bound to the
// architecture). It is 0 when not even one request fits, and limit for an
// unlimited budget. The minimum budget grows with the batch, so the
// search is a bisection.
func LargestBatch(arch *Arch, units func(placement.Workload) []placement.Unit, w placement.Workload, p *Profile, budget int64, opts Options, limit int) (int, error) {
	if limit < 1 || limit > MaxBatchSearch {
		return 0, fmt.Errorf("residency: batch limit %d, want 1 to %d", limit, MaxBatchSearch)
	}
	if budget == 0 {
		return limit, nil
	}
	fits := func(b int) (bool, error) {
		wb := w.WithBatch(b, w.Samples)
		_, err := NewPlan(arch, units(wb), wb, p, budget, opts)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, ErrBudgetTooSmall):
			return false, nil
		}
		return false, err
	}
	lo, hi := 0, limit // lo fits (0 trivially), hi+1 does not
	for lo < hi {
		mid := (lo + hi + 1) / 2
		ok, err := fits(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, nil
}
