package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"vlanode/node/gpu"
	"vlanode/placement"
)

// benchTextSpec is what `vlanode bench` runs on a Qwen3 text model: each
// budget × prompt length × plan, a generation of newTokens after a
// synthetic prompt.
type benchTextSpec struct {
	mf               modelFlags
	lf               layerFlags
	budgets          []int64
	kinds            []string
	prompts          []int
	newTokens, chunk int
	warmup, runs     int
	replacedWarmup   int // warm-up generations after a re-placement; -1: warmup
	out              string
	asJSON           bool
	nv               *gpu.NVML // this process's GPU memory, when NVML answers
}

// textBenchReport is what bench measured on a text model, as printed and
// written to bench.json.
type textBenchReport struct {
	Model     string    `json:"model"`
	Host      string    `json:"host"`
	Date      string    `json:"date"`
	NewTokens int       `json:"new_tokens"`
	Runs      []textRun `json:"runs"`
	Sweep     *sweep    `json:"sweep,omitempty"`
}

// textRun is one budget, prompt length and plan.
type textRun struct {
	Budget     int64              `json:"budget_bytes"` // 0: none
	Prompt     int                `json:"prompt_tokens"`
	PlanKind   string             `json:"plan_kind"`
	Mode       string             `json:"mode"`
	Backend    string             `json:"backend"`
	StageKinds map[string]string  `json:"stage_kinds"`
	CPUShare   map[string]float64 `json:"cpu_share"`
	Resident   int                `json:"resident_units"`
	Streamed   int                `json:"streamed_units"`
	// Timing is the median run's (by total time) beside the prediction.
	Timing      textTiming         `json:"timing"`
	MeasuredMs  map[string]float64 `json:"measured_ms"`
	PredictedMs map[string]float64 `json:"predicted_ms"`
	// CPUBusyMs is the CPU engine's compute in the median run, CPUWaitMs
	// its tasks' waits for their input from the GPU.
	CPUBusyMs float64 `json:"cpu_busy_ms"`
	CPUWaitMs float64 `json:"cpu_wait_ms"`
	// PeakAllocBytes is the most device memory in use during a generation
	// (the CUDA allocator's account, backend.MemoryPeak); PeakNVMLBytes
	// NVML's figure for the process, sampled during the runs (it may keep
	// memory an earlier plan of the same load used).
	PeakAllocBytes int64 `json:"peak_alloc_bytes"`
	PeakNVMLBytes  int64 `json:"peak_nvml_bytes"`
	// IDsSHA256 digests the greedy ids; SameIDs says they equal the first
	// plan's at this budget and prompt, Deterministic that every run of
	// this plan gave the same ids.
	IDsSHA256     string `json:"ids_sha256"`
	SameIDs       bool   `json:"same_ids"`
	Deterministic bool   `json:"deterministic"`
	HomeError     string `json:"home_error,omitempty"`
	// LoadSeconds is the load (the budget's first run) or the
	// re-placement of the units for this plan.
	LoadSeconds float64 `json:"load_s"`
	Error       string  `json:"error,omitempty"`
	ids         []int32
}

