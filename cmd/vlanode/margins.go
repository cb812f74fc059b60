package main

import (
	"fmt"
	"math"
	"strings"
)

// marginRef is bench --margins' reference: the first budget's greedy
// reasoning tokens and the logits of each step, teacher-forced on them.
type marginRef struct {
	ids    []int32
	logits [][]float32
}

// logitMargins compares one plan's step logits with the reference's, at
// the same inputs (both teacher-forced on the reference's tokens). The
// issue's fidelity rule for plans with CPU shares: the greedy tokens are
// the reference's except at steps whose top-1 margin is smaller than the
// logit difference the plans measurably have.
type logitMargins struct {
	// Steps is the number of steps compared.
	Steps int `json:"steps"`
	// MaxAbsDiff is the largest |logit − reference logit| over every
	// finite logit of every step, at step MaxDiffStep.
	MaxAbsDiff  float64 `json:"max_abs_logit_diff"`
	MaxDiffStep int     `json:"max_diff_step"`
	// MinMargin is the reference's smallest top-1 margin (its best logit
	// less its second) over the steps, at step MinMarginStep.
	MinMargin     float64 `json:"ref_min_margin"`
	MinMarginStep int     `json:"ref_min_margin_step"`
	// Flips are the steps whose top token differs from the reference's.
	Flips []marginFlip `json:"flips,omitempty"`
}

// marginFlip is a step whose top token differs from the reference's.
type marginFlip struct {
	Step int `json:"step"`
	// RefToken is the reference's top token, Token this plan's.
	RefToken int `json:"ref_token"`
	Token    int `json:"token"`
	// RefMargin is the reference's logit of RefToken less its logit of
	// Token; Margin this plan's logit of Token less its logit of RefToken.
	RefMargin float64 `json:"ref_margin"`
	Margin    float64 `json:"margin"`
	// StepMaxDiff is the step's largest |logit difference|: the two
	// tokens' gap can move by up to twice it between the plans.
	StepMaxDiff float64 `json:"step_max_abs_logit_diff"`
}

// compareLogits compares got with ref step by step (over the steps both
// have).
func compareLogits(ref, got [][]float32) logitMargins {
	m := logitMargins{Steps: min(len(ref), len(got)), MinMargin: math.Inf(1)}
	for i := range m.Steps {
		r, g := ref[i], got[i]
		stepMax := 0.0
		for j := range min(len(r), len(g)) {
			if isFinite(r[j]) && isFinite(g[j]) {
				stepMax = max(stepMax, math.Abs(float64(g[j])-float64(r[j])))
			}
		}
		if stepMax > m.MaxAbsDiff {
			m.MaxAbsDiff, m.MaxDiffStep = stepMax, i
		}
		a, second := top2(r)
		if a < 0 {
			continue
		}
		if margin := float64(r[a]) - float64(r[second]); second >= 0 && margin < m.MinMargin {
			m.MinMargin, m.MinMarginStep = margin, i
		}
		if b, _ := top2(g); b >= 0 && b != a {
			m.Flips = append(m.Flips, marginFlip{Step: i, RefToken: a, Token: b,
				RefMargin: float64(r[a]) - float64(r[b]), Margin: float64(g[b]) - float64(g[a]), StepMaxDiff: stepMax})
		}
	}
	if math.IsInf(m.MinMargin, 1) {
		m.MinMargin = 0
	}
	return m
}

// top2 is the index of the largest finite value of v and of the next
// (−1 where there is none); the first of equal values wins, as the greedy
// pick does.
func top2(v []float32) (first, second int) {
	first, second = -1, -1
	for j, x := range v {
		switch {
		case !isFinite(x):
		case first < 0 || x > v[first]:
			first, second = j, first
		case second < 0 || x > v[second]:
			second = j
		}
	}
	return first, second
}

func isFinite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

func (m logitMargins) String() string {
	s := fmt.Sprintf("margins over %d teacher-forced steps: largest logit difference %.4g (step %d), the reference's smallest top-1 margin %.4g (step %d)",
		m.Steps, m.MaxAbsDiff, m.MaxDiffStep, m.MinMargin, m.MinMarginStep)
	if len(m.Flips) == 0 {
		return s + "; every step's top token the reference's"
	}
	var parts []string
	for _, f := range m.Flips {
		parts = append(parts, fmt.Sprintf("step %d: token %d over the reference's %d (the reference's margin %.4g, this plan's %.4g, the step's largest logit difference %.4g)",
			f.Step, f.Token, f.RefToken, f.RefMargin, f.Margin, f.StepMaxDiff))
	}
	return s + "; top token differs at " + strings.Join(parts, "; ")
}
