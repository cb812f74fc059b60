package qwen3

import (
	"errors"
	"fmt"

	"vlanode/placement"
	"vlanode/residency"
)

// PlanGeneration plans text generation on a of a prompt of prompt tokens
// and newTokens greedy tokens (placement.TextWorkload) within budget bytes
// (0: unlimited) as opts allow, the prompt prefilled in chunks of chunk
// tokens. With chunk 0 the prefill's chunk is chosen too: the whole
// prompt (up to the largest token tier, placement.Tiers), or a smaller
// tier down to 512, whichever plan predicts the least; a smaller chunk
// takes less activation memory (more room for homes, or a budget the
// whole prompt does not fit) and streams the non-resident units once per
// chunk. When no chunk plans, the error is the smallest chunk's (its
// minimum budget is the lowest).
func PlanGeneration(a *residency.Arch, prompt, newTokens, chunk int, p *residency.Profile, budget int64, opts residency.Options) (*residency.Plan, error) {
	if prompt <= 0 || newTokens <= 0 || chunk < 0 {
		return nil, fmt.Errorf("qwen3: a generation of %d tokens after a prompt of %d in chunks of %d", newTokens, prompt, chunk)
	}
	chunks := []int{chunk}
	if chunk == 0 {
		top := placement.Tiers[len(placement.Tiers)-1]
		chunks = []int{min(prompt, top)}
		for i := len(placement.Tiers) - 1; i >= 0; i-- {
			if t := placement.Tiers[i]; t >= minAutoChunk && t < chunks[0] {
				chunks = append(chunks, t)
			}
		}
	}
	var best *residency.Plan
	var last error
	for _, c := range chunks {
		if c >= prompt {
			c = 0 // one pass
		}
		w := placement.TextWorkload(prompt, newTokens, c)
		units := placement.DropIdle(PlanText(a.Text, a.Geometry(w), 0, true))
		plan, err := residency.NewPlan(a, units, w, p, budget, opts)
		var be *residency.BudgetError
		switch {
		case errors.As(err, &be):
			last = err
			continue
		case err != nil:
			return nil, err
		}
		if best == nil || plan.TotalMs < best.TotalMs-1e-9 {
			best = plan
		}
	}
	if best == nil {
		return nil, last
	}
	return best, nil
}

// minAutoChunk is the smallest prefill chunk PlanGeneration tries: below
// it every chunk streams the model again for few rows.
const minAutoChunk = 512
