package replay

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"vlanode/msgs"
)

// Summary is the outcome of a replay.
type Summary struct {
	Mode          string         // "use_latest" or "explicit frames", "real time" or "fast"
	Frames        int            // frames published (with Jobs: read, and sent inside the jobs)
	Requests      int            // requests sent (or refused by the client for size)
	Plans         int            // plans received
	Errors        map[string]int // by code, and the client's own failures (ErrTimeout …)
	Skipped       map[string]int // requests not made, by reason
	RecordedPlans int            // plans in a recorded stream (not replayed)
	Invalid       int            // recorded messages that did not decode
	// Latency holds, by stage, one value in ms for each plan: the client's
	// round trip and the plan's timing_ms stages.
	Latency map[string][]float64
	Notes   []string // the first few error messages
	Elapsed time.Duration
}

// maxNotes bounds Summary.Notes.
const maxNotes = 5

// Stages in the order the summary prints them.
var stages = []string{"round_trip", "total", "preprocess", "vision", "prefill", "decode", "diffusion"}

func newSummary(cfg Config) *Summary {
	mode := "use_latest"
	if cfg.Explicit {
		mode = "explicit frames"
	}
	if cfg.Jobs != nil {
		mode = "jobs (vla.jobs)"
	}
	if cfg.Fast {
		mode += ", as fast as answered"
	} else {
		mode += fmt.Sprintf(", real time ×%g", cfg.Speed)
	}
	return &Summary{Mode: mode, Errors: map[string]int{}, Skipped: map[string]int{}, Latency: map[string][]float64{}}
}

func (s *Summary) addPlan(p *msgs.Plan, rtt time.Duration) {
	s.Plans++
	t := p.TimingMs
	for stage, v := range map[string]float64{
		"round_trip": float64(rtt) / float64(time.Millisecond), "total": t.Total, "preprocess": t.Preprocess,
		"vision": t.Vision, "prefill": t.Prefill, "decode": t.Decode, "diffusion": t.Diffusion,
	} {
		s.Latency[stage] = append(s.Latency[stage], v)
	}
}

func (s *Summary) note(msg string) {
	if len(s.Notes) < maxNotes {
		s.Notes = append(s.Notes, msg)
	}
}

// ErrorCount returns the number of requests answered with an error or lost.
func (s *Summary) ErrorCount() int {
	n := 0
	for _, c := range s.Errors {
		n += c
	}
	return n
}

// Percentile returns the p-th percentile (nearest rank) of xs, or NaN when
// xs is empty.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Write prints the summary for people.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "replayed %d frames and %d requests in %v (%s)\n", s.Frames, s.Requests, s.Elapsed.Round(time.Millisecond), s.Mode)
	fmt.Fprintf(w, "plans: %d\n", s.Plans)
	fmt.Fprintf(w, "errors: %d%s\n", s.ErrorCount(), countsLine(s.Errors))
	if len(s.Skipped) > 0 {
		fmt.Fprintf(w, "requests not made:%s\n", countsLine(s.Skipped))
	}
	if s.RecordedPlans > 0 || s.Invalid > 0 {
		fmt.Fprintf(w, "recorded plans (not replayed): %d; unreadable recorded messages: %d\n", s.RecordedPlans, s.Invalid)
	}
	if s.Plans > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "latency ms\tn\tp50\tp90\tp99\tmax\t")
		for _, st := range stages {
			xs := s.Latency[st]
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", st, len(xs),
				Percentile(xs, 50), Percentile(xs, 90), Percentile(xs, 99), Percentile(xs, 100))
		}
		tw.Flush()
	}
	for _, n := range s.Notes {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

// countsLine formats counts as " (a 2, b 1)", sorted by name.
func countsLine(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