// parsePromptLens reads --prompt-lens: token counts, K = 1024.
func parsePromptLens(list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		mult := 1
		if v, ok := strings.CutSuffix(strings.ToUpper(s), "K"); ok {
			s, mult = v, 1024
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, usagef("--prompt-lens: %q is not a positive token count", s)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// runBenchText measures generations on a Qwen3 text model: for every
// budget, prompt length and plan, one load and warmup+runs generations;
// the prefill's and the decode's ms and tokens/s beside the plan's
// prediction; with two or more plans, the sweep.
func runBenchText(ctx context.Context, sp benchTextSpec, stdout, stderr io.Writer) error {
	rep := &textBenchReport{Model: sp.mf.dir, NewTokens: sp.newTokens, Date: time.Now().UTC().Format(time.RFC3339)}
	if host, err := os.Hostname(); err == nil {
		rep.Host = host
	}
	arch, err := textArch(sp.mf.dir)
	if err != nil {
		return err
	}
	if nv := openNVMLQuiet(sp.mf.device, stderr); nv != nil {
		defer nv.Close()
		sp.nv = nv
	}
	failed := 0
	for _, b := range sp.budgets {
		// One load per budget: every prompt length and plan after the
		// first re-places the units (budgetedText.replan).
		var bm *budgetedText
		for _, prompt := range sp.prompts {
			var first []int32
			for _, kind := range sp.kinds {
				if err := ctx.Err(); err != nil {
					if bm != nil {
						bm.Close()
					}
					return err
				}
				lf := sp.lf
				lf.kind = kindOption(kind)
				s := textSpec{dir: sp.mf.dir, device: sp.mf.device, threads: sp.mf.threads, budget: b, layers: lf,
					promptLen: prompt, newTokens: sp.newTokens, chunk: sp.chunk, replaceable: true}
				t0 := time.Now()
				var err error
				warmup := sp.warmup
				if bm == nil {
					bm, err = loadBudgetedText(s, stderr)
				} else {
					err = bm.replan(s, stderr)
					if sp.replacedWarmup >= 0 {
						warmup = sp.replacedWarmup
					}
				}
				r := textRun{Budget: b, Prompt: prompt, PlanKind: kind, LoadSeconds: time.Since(t0).Seconds()}
				if err == nil {
					err = benchTextOne(ctx, bm, s, syntheticPrompt(prompt, arch.Text.VocabSize), warmup, sp.runs, sp.nv, &r)
				}
				if err != nil {
					fmt.Fprintf(stderr, "vlanode bench: budget %s, prompt %d, plan %s: %v\n", budgetText(b), prompt, kind, err)
					r.Error = err.Error()
					rep.Runs = append(rep.Runs, r)
					failed++
					continue
				}
				if first == nil {
					first = r.ids
				}
				r.SameIDs = slices.Equal(first, r.ids)
				rep.Runs = append(rep.Runs, r)
				fmt.Fprintf(stderr, "vlanode bench: %s, prompt %d, %s: prefill %.1f ms (%.0f tokens/s), decode %.1f ms (%.2f tokens/s); predicted %.1f and %.1f ms\n",
					budgetText(b), prompt, kindsText(kind, r.StageKinds), r.Timing.PrefillMs, r.Timing.PrefillTokS, r.Timing.DecodeMs, r.Timing.DecodeTokS,
					r.Timing.PredPrefillMs, r.Timing.PredDecodeMs)
			}
		}
		if bm != nil {
			if err := bm.Close(); err != nil {
				return err
			}
			debug.FreeOSMemory() // the next budget loads the checkpoint again
		}
	}
	if len(sp.kinds) > 1 {
		var rows []sweepRun
		for _, r := range rep.Runs {
			rows = append(rows, sweepRun{Workload: fmt.Sprintf("text %d+%d", r.Prompt, sp.newTokens), Budget: r.Budget, Kind: r.PlanKind,
				StageKinds: r.StageKinds, PredictedMs: r.PredictedMs, MeasuredMs: r.MeasuredMs, Error: r.Error})
		}
		if !slices.Contains(sp.kinds, autoKind) {
			// The planner's pick without a generation of its own: its plan.
			for _, b := range sp.budgets {
				for _, prompt := range sp.prompts {
					lf := sp.lf
					lf.kind = ""
					p, err := planText(textSpec{dir: sp.mf.dir, budget: b, layers: lf, promptLen: prompt, newTokens: sp.newTokens, chunk: sp.chunk})
					if err != nil {
						return fmt.Errorf("planning the pick at %s, prompt %d: %w", budgetText(b), prompt, err)
					}
					rows = append(rows, plannedRun(fmt.Sprintf("text %d+%d", prompt, sp.newTokens), b, "", p))
				}
			}
		}
		rep.Sweep = newSweep(rows)
	}
	if sp.out != "" {
		if err := os.MkdirAll(sp.out, 0o755); err != nil {
			return err
		}
		raw, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(sp.out, "bench.json"), append(raw, '\n'), 0o644); err != nil {
			return err
		}
	}
	if sp.asJSON {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		rep.print(stdout)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d runs failed", failed, len(rep.Runs))
	}
	return nil
}

// benchTextOne times warmup+runs generations after prompt on bm, placed
// for s, into r: the median run's timing beside the plan's prediction,
// the generations' peak device memory, whether every run gave the same
// ids.
func benchTextOne(ctx context.Context, bm *budgetedText, s textSpec, prompt []int32, warmup, runs int, nv *gpu.NVML, r *textRun) error {
	debug.FreeOSMemory() // packing garbage, before the timed runs
	peak := startNVMLSampler(nv)
	r.Mode, r.Backend = bm.mode.String(), bm.be.Name()
	r.StageKinds, r.CPUShare = stageKindMap(bm.plan), map[string]float64{}
	for _, st := range bm.plan.Stages {
		r.CPUShare[string(st.Stage)] = st.CPUShare
	}
	r.Resident, r.Streamed = residentUnits(bm.plan), streamedUnits(bm.plan)
	var gens []*genResult
	r.Deterministic = true
	for i := range warmup + runs {
		g, err := runGeneration(ctx, bm, prompt, s.newTokens)
		if err != nil {
			peak()
			return err
		}
		if i >= warmup {
			gens = append(gens, g)
		}
		r.PeakAllocBytes = max(r.PeakAllocBytes, g.gen.VRAMPeakBytes)
		if r.ids == nil {
			r.ids = g.gen.IDs
		} else if !slices.Equal(r.ids, g.gen.IDs) {
			r.Deterministic = false
		}
	}
	r.PeakNVMLBytes = peak()
	// The median generation by total time.
	slices.SortFunc(gens, func(a, b *genResult) int { return int(a.gen.Total - b.gen.Total) })
	g := gens[len(gens)/2]
	r.Timing = timingOf(g.gen, bm.plan)
	r.CPUBusyMs, r.CPUWaitMs, r.HomeError = g.cpuBusyMs, g.cpuWaitMs, g.gen.HomeError
	r.MeasuredMs = map[string]float64{string(placement.StagePrefill): r.Timing.PrefillMs, string(placement.StageDecode): r.Timing.DecodeMs,
		"total": r.Timing.PrefillMs + r.Timing.DecodeMs}
	r.PredictedMs = predictedMap(bm.plan)
	h := sha256.New()
	_ = binary.Write(h, binary.LittleEndian, r.ids)
	r.IDsSHA256 = fmt.Sprintf("%x", h.Sum(nil))
	return nil
}

// openNVMLQuiet opens NVML for the engine's GPU on a device other than
// the CPU, or returns nil (and says why) when it cannot.
func openNVMLQuiet(device string, log io.Writer) *gpu.NVML {
	if device == "cpu" {
		return nil
	}
	nv, err := openNVMLOf("0")
	if err != nil {
		fmt.Fprintf(log, "vlanode bench: no per-process GPU memory: %v\n", err)
		return nil
	}
	return nv
}

// print writes the runs as a table (each decode's speed against the
// GPU-only plan's at the same budget and prompt) and the sweep.
func (rep *textBenchReport) print(w io.Writer) {
	fmt.Fprintf(w, "model %s; text workload: synthetic prompts, %d new tokens (the first from the prefill)\n", rep.Model, rep.NewTokens)
	gpuOnly := map[[2]int64]float64{}
	for _, r := range rep.Runs {
		if r.Error == "" && r.PlanKind == forcedKinds[0] {
			gpuOnly[[2]int64{r.Budget, int64(r.Prompt)}] = r.Timing.DecodeTokS
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "budget\tprompt\tplan\tresident\tstreamed\tpasses\tprefill ms\tpredicted\ttokens/s\tdecode ms\tpredicted\ttokens/s\tvs gpu-only\tCPU ms\tpeak alloc GB\tpeak NVML GB\twithin\tsame ids\tdeterministic\t")
	for _, r := range rep.Runs {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\t%s\tfailed: %s\t\n", shortBudget(r.Budget), r.Prompt, r.PlanKind, r.Error)
			continue
		}
		t := r.Timing
		vs := "-"
		if g := gpuOnly[[2]int64{r.Budget, int64(r.Prompt)}]; g > 0 {
			vs = fmt.Sprintf("%.2f×", t.DecodeTokS/g)
		}
		within := "-"
		if r.Budget > 0 && r.PeakAllocBytes > 0 {
			within = yesNo(r.PeakAllocBytes <= r.Budget && r.PeakNVMLBytes <= r.Budget)
		}
		pred := func(v float64) string {
			if r.Backend != "cuda" {
				return "-" // the prediction is the profile's GPU's
			}
			return fmt.Sprintf("%.1f", v)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%.1f\t%s\t%.0f\t%.1f\t%s\t%.2f\t%s\t%.0f\t%.2f\t%.2f\t%s\t%s\t%s\t\n",
			shortBudget(r.Budget), r.Prompt, kindsText(r.PlanKind, r.StageKinds), r.Resident, r.Streamed, t.Chunks,
			t.PrefillMs, pred(t.PredPrefillMs), t.PrefillTokS, t.DecodeMs, pred(t.PredDecodeMs), t.DecodeTokS, vs, r.CPUBusyMs,
			float64(r.PeakAllocBytes)/1e9, float64(r.PeakNVMLBytes)/1e9, within, yesNo(r.SameIDs), yesNo(r.Deterministic))
	}
	tw.Flush()
	if rep.Sweep != nil {
		fmt.Fprintln(w)
		rep.Sweep.print(w)
	}
}
