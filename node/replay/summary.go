package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
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
	// Distinct holds each kind of error once, with its count, in the order
	// first seen: errors whose messages differ only in numbers and quoted
	// names (request ids, byte counts) are one kind.
	Distinct []ErrorKind
	Elapsed  time.Duration
	// Retries counts requests sent again after an overloaded answer
	// (Config.RetryOverloaded).
	Retries int
	// Clips is the number of clips played (PlayMany); 0 for one clip
	// played by Play. FailedClips are those that could not be opened or
	// stopped early, in the order they failed.
	Clips       int
	FailedClips []ClipFailure

	kinds map[string]int // the index in Distinct of each kind's key
}

// ClipFailure is a clip that could not be played to its end.
type ClipFailure struct {
	Clip  string `json:"clip"`
	Error string `json:"error"`
}

// PlansPerSecond is the plans received per second of the replay's wall
// time (0 before any time has passed).
func (s *Summary) PlansPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Plans) / s.Elapsed.Seconds()
}

// merge adds o's counts, errors and latencies to s (the elapsed time is
// the caller's: clips played at once overlap).
func (s *Summary) merge(o *Summary) {
	s.Frames += o.Frames
	s.Requests += o.Requests
	s.Plans += o.Plans
	s.RecordedPlans += o.RecordedPlans
	s.Invalid += o.Invalid
	s.Retries += o.Retries
	for k, v := range o.Skipped {
		s.Skipped[k] += v
	}
	for st, xs := range o.Latency {
		s.Latency[st] = append(s.Latency[st], xs...)
	}
	for _, k := range o.Distinct {
		s.Errors[k.Code] += k.Count
		key := k.Code + "\x00" + variable.ReplaceAllString(k.Example, "#")
		if i, ok := s.kinds[key]; ok {
			s.Distinct[i].Count += k.Count
			continue
		}
		s.kinds[key] = len(s.Distinct)
		s.Distinct = append(s.Distinct, k)
	}
}

// ErrorKind is one kind of error a replay met.
type ErrorKind struct {
	Code    string `json:"code"`    // the protocol's code or the client's (ErrTimeout …)
	Example string `json:"example"` // the message of the first one
	Count   int    `json:"count"`
}

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
	return &Summary{Mode: mode, Errors: map[string]int{}, Skipped: map[string]int{}, Latency: map[string][]float64{}, kinds: map[string]int{}}
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

// variable matches the parts of an error message that differ between
// errors of one kind: quoted names and numbers.
var variable = regexp.MustCompile(`"[^"]*"|\d+(\.\d+)?`)

// fail counts one failed request: its code and the kind of its message.
func (s *Summary) fail(code, msg string) {
	s.Errors[code]++
	key := code + "\x00" + variable.ReplaceAllString(msg, "#")
	if i, ok := s.kinds[key]; ok {
		s.Distinct[i].Count++
		return
	}
	s.kinds[key] = len(s.Distinct)
	s.Distinct = append(s.Distinct, ErrorKind{Code: code, Example: msg, Count: 1})
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

// Write prints the summary for people: counts, every kind of error once
// with its count, and the latency percentiles.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "replayed %d frames and %d requests in %v (%s)\n", s.Frames, s.Requests, s.Elapsed.Round(time.Millisecond), s.Mode)
	if s.Clips > 0 {
		fmt.Fprintf(w, "clips: %d, failed: %d\n", s.Clips, len(s.FailedClips))
		for _, f := range s.FailedClips {
			fmt.Fprintf(w, "  %s: %s\n", f.Clip, f.Error)
		}
	}
	fmt.Fprintf(w, "plans: %d (%.3f plans/s)\n", s.Plans, s.PlansPerSecond())
	if s.Retries > 0 {
		fmt.Fprintf(w, "requests sent again after an overloaded answer: %d\n", s.Retries)
	}
	fmt.Fprintf(w, "errors: %d%s\n", s.ErrorCount(), countsLine(s.Errors))
	for _, k := range s.Distinct {
		fmt.Fprintf(w, "  %d × %s: %s\n", k.Count, k.Code, k.Example)
	}
	if line := countsLine(s.Skipped); line != "" {
		n := 0
		for _, c := range s.Skipped {
			n += c
		}
		fmt.Fprintf(w, "requests not made: %d%s\n", n, line)
		if s.Skipped[SkipBusy] > 0 {
			fmt.Fprintln(w, "  node busy: due while --max-inflight requests awaited their answers (a robot asks again once it has its plan)")
		}
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
}

// summaryJSON is the summary as JSON (WriteJSON).
type summaryJSON struct {
	Mode          string                  `json:"mode"`
	Frames        int                     `json:"frames"`
	Requests      int                     `json:"requests"`
	Plans         int                     `json:"plans"`
	Errors        map[string]int          `json:"errors"`
	Distinct      []ErrorKind             `json:"distinct_errors"`
	Skipped       map[string]int          `json:"requests_not_made"`
	RecordedPlans int                     `json:"recorded_plans,omitempty"`
	Invalid       int                     `json:"unreadable_recorded,omitempty"`
	ElapsedS      float64                 `json:"elapsed_s"`
	PlansPerS     float64                 `json:"plans_per_s"`
	Retries       int                     `json:"retries,omitempty"`
	Clips         int                     `json:"clips,omitempty"`
	FailedClips   []ClipFailure           `json:"failed_clips,omitempty"`
	LatencyMs     map[string]latencyStats `json:"latency_ms"`
}

type latencyStats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// WriteJSON prints the summary as one JSON object on a line.
func (s *Summary) WriteJSON(w io.Writer) error { return json.NewEncoder(w).Encode(s.JSON()) }

// JSON returns the summary in the form WriteJSON prints: counts, the kinds
// of errors, and the latency percentiles by stage.
func (s *Summary) JSON() any {
	out := summaryJSON{
		Mode: s.Mode, Frames: s.Frames, Requests: s.Requests, Plans: s.Plans, Errors: s.Errors,
		Distinct: s.Distinct, Skipped: s.Skipped, RecordedPlans: s.RecordedPlans, Invalid: s.Invalid,
		ElapsedS: s.Elapsed.Seconds(), PlansPerS: s.PlansPerSecond(), Retries: s.Retries,
		Clips: s.Clips, FailedClips: s.FailedClips, LatencyMs: map[string]latencyStats{},
	}
	if out.Distinct == nil {
		out.Distinct = []ErrorKind{}
	}
	for _, st := range stages {
		if xs := s.Latency[st]; len(xs) > 0 {
			out.LatencyMs[st] = latencyStats{N: len(xs), P50: Percentile(xs, 50), P90: Percentile(xs, 90), P99: Percentile(xs, 99), Max: Percentile(xs, 100)}
		}
	}
	return out
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
