package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"vlanode/layering"
)

// stageTimeline is one stage of a timed inference (bench --timeline):
// from its first copy or compute to its last compute's end, how long each
// stream was busy.
type stageTimeline struct {
	SpanMs    float64 `json:"span_ms"`
	CopyMs    float64 `json:"copy_busy_ms"`
	ComputeMs float64 `json:"compute_busy_ms"`
	// DecodeMs is the decode stream's busy time (compressed units).
	DecodeMs float64 `json:"decode_busy_ms"`
	Copies   int     `json:"copies"`
	Computes int     `json:"computes"`
	Decodes  int     `json:"decodes"`
	// CPUMs is the CPU engine's compute in the stage, CPUWaitMs its tasks'
	// waits for their input, CPUTasks their number.
	CPUMs     float64 `json:"cpu_busy_ms,omitempty"`
	CPUWaitMs float64 `json:"cpu_wait_ms,omitempty"`
	CPUTasks  int     `json:"cpu_tasks,omitempty"`
}

// stageOf is the stage of a pass named "stage" or "stage.N".
func stageOf(pass string) string {
	st, _, _ := strings.Cut(pass, ".")
	return st
}

// summarizeTimeline sums the turns per stage.
func summarizeTimeline(turns []layering.Turn) map[string]stageTimeline {
	type span struct{ lo, hi float64 }
	spans := map[string]*span{}
	out := map[string]stageTimeline{}
	for _, t := range turns {
		st := stageOf(t.Pass)
		sp := spans[st]
		if sp == nil {
			sp = &span{lo: math.Inf(1), hi: math.Inf(-1)}
			spans[st] = sp
		}
		s := out[st]
		sp.lo = min(sp.lo, t.ExeAtMs)
		sp.hi = max(sp.hi, t.ExeAtMs+t.ExeMs)
		if t.Slot != layering.NoSlot {
			sp.lo = min(sp.lo, t.CopyAtMs)
			s.CopyMs += t.CopyMs
			s.Copies++
		}
		if t.Compressed {
			s.DecodeMs += t.DecodeMs
			s.Decodes++
		}
		s.ComputeMs += t.ExeMs
		s.Computes++
		if t.CPU != nil {
			s.CPUMs += t.CPU.Ms
			s.CPUWaitMs += t.CPU.WaitMs
			s.CPUTasks++
		}
		out[st] = s
	}
	for st, sp := range spans {
		s := out[st]
		s.SpanMs = sp.hi - sp.lo
		out[st] = s
	}
	return out
}

// copyGap is time the copy stream spent idle before a copy.
type copyGap struct {
	ms         float64
	pass, unit string // the copy after the gap
}

// copyGaps are the idle times between consecutive copies, longest first.
func copyGaps(turns []layering.Turn) []copyGap {
	var copies []layering.Turn
	for _, t := range turns {
		if t.Slot != layering.NoSlot {
			copies = append(copies, t)
		}
	}
	sort.SliceStable(copies, func(i, j int) bool { return copies[i].CopyAtMs < copies[j].CopyAtMs })
	var gaps []copyGap
	for i := 1; i < len(copies); i++ {
		prev, c := copies[i-1], copies[i]
		if g := c.CopyAtMs - (prev.CopyAtMs + prev.CopyMs); g > 0 {
			gaps = append(gaps, copyGap{ms: g, pass: c.Pass, unit: c.Unit.String()})
		}
	}
	sort.SliceStable(gaps, func(i, j int) bool { return gaps[i].ms > gaps[j].ms })
	return gaps
}

// printTimeline reports each stage's stream use and the copy stream's
// longest gaps.
func printTimeline(w io.Writer, budget string, stages map[string]stageTimeline, turns []layering.Turn) {
	names := make([]string, 0, len(stages))
	for st := range stages {
		names = append(names, st)
	}
	order := map[string]int{"vision": 0, "prefill": 1, "decode": 2, "diffusion": 3}
	sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })
	for _, st := range names {
		s := stages[st]
		dec := ""
		if s.Decodes > 0 {
			dec = fmt.Sprintf(", decodes %.1f ms busy (%d, %.0f%%)", s.DecodeMs, s.Decodes, 100*s.DecodeMs/max(s.SpanMs, 1e-9))
		}
		fmt.Fprintf(w, "vlanode bench: timeline %s %s: %.1f ms from first op to last; copies %.1f ms busy (%d, %.0f%%), computes %.1f ms busy (%d, %.0f%%)%s\n",
			budget, st, s.SpanMs, s.CopyMs, s.Copies, 100*s.CopyMs/max(s.SpanMs, 1e-9), s.ComputeMs, s.Computes, 100*s.ComputeMs/max(s.SpanMs, 1e-9), dec)
		if s.CPUTasks > 0 {
			fmt.Fprintf(w, "vlanode bench: timeline %s %s: the CPU computed %.1f ms in %d tasks (%.3f ms each) and waited %.1f ms for their inputs\n",
				budget, st, s.CPUMs, s.CPUTasks, s.CPUMs/float64(s.CPUTasks), s.CPUWaitMs)
		}
	}
	gaps := copyGaps(turns)
	total := 0.0
	for _, g := range gaps {
		total += g.ms
	}
	if len(gaps) == 0 {
		return
	}
	var top []string
	for _, g := range gaps[:min(len(gaps), 6)] {
		top = append(top, fmt.Sprintf("%.2f ms before %s in %s", g.ms, g.unit, g.pass))
	}
	fmt.Fprintf(w, "vlanode bench: timeline %s: the copy stream idled %.1f ms in %d gaps between copies; longest: %s\n",
		budget, total, len(gaps), strings.Join(top, "; "))
}

// writeTurns writes a timed inference's turns as JSON.
func writeTurns(path string, turns []layering.Turn) error {
	raw, err := json.MarshalIndent(turns, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the timeline: %w", err)
	}
	return nil
}
