package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"vlanode/placement"
	"vlanode/residency"
)

// autoKind is --plan-kinds' name for the planner's own pick per stage.
const autoKind = "auto"

// forcedKinds are the three plans a sweep compares (paper 2).
var forcedKinds = []string{string(residency.GPUOnly), string(residency.Static), string(residency.Dynamic)}

// parseKinds reads --plan-kinds: a list of auto and the forced kinds, or
// all; empty means --plan-kind's, else auto. --exact forbids the kinds
// with CPU shares.
func parseKinds(list string, opts planOpts) ([]string, error) {
	if list == "" {
		if opts.kind != "" {
			return []string{opts.kind}, nil
		}
		return []string{autoKind}, nil
	}
	if opts.kind != "" {
		return nil, usagef("give --plan-kind or --plan-kinds, not both")
	}
	var out []string
	for _, k := range strings.Split(list, ",") {
		k = strings.TrimSpace(k)
		add := []string{k}
		if k == "all" {
			add = append([]string{autoKind}, forcedKinds...)
		} else if k != autoKind && !slices.Contains(forcedKinds, k) {
			return nil, usagef("--plan-kinds: unknown plan %q (want auto, gpu-only, static, dynamic or all)", k)
		}
		for _, a := range add {
			if opts.exact && (a == string(residency.Static) || a == string(residency.Dynamic)) {
				return nil, usagef("--plan-kinds: --exact forbids the CPU shards of a %s plan", a)
			}
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// kindOption is --plan-kind's value for a plan of --plan-kinds.
func kindOption(kind string) string {
	if kind == autoKind {
		return ""
	}
	return kind
}

// predictedMap is a plan's predicted ms per stage and in all ("total").
func predictedMap(p *residency.Plan) map[string]float64 {
	out := map[string]float64{"total": p.TotalMs}
	for st, ms := range p.PredictedMs {
		out[string(st)] = ms
	}
	return out
}

// stageKindMap is each stage's plan kind.
func stageKindMap(p *residency.Plan) map[string]string {
	out := map[string]string{}
	for _, sp := range p.Stages {
		out[string(sp.Stage)] = string(sp.Kind)
	}
	return out
}

// stageAbbrev shortens a stage's name for kindsText (decode and
// diffusion share their first letter).
var stageAbbrev = map[placement.Stage]string{placement.StageVision: "vis", placement.StagePrefill: "pre",
	placement.StageDecode: "dec", placement.StageDiffusion: "diff"}

// kindsText is a run's plan for a table: the kind asked for and, where
// the stages differ from it, each stage's: "auto: pre gpu-only, dec dynamic".
func kindsText(kind string, stages map[string]string) string {
	var parts []string
	for _, s := range placement.Stages() {
		if k, ok := stages[string(s)]; ok && k != kind {
			name, ok := stageAbbrev[s]
			if !ok {
				name = string(s)
			}
			parts = append(parts, name+" "+k)
		}
	}
	if kind == "" {
		kind = autoKind
	}
	if len(parts) == 0 {
		return kind
	}
	return kind + ": " + strings.Join(parts, ", ")
}

// sweepRun is one measured run of a sweep: a plan (auto or forced) for a
// budget and a workload.
type sweepRun struct {
	Workload    string
	Budget      int64
	Mode        string
	Kind        string
	StageKinds  map[string]string
	PredictedMs map[string]float64
	MeasuredMs  map[string]float64
	Error       string
	// Planned says the run was planned and not loaded (an auto run that
	// --plan-kinds did not ask for: its pick, no measurement).
	Planned bool
}

// plannedRun is the sweep's auto run when --plan-kinds leaves it out:
// the planner's pick per stage and its predictions, from the plan alone.
func plannedRun(workload string, budget int64, mode string, p *residency.Plan) sweepRun {
	return sweepRun{Workload: workload, Budget: budget, Mode: mode, Kind: autoKind, StageKinds: stageKindMap(p),
		PredictedMs: predictedMap(p), Planned: true}
}

// sweep compares, per budget, workload and stage, the planner's pick
// (the auto plan's kind for the stage) with the measured best of the
// three forced plans: paper 2's oracle comparison.
type sweep struct {
	Rows []sweepRow `json:"rows"`
	// Configurations counts the rows where the forced plans differ (some
	// forced plan streams or shares the stage: a choice exists); Matches
	// those where the pick is the measured best, Within2Pct those where
	// the pick's forced plan measured within 2% of the best (noise).
	Configurations int `json:"configurations"`
	Matches        int `json:"matches"`
	Within2Pct     int `json:"within_2pct"`
}

// sweepRow is one budget, workload and stage.
type sweepRow struct {
	Workload string `json:"workload"`
	Budget   int64  `json:"budget_bytes"`
	Mode     string `json:"mode,omitempty"`
	Stage    string `json:"stage"`
	// Pick is the auto plan's kind for the stage; Best the forced kind
	// that measured least. PickPlanned says the auto plan was planned,
	// not run (--plan-kinds without auto).
	Pick        string `json:"pick"`
	PickPlanned bool   `json:"pick_planned,omitempty"`
	Best        string `json:"best"`
	// MeasuredMs and PredictedMs are each forced plan's stage time, and
	// the auto plan's under "auto".
	MeasuredMs  map[string]float64 `json:"measured_ms"`
	PredictedMs map[string]float64 `json:"predicted_ms"`
	// Choice says the forced plans differ in the stage (else every kind
	// places it the same way: no pick to get wrong).
	Choice     bool `json:"choice"`
	Match      bool `json:"match"`
	Within2Pct bool `json:"within_2pct"`
}

// newSweep groups runs by budget, workload and mode and compares per
// stage; groups without an auto run or a forced run are left out.
func newSweep(runs []sweepRun) *sweep {
	type key struct {
		workload string
		budget   int64
		mode     string
	}
	var keys []key
	groups := map[key]map[string]sweepRun{}
	for _, r := range runs {
		if r.Error != "" {
			continue
		}
		k := key{r.Workload, r.Budget, r.Mode}
		if groups[k] == nil {
			groups[k] = map[string]sweepRun{}
			keys = append(keys, k)
		}
		groups[k][r.Kind] = r
	}
	sw := &sweep{}
	for _, k := range keys {
		g := groups[k]
		auto, ok := g[autoKind]
		if !ok {
			continue
		}
		for _, st := range placement.Stages() {
			s := string(st)
			pick, ok := auto.StageKinds[s]
			if !ok {
				continue
			}
			row := sweepRow{Workload: k.workload, Budget: k.budget, Mode: k.mode, Stage: s, Pick: pick, PickPlanned: auto.Planned,
				MeasuredMs: map[string]float64{}, PredictedMs: map[string]float64{autoKind: auto.PredictedMs[s]}}
			if !auto.Planned {
				row.MeasuredMs[autoKind] = auto.MeasuredMs[s]
			}
			for _, f := range forcedKinds {
				r, ok := g[f]
				if !ok {
					continue
				}
				row.MeasuredMs[f], row.PredictedMs[f] = r.MeasuredMs[s], r.PredictedMs[s]
				if r.StageKinds[s] != string(residency.GPUOnly) {
					row.Choice = true // this forced plan shares the stage with the CPU
				}
				if row.Best == "" || r.MeasuredMs[s] < row.MeasuredMs[row.Best] {
					row.Best = f
				}
			}
			if row.Best == "" {
				continue
			}
			row.Match = row.Pick == row.Best
			if m, ok := row.MeasuredMs[row.Pick]; ok {
				row.Within2Pct = m <= 1.02*row.MeasuredMs[row.Best]
			}
			if row.Choice {
				sw.Configurations++
				if row.Match {
					sw.Matches++
				}
				if row.Within2Pct {
					sw.Within2Pct++
				}
			}
			sw.Rows = append(sw.Rows, row)
		}
	}
	return sw
}

// print writes the sweep as a table and its tally.
func (sw *sweep) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tbudget\tstage\tpick\tbest\tgpu-only ms\tstatic ms\tdynamic ms\tauto ms\tpredicted g/s/d ms\tmatch\t")
	cell := func(m map[string]float64, k string) string {
		if v, ok := m[k]; ok {
			return fmt.Sprintf("%.1f", v)
		}
		return "-"
	}
	for _, r := range sw.Rows {
		match := "no choice"
		switch {
		case !r.Choice:
		case r.Match:
			match = "yes"
		case r.Within2Pct:
			match = "within 2%"
		default:
			match = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s/%s\t%s\t\n", r.Workload, shortBudget(r.Budget), r.Stage, r.Pick, r.Best,
			cell(r.MeasuredMs, forcedKinds[0]), cell(r.MeasuredMs, forcedKinds[1]), cell(r.MeasuredMs, forcedKinds[2]), cell(r.MeasuredMs, autoKind),
			cell(r.PredictedMs, forcedKinds[0]), cell(r.PredictedMs, forcedKinds[1]), cell(r.PredictedMs, forcedKinds[2]), match)
	}
	tw.Flush()
	pct := func(n int) float64 {
		if sw.Configurations == 0 {
			return 0
		}
		return 100 * float64(n) / float64(sw.Configurations)
	}
	fmt.Fprintf(w, "planner's pick = measured best in %d of %d configurations with a choice (%.0f%%); within 2%% of the best in %d (%.0f%%)\n",
		sw.Matches, sw.Configurations, pct(sw.Matches), sw.Within2Pct, pct(sw.Within2Pct))
	for _, r := range sw.Rows {
		if r.PickPlanned {
			fmt.Fprintln(w, "picks planned, not run: --plan-kinds left out auto, so each pick is the planner's plan for the budget (no load, no auto ms)")
			break
		}
	}
}
