package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"vlanode/configs"
	"vlanode/cuda"
	"vlanode/layering"
	"vlanode/models/alpamayo"
	"vlanode/models/qwen3vl"
	"vlanode/msgs"
	"vlanode/node/gpu"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/weights"
)

// runBench runs the standard workload at each budget and reports measured
// latency per stage beside the plan's prediction, the streaming bound and
// the peak device memory; with --accelerate it runs Hugging Face
// Accelerate's offloading on the same machine afterwards and reports the
// ratio.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("bench", stderr)
	var mf modelFlags
	mf.register(fs)
	var lf layerFlags
	fs.StringVar(&lf.profile, "profile", "", "device profile JSON for the planner (default: the shipped H200 profile)")
	lf.planOpts.register(fs)
	budgetList := fs.String("budgets", "4G,8G,16G,none", "comma-separated VRAM budgets (G = 10⁹ bytes, GiB = 2³⁰; none = unlimited)")
	modeList := fs.String("modes", "auto", "comma-separated executor modes to run at each budget: "+strings.Join(modeNames, ", "))
	samples := fs.Int("samples", 1, "trajectory samples of the standard request (num_traj_samples), run through the expert together; the plans hold them")
	runs := fs.Int("runs", 2, "measured inferences per budget and mode (the median is reported)")
	timeline := fs.Bool("timeline", false, "after the measured runs, one more inference with every copy and compute timed: per-stage busy and idle time of both streams, the copy stream's longest gaps, and (with --out) every turn in timeline-BUDGET-MODE.json")
	warmup := fs.Int("warmup", 1, "inferences before the measured ones (kernel compilation, cuBLAS)")
	replacedWarmup := fs.Int("replaced-warmup", -1, "Qwen3 text models: generations before the measured ones after a re-placement (every plan and prompt length but the first of a budget, which runs --warmup on the fresh load); -1: as --warmup")
	vlm := fs.String("vlm", "", "the VLM's config folder, overriding the checkpoint's vlm_name_or_path")
	acc := fs.String("accelerate", "", "path of accelerate_baseline.py: run Accelerate's offloading at the same budgets afterwards and report the ratio")
	python := fs.String("python", "python3", "the Python that runs --accelerate")
	accReps := fs.Int("accelerate-reps", 1, "timed Accelerate inferences per budget (after its warm-up)")
	compareRaw := fs.Bool("compare-raw", false, "run each budget and mode twice in this call, compressed (--compress) and raw, and report the speedup of compression")
	out := fs.String("out", "", "folder for bench.json (and Accelerate's results); default: none written")
	asJSON := fs.Bool("json", false, "print the report (bench.json's content) instead of the tables")
	withMargins := fs.Bool("margins", false, "after each budget's runs, one more inference teacher-forced on the first budget's greedy reasoning tokens, its logits compared step by step with that budget's: the largest logit difference, the reference's top-1 margins, and every step whose top token differs, with its margins (docs/planning.md, Fidelity)")
	probe := fs.Bool("host-probe", false, "before each load and after its runs, measure the CPU engine's one-row read rate from pinned host memory, alone and with copies in flight (about a second each; CUDA only); each inference's CPU rate is printed anyway where the plan gives the CPU shares")
	kindList := fs.String("plan-kinds", "", "comma-separated plans to run at each budget (and prompt length), each from its own load: auto (the planner's pick per stage), gpu-only, static, dynamic (forced for every stage that streams), or all (the four); with two or more, a sweep table compares the planner's pick per stage (without auto: planned, not run) with the measured best of the three forced plans; default: --plan-kind's, or auto")
	var tf textFlags
	promptList := fs.String("prompt-lens", fmt.Sprint(defaultPromptLen), "Qwen3 text models: comma-separated prompt lengths (K = 1024 tokens: 512,2K,4K,8K), each a synthetic prompt (as generate --prompt-len)")
	fs.IntVar(&tf.newTokens, "new-tokens", 16, "Qwen3 text models: the tokens generated after each prompt")
	fs.IntVar(&tf.chunk, "prefill-chunk", 0, "Qwen3 text models: the prefill's chunk (0: the planner's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	if *runs < 1 || *warmup < 0 || *replacedWarmup < -1 {
		return usagef("--runs must be ≥ 1, --warmup ≥ 0 and --replaced-warmup ≥ -1")
	}
	if *samples < 1 || *samples > msgs.MaxTrajSamples {
		return usagef("--samples must be 1 to %d", msgs.MaxTrajSamples)
	}
	if err := lf.options().Validate(); err != nil {
		return usagef("%v", err)
	}
	if err := tf.check(); err != nil {
		return err
	}
	budgets, err := parseBudgets(*budgetList)
	if err != nil {
		return err
	}
	kinds, err := parseKinds(*kindList, lf.planOpts)
	if err != nil {
		return err
	}
	if mt, err := configs.ReadModelType(mf.dir); err == nil && mt == "qwen3" {
		if *withMargins || *probe {
			return usagef("--margins and --host-probe measure the standard workload (an Alpamayo checkpoint); %s is a Qwen3 text model", mf.dir)
		}
		prompts, err := parsePromptLens(*promptList)
		if err != nil {
			return err
		}
		return runBenchText(ctx, benchTextSpec{mf: mf, lf: lf, budgets: budgets, kinds: kinds, prompts: prompts,
			newTokens: tf.newTokens, chunk: tf.chunk, warmup: *warmup, replacedWarmup: *replacedWarmup, runs: *runs, out: *out, asJSON: *asJSON}, stdout, stderr)
	}
	modes := strings.Split(*modeList, ",")
	for _, m := range modes {
		if err := (&layerFlags{mode: m}).check(); err != nil {
			return err
		}
	}
	w := placement.StandardWorkload().WithBatch(0, *samples)
	rep := &benchReport{Model: mf.dir, Workload: w, Date: time.Now().UTC().Format(time.RFC3339)}
	if host, err := os.Hostname(); err == nil {
		rep.Host = host
	}

	if mf.device != "cpu" && cuda.Available() == nil {
		bw, err := measureH2D(386 << 20)
		if err != nil {
			return fmt.Errorf("measuring the copy bandwidth: %w", err)
		}
		rep.H2DGBps = bw
		fmt.Fprintf(stderr, "vlanode bench: pinned host-to-device copies: %.1f GB/s (386 MiB blobs)\n", bw)
	}
	var nv *gpu.NVML
	if mf.device != "cpu" {
		// The engine's GPU is CUDA's device 0; NVML is asked for it by
		// its UUID (NVML's own index 0 differs under CUDA_VISIBLE_DEVICES).
		if nv, err = openNVMLOf("0"); err != nil {
			fmt.Fprintf(stderr, "vlanode bench: no per-process GPU memory: %v\n", err)
			nv = nil
		} else {
			defer nv.Close()
		}
	}

	compress := []bool{lf.compress}
	if *compareRaw {
		if !lf.compress {
			return usagef("--compare-raw compares compressed streaming with raw: drop --compress=false")
		}
		compress = []bool{true, false}
	}
	var first *alpamayo.Result
	var margins *marginRef
	if *withMargins {
		margins = &marginRef{}
	}
	failed := 0
	for _, b := range budgets {
		for _, mode := range modes {
			for _, kind := range kinds {
				for _, z := range compress {
					if err := ctx.Err(); err != nil {
						return err
					}
					opts := lf.planOpts
					opts.kind = kindOption(kind)
					opts.compress = z
					r, res, err := benchOne(ctx, budgetSpec{
						dir: mf.dir, vlm: *vlm, device: mf.device, threads: mf.threads, budget: b, samples: *samples,
						layers: layerFlags{mode: mode, profile: lf.profile, planOpts: opts},
					}, *warmup, *runs, *timeline, *probe && mf.device != "cpu" && cuda.Available() == nil, margins, nv, stderr)
					r.PlanKind = kind
					if err != nil {
						// Report it and go on: the other budgets still tell.
						fmt.Fprintf(stderr, "vlanode bench: budget %s, mode %s, plan %s, %s: %v\n", budgetText(b), mode, kind, variantName(z), err)
						rep.Runs = append(rep.Runs, benchRun{Budget: b, Mode: mode, PlanKind: kind, Compress: z, Error: err.Error()})
						failed++
						continue
					}
					if first == nil {
						first = res
					}
					r.Identical = sameResult(first, res)
					r.SameReasoning = slices.Equal(first.ReasoningIDs, res.ReasoningIDs)
					r.MaxActionDiff = maxAbsDiff(first.Normalized, res.Normalized)
					rep.Runs = append(rep.Runs, r)
					predicted := ""
					if r.Backend == "cuda" {
						predicted = fmt.Sprintf(" (predicted %.0f)", r.PredictedMs["total"])
					}
					fmt.Fprintf(stderr, "vlanode bench: %s %s %s: %.0f ms%s, peak %.2f GB allocated, %.2f GB NVML; graphs: decode %v, diffusion %v%s\n",
						budgetText(b), r.Mode, kind+" "+variantName(z), r.MeasuredMs["total"], predicted, float64(r.PeakAllocBytes)/1e9, float64(r.PeakNVMLBytes)/1e9,
						r.DecodeGraph, r.DiffusionGraph, map[bool]string{true: " (" + r.GraphError + ")"}[r.GraphError != ""])
				}
			}
		}
	}
	rep.fillBounds()
	rep.fillSpeedups()
	if len(kinds) > 1 {
		var rows []sweepRun
		for _, r := range rep.Runs {
			rows = append(rows, sweepRun{Workload: placement.StandardWorkloadName, Budget: r.Budget, Mode: r.Mode, Kind: r.PlanKind,
				StageKinds: r.StageKinds, PredictedMs: r.PredictedMs, MeasuredMs: r.MeasuredMs, Error: r.Error})
		}
		if !slices.Contains(kinds, autoKind) {
			// The planner's pick without a load of its own: its plan.
			for _, b := range budgets {
				for _, mode := range modes {
					s := budgetSpec{dir: mf.dir, vlm: *vlm, device: mf.device, threads: mf.threads, budget: b, samples: *samples,
						layers: layerFlags{mode: mode, profile: lf.profile, planOpts: lf.planOpts}}
					p, m, err := planBudgeted(s)
					if err != nil {
						return fmt.Errorf("planning the pick at %s: %w", budgetText(b), err)
					}
					rows = append(rows, plannedRun(placement.StandardWorkloadName, b, m.String(), p))
				}
			}
		}
		rep.Sweep = newSweep(rows)
	}
	write := func() error {
		if *out == "" {
			return nil
		}
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
		raw, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		for _, r := range rep.Runs {
			if r.turns == nil {
				continue
			}
			name := fmt.Sprintf("timeline-%d-%s-%s.json", r.Budget, r.Mode, variantName(r.Compress)) // the budget in bytes, 0: none
			if err := writeTurns(filepath.Join(*out, name), r.turns); err != nil {
				return err
			}
		}
		return os.WriteFile(filepath.Join(*out, "bench.json"), append(raw, '\n'), 0o644)
	}
	if err := write(); err != nil { // vlanode's figures, before the long baseline
		return err
	}
	if *acc != "" {
		debug.FreeOSMemory() // the checkpoint's host copies go back before Python loads its own
		if err := runAccelerate(ctx, rep, *acc, *python, *accReps, *out, budgets, stderr); err != nil {
			return err
		}
	}
	if *asJSON {
		raw, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", raw)
	} else {
		rep.print(stdout)
	}
	defer func() {
		if failed > 0 && err == nil {
			err = fmt.Errorf("%d of %d runs failed", failed, len(rep.Runs))
		}
	}()
	return write()
}

// parseBudgets reads --budgets.
func parseBudgets(list string) ([]int64, error) {
	var out []int64
	for _, s := range strings.Split(list, ",") {
		b, err := residency.ParseBudget(strings.TrimSpace(s))
		if err != nil {
			return nil, usagef("--budgets: %v", err)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, usagef("--budgets is empty")
	}
	return out, nil
}

// benchReport is what bench measured, as printed and written to
// bench.json.
type benchReport struct {
	Model    string             `json:"model"`
	Host     string             `json:"host"`
	Date     string             `json:"date"`
	Workload placement.Workload `json:"workload"`
	// H2DGBps is the pinned host-to-device bandwidth measured first.
	H2DGBps float64    `json:"h2d_gbps"`
	Runs    []benchRun `json:"runs"`
	// BoundSource says where the bound's compute times come from.
	BoundSource string `json:"bound_source"`
	// Accelerate is the baseline's latency per budget (s), when run.
	Accelerate map[string]accelerateRun `json:"accelerate,omitempty"`
	// Sweep compares the planner's pick per stage with the measured best
	// of the forced plans (--plan-kinds with two or more).
	Sweep *sweep `json:"sweep,omitempty"`
}

// benchRun is one budget and mode.
type benchRun struct {
	Budget int64  `json:"budget_bytes"` // 0: none
	Mode   string `json:"mode"`
	// Compress says the run was planned with --compress (compressed where
	// the planner predicted it pays); Compressed counts the units that
	// streamed compressed, CompressNote says why none did.
	Compress     bool   `json:"compress"`
	Compressed   int    `json:"compressed_units"`
	CompressNote string `json:"compress_note,omitempty"`
	// PinnedBytes is the pinned host memory of the streamed units as
	// loaded (compressed where they are), PinnedRawBytes the same raw.
	PinnedBytes    int64 `json:"pinned_bytes"`
	PinnedRawBytes int64 `json:"pinned_raw_bytes"`
	// Compression is, per module, the raw and stored bytes of the units
	// coded at load, and CompressS the time the coding took.
	Compression map[string]zModule `json:"compression,omitempty"`
	CompressS   float64            `json:"compress_s,omitempty"`
	// SpeedupVsRaw is the raw run's total over this one's, at the same
	// budget and mode in the same call (--compare-raw).
	SpeedupVsRaw float64 `json:"speedup_vs_raw,omitempty"`
	// PlanKind is the plan asked for (auto: the planner's pick per
	// stage); StageKinds the kind the plan gave each stage.
	PlanKind    string             `json:"plan_kind"`
	StageKinds  map[string]string  `json:"stage_kinds"`
	Backend     string             `json:"backend"` // cpu or cuda; the predictions and bounds are the GPU's
	Resident    int                `json:"resident_units"`
	Streamed    int                `json:"streamed_units"`
	SlotBytes   int64              `json:"slot_bytes"`
	MeasuredMs  map[string]float64 `json:"measured_ms"`  // median per stage and total
	PredictedMs map[string]float64 `json:"predicted_ms"` // the plan's
	BoundMs     map[string]float64 `json:"bound_ms"`     // the streaming lower bound
	// StreamedBytes per pass of each stage: the weights not home in VRAM,
	// streamed or read by the CPU.
	StreamedBytes map[string]int64 `json:"streamed_bytes"`
	// EnterBytes are copied into homes once, in each stage's first pass.
	EnterBytes map[string]int64 `json:"enter_bytes"`
	// HomeError says why the budget refused homes the plan gave units, if
	// it did (they were streamed instead).
	HomeError string `json:"home_error,omitempty"`
	// CPUBusyMs is the CPU engine's compute time in the last timed
	// inference (each task from its input's arrival to its result),
	// CPUWaitMs the time its tasks waited for their input from the GPU,
	// CPUBytes what it read of the weights there (the plan's CPU bytes per
	// pass over the passes run), CPUGBps their rate over the compute time.
	CPUBusyMs float64 `json:"cpu_busy_ms"`
	CPUWaitMs float64 `json:"cpu_wait_ms"`
	CPUBytes  int64   `json:"cpu_bytes"`
	CPUGBps   float64 `json:"cpu_gbps"`
	// CPURuns is each measured inference's CPU compute and read rate, in
	// order (the figures above are the last one's).
	CPURuns []cpuRun `json:"cpu_runs,omitempty"`
	// ProbeBefore and ProbeAfter are the host probe (--host-probe) taken
	// before the load and after the last inference.
	ProbeBefore *hostProbe `json:"probe_before,omitempty"`
	ProbeAfter  *hostProbe `json:"probe_after,omitempty"`
	// PredictedAtCPUMs is the plan's prediction again (residency.Repredict:
	// its placement and CPU shares as loaded) with the profile's one-row
	// CPU rate set to MeasuredCPUGBps, what the measured runs' CPU tasks
	// read (their bytes over their compute time): the plan's figure for
	// the host as it was during the runs (ms by stage and "total").
	PredictedAtCPUMs map[string]float64 `json:"predicted_at_measured_cpu_ms,omitempty"`
	MeasuredCPUGBps  float64            `json:"measured_cpu_gbps,omitempty"`
	// Margins compares this budget's logits, teacher-forced on the first
	// budget's reasoning tokens, with the first budget's (--margins).
	Margins        *logitMargins    `json:"margins,omitempty"`
	DecodeSteps    int              `json:"decode_steps"`
	EulerSteps     int              `json:"euler_steps"`
	PeakAllocBytes int64            `json:"peak_alloc_bytes"` // the CUDA allocator's account
	PeakNVMLBytes  int64            `json:"peak_nvml_bytes"`  // NVML's per-process figure, sampled
	PeakByPurpose  map[string]int64 `json:"peak_by_purpose"`
	PromptTokens   int              `json:"prompt_tokens"`
	// DecodeGraph and DiffusionGraph: the steps replayed captured graphs.
	DecodeGraph    bool   `json:"decode_graph"`
	DiffusionGraph bool   `json:"diffusion_graph"`
	GraphError     string `json:"graph_error,omitempty"`
	Identical      bool   `json:"identical"` // reasoning and trajectory equal the first run's
	// SameReasoning says the greedy reasoning ids equal the first run's;
	// MaxActionDiff is the largest difference of a normalized action from
	// the first run's (a plan with CPU shards sums its MLPs in two parts:
	// deterministic, not bit-identical).
	SameReasoning bool    `json:"same_reasoning"`
	MaxActionDiff float64 `json:"max_action_diff"`
	// ResultSHA256 digests reasoning ids, actions and trajectory, to
	// compare runs of different calls.
	ResultSHA256 string  `json:"result_sha256"`
	LoadSeconds  float64 `json:"load_s"`
	Error        string  `json:"error,omitempty"`
	// Timeline sums one more inference, timed unit by unit (--timeline),
	// per stage; turns are its units' copies and computes, written to a
	// file of their own.
	Timeline map[string]stageTimeline `json:"timeline,omitempty"`
	turns    []layering.Turn
	// stage compute times at this budget, for the bound (the unlimited
	// run's).
	stageMs map[string]float64
}

// zModule is one module's compression at load: the units whose whole
// blob was coded (raw and compressed bytes, their ratio), and the GPU
// shares coded for the units the CPU shares.
type zModule struct {
	Units       int     `json:"units"`
	RawBytes    int64   `json:"raw_bytes"`
	StoredBytes int64   `json:"stored_bytes"`
	Ratio       float64 `json:"ratio"`
	Shares      int     `json:"shares,omitempty"`
	ShareRaw    int64   `json:"share_raw_bytes,omitempty"`
	ShareBytes  int64   `json:"share_stored_bytes,omitempty"`
}

// variantName names a run's streaming: compressed or raw.
func variantName(compress bool) string {
	if compress {
		return "compressed"
	}
	return "raw"
}

// fillSpeedups gives each compressed run that streamed compressed units
// its speedup over the raw run of the same budget and mode.
func (rep *benchReport) fillSpeedups() {
	for i := range rep.Runs {
		r := &rep.Runs[i]
		if r.Error != "" || !r.Compress || r.Compressed == 0 {
			continue
		}
		for _, q := range rep.Runs {
			if q.Error == "" && !q.Compress && q.Budget == r.Budget && q.Mode == r.Mode && r.MeasuredMs["total"] > 0 {
				r.SpeedupVsRaw = q.MeasuredMs["total"] / r.MeasuredMs["total"]
			}
		}
	}
}

// compressionOf sums what loading coded, per module, and the pinned host
// memory of the streamed units.
func compressionOf(r *benchRun, bm *budgeted) {
	for _, u := range bm.plan.Units {
		if u.Weights == placement.Streamed {
			r.PinnedRawBytes += u.Bytes
		}
	}
	r.PinnedBytes = r.PinnedRawBytes
	r.CompressNote = bm.plan.CompressNote
	zr := bm.model.Compression()
	if zr == nil {
		return
	}
	r.CompressS = zr.Seconds
	r.Compression = map[string]zModule{}
	for _, u := range zr.Units {
		r.PinnedBytes += u.Stored - u.Raw
		if !u.Coded && len(u.Shares) == 0 {
			continue
		}
		r.Compressed++
		m := r.Compression[string(u.ID.Module)]
		if u.Coded {
			m.Units++
			m.RawBytes += u.Raw
			m.StoredBytes += u.ZBytes
			m.Ratio = float64(m.StoredBytes) / float64(m.RawBytes)
		}
		for c, n := range u.Shares {
			m.Shares++
			m.ShareRaw += u.ShareRaw[c]
			m.ShareBytes += n
		}
		r.Compression[string(u.ID.Module)] = m
	}
}

type accelerateRun struct {
	Budget    string  `json:"budget"`
	LatencyS  float64 `json:"latency_s"`
	PeakBytes int64   `json:"peak_alloc_bytes"`
	Error     string  `json:"error,omitempty"`
}

// standardRequest is the standard workload's request for m: 16 images of
// a 1×20×36 grid (1920×1080 resized to 576×320: 720 patches, 180 tokens),
// a straight 16-pose history, greedy reasoning of w.ReasoningTokens decode
// passes, seeded flow noise.
func standardRequest(m *alpamayo.Model, w placement.Workload) *alpamayo.Request {
	dim := m.VLM.Config.Vision.PatchDim()
	req := &alpamayo.Request{Greedy: true, Seed: 1, MaxReasoningTokens: w.ReasoningTokens + 1}
	for range w.Images {
		req.Images.Grids = append(req.Images.Grids, qwen3vl.Grid{T: 1, H: 20, W: 36})
	}
	req.Images.Pixels = make([]float32, w.Images*720*dim)
	for i := range req.Images.Pixels {
		req.Images.Pixels[i] = float32(i%255)/127.5 - 1
	}
	for i := range 16 {
		req.HistXYZ = append(req.HistXYZ, [3]float32{float32(i-15) * 0.5, 0, 0})
		req.HistRot = append(req.HistRot, [9]float32{1, 0, 0, 0, 1, 0, 0, 0, 1})
	}
	return req
}

// benchOne loads the model within one budget and mode and times it.
func benchOne(ctx context.Context, s budgetSpec, warmup, runs int, timeline, probe bool, margins *marginRef, nv *gpu.NVML, log io.Writer) (benchRun, *alpamayo.Result, error) {
	var before *hostProbe
	if probe {
		if h, err := probeHost(s.layers.cpuThreads); err != nil {
			fmt.Fprintf(log, "vlanode bench: %s: host probe before the load: %v\n", budgetText(s.budget), err)
		} else {
			before = &h
			fmt.Fprintf(log, "vlanode bench: %s: host probe before the load: %s\n", budgetText(s.budget), h)
		}
	}
	peak := startNVMLSampler(nv)
	t0 := time.Now()
	bm, err := loadBudgeted(s, log)
	if err != nil {
		peak()
		return benchRun{}, nil, err
	}
	defer func() {
		bm.Close()
		// The next budget loads 22 GB again: collect this one's host
		// memory now rather than during the next one's inferences.
		debug.FreeOSMemory()
	}()
	debug.FreeOSMemory() // packing garbage, before the timed runs
	r := benchRun{
		Budget: s.budget, Mode: bm.mode.String(), Resident: residentUnits(bm.plan), Streamed: streamedUnits(bm.plan),
		SlotBytes: bm.plan.SlotBytes, LoadSeconds: time.Since(t0).Seconds(), Backend: bm.be.Name(),
		PredictedMs: predictedMap(bm.plan),
	}
	r.Compress = s.layers.compress
	compressionOf(&r, bm)
	r.StreamedBytes, r.EnterBytes = streamedPerPass(bm.plan)
	r.StageKinds = stageKindMap(bm.plan)
	req := standardRequest(bm.model, placement.StandardWorkload())
	req.Samples = s.samples
	var res *alpamayo.Result
	var times []alpamayo.Timing
	for i := range warmup + runs {
		if res, err = bm.model.Infer(ctx, req); err != nil {
			peak()
			return r, nil, err
		}
		if i >= warmup {
			times = append(times, res.Timing)
		}
		if c, ok := cpuRunOf(bm.plan, res); ok {
			what := fmt.Sprintf("run %d", i+1-warmup)
			if i < warmup {
				what = fmt.Sprintf("warm-up %d", i+1)
			} else {
				r.CPURuns = append(r.CPURuns, c)
			}
			fmt.Fprintf(log, "vlanode bench: %s %s: %.1f ms, decode %.1f ms; CPU %.0f ms, %.1f GB/s\n",
				budgetText(s.budget), what, float64(res.Timing.Total)/1e6, float64(res.Timing.Decode)/1e6, c.BusyMs, c.GBps)
		}
	}
	if timeline {
		bm.model.SetProfiling(true)
		tres, err := bm.model.Infer(ctx, req)
		bm.model.SetProfiling(false)
		if err != nil {
			peak()
			return r, nil, fmt.Errorf("timed inference: %w", err)
		}
		if tres.Layers != nil {
			r.turns = tres.Layers.Turns
			r.Timeline = summarizeTimeline(r.turns)
			printTimeline(log, budgetText(s.budget), r.Timeline, r.turns)
		}
	}
	if margins != nil {
		fr := *req
		fr.TeacherForced = margins.ids
		if fr.TeacherForced == nil { // the first budget: its own tokens
			fr.TeacherForced = res.ReasoningIDs
		}
		fres, err := bm.model.Infer(ctx, &fr)
		if err != nil {
			peak()
			return r, nil, fmt.Errorf("teacher-forced inference: %w", err)
		}
		if margins.logits == nil {
			margins.ids, margins.logits = fr.TeacherForced, fres.StepLogits
		}
		m := compareLogits(margins.logits, fres.StepLogits)
		r.Margins = &m
		fmt.Fprintf(log, "vlanode bench: %s: %s\n", budgetText(s.budget), m)
	}
	r.PeakNVMLBytes = peak()
	r.ProbeBefore = before
	if probe {
		if h, err := probeHost(s.layers.cpuThreads); err != nil {
			fmt.Fprintf(log, "vlanode bench: %s: host probe after the runs: %v\n", budgetText(s.budget), err)
		} else {
			r.ProbeAfter = &h
			fmt.Fprintf(log, "vlanode bench: %s: host probe after the runs: %s\n", budgetText(s.budget), h)
		}
	}
	if u, ok := bm.be.(*cuda.Backend); ok {
		rp := u.Usage()
		r.PeakAllocBytes = rp.Peak
		r.PeakByPurpose = map[string]int64{}
		var parts []string
		for _, p := range rp.Purposes {
			r.PeakByPurpose[p.Purpose] = p.Peak
			parts = append(parts, fmt.Sprintf("%s %.3f", p.Purpose, float64(p.Peak)/1e9))
		}
		planned := make([]string, 0, len(bm.plan.Bytes))
		for _, p := range residency.Purposes() {
			planned = append(planned, fmt.Sprintf("%s %.3f", p, float64(bm.plan.Bytes[p])/1e9))
		}
		fmt.Fprintf(log, "vlanode bench: peak GB by purpose: %s\nvlanode bench: planned GB: %s\n", strings.Join(parts, ", "), strings.Join(planned, ", "))
	}
	r.PromptTokens = res.PromptTokens
	r.DecodeGraph, r.DiffusionGraph, r.GraphError = res.DecodeGraph, res.DiffusionGraph, res.GraphError
	r.HomeError = res.HomeError
	if res.Layers != nil {
		r.CPUBusyMs, r.CPUWaitMs = res.Layers.CPUMs()
	}
	r.CPUBytes = cpuBytesOf(bm.plan, res)
	if r.CPUBusyMs > 0 {
		r.CPUGBps = float64(r.CPUBytes) / (r.CPUBusyMs * 1e6)
		if prof, _, err := loadProfile(s.layers.profile); err == nil && prof.CPU != nil && decodeOnlyCPU(bm.plan) {
			if note := cpuRateNote(r.CPUGBps, prof.CPU); note != "" {
				fmt.Fprintf(log, "vlanode bench: %s: %s\n", budgetText(s.budget), note)
			}
		}
	}
	r.ResultSHA256 = resultDigest(res)
	r.MeasuredMs = medianTiming(times)
	// The measured rate is the one-row tier's where the decode alone has
	// CPU shares; with other tiers' tasks in it, it is no tier's.
	if rate := measuredCPURate(r.CPURuns); rate > 0 && r.Backend == "cuda" && decodeOnlyCPU(bm.plan) {
		if at, err := repredictAt(s, bm.plan, rate); err != nil {
			fmt.Fprintf(log, "vlanode bench: %s: the plan at the measured CPU rate: %v\n", budgetText(s.budget), err)
		} else {
			r.PredictedAtCPUMs, r.MeasuredCPUGBps = at, rate
			fmt.Fprintf(log, "vlanode bench: %s: at the CPU rate the measured runs read (%.1f GB/s) the plan predicts %.1f ms (measured %.1f, %+.1f%%; at the profile's rate %.1f)\n",
				budgetText(s.budget), rate, at["total"], r.MeasuredMs["total"], (r.MeasuredMs["total"]/at["total"]-1)*100, r.PredictedMs["total"])
		}
	}
	r.DecodeSteps = res.CachedTokens - res.PromptTokens
	r.EulerSteps = bm.model.Expert.Config.Steps
	r.stageMs = map[string]float64{}
	for k, v := range r.MeasuredMs {
		r.stageMs[k] = v
	}
	return r, res, nil
}

// cpuRun is one inference's CPU compute: its tasks' time, ms, and the
// weights they read per second, 10⁹ bytes/s.
type cpuRun struct {
	BusyMs float64 `json:"busy_ms"`
	GBps   float64 `json:"gbps"`
}

// cpuRunOf is res's CPU compute under plan; false when the CPU computed
// nothing.
func cpuRunOf(plan *residency.Plan, res *alpamayo.Result) (cpuRun, bool) {
	if res.Layers == nil {
		return cpuRun{}, false
	}
	busy, _ := res.Layers.CPUMs()
	if busy <= 0 {
		return cpuRun{}, false
	}
	return cpuRun{BusyMs: busy, GBps: float64(cpuBytesOf(plan, res)) / (busy * 1e6)}, true
}

// cpuBytesOf is the weights plan's CPU shares read in res: each stage's
// per pass, times its passes (the decode's as many as res ran).
func cpuBytesOf(plan *residency.Plan, res *alpamayo.Result) int64 {
	var n int64
	for _, sp := range plan.Stages {
		passes := int64(sp.Passes)
		if sp.Stage == placement.StageDecode {
			passes = int64(res.CachedTokens - res.PromptTokens)
		}
		n += sp.CPUBytes * passes
	}
	return n
}

// measuredCPURate is what the runs' CPU tasks read per second over their
// compute time together, 10⁹ bytes/s (0: none computed).
func measuredCPURate(runs []cpuRun) float64 {
	var bytes, ms float64
	for _, c := range runs {
		bytes += c.GBps * c.BusyMs * 1e6
		ms += c.BusyMs
	}
	if ms <= 0 {
		return 0
	}
	return bytes / (ms * 1e6)
}

// repredictAt is plan's prediction with the profile's one-row CPU rate
// set to gbps, its placement and shares as loaded (residency.Repredict),
// ms by stage and "total".
func repredictAt(s budgetSpec, plan *residency.Plan, gbps float64) (map[string]float64, error) {
	arch, prof, err := s.archProfile()
	if err != nil {
		return nil, err
	}
	at, err := prof.WithCPURate(1, gbps)
	if err != nil {
		return nil, err
	}
	again, err := residency.Repredict(arch, alpamayo.PlanUnits(arch, plan.Workload), plan, at)
	if err != nil {
		return nil, err
	}
	return predictedMap(again), nil
}

// decodeOnlyCPU says the plan gives the CPU shares in the decode stage
// alone: its CPU tasks are all of the one-row tier.
func decodeOnlyCPU(p *residency.Plan) bool {
	decode := false
	for _, sp := range p.Stages {
		if sp.CPUBytes == 0 {
			continue
		}
		if sp.Stage != placement.StageDecode {
			return false
		}
		decode = true
	}
	return decode
}

// cpuRateNote says when the CPU engine read the decode's shares more than
// 10% off the rate the profile plans its one-row tier with (empty when
// within): the plan's prediction assumes the profile's. On the H200 the
// same plan's CPU tasks read 42-93 GB/s from call to call and within one
// (bench/results/budgets.md run 34).
func cpuRateNote(measured float64, c *residency.CPUProfile) string {
	planned := 0.0
	for _, r := range c.Rates {
		if r.Rows == 1 {
			planned = r.GBps
		}
	}
	if planned <= 0 || math.Abs(measured/planned-1) <= 0.1 {
		return ""
	}
	return fmt.Sprintf("the CPU engine read its decode shares at %.1f GB/s, the profile plans with %.1f GB/s (%+.0f%%): "+
		"the prediction assumes the profile's rate (vlanode profile --calibrate measures this host's now)",
		measured, planned, (measured/planned-1)*100)
}

// streamedPerPass is, per stage, the weight bytes of one pass that are
// not home in VRAM (copied into the slots, compressed where they stream
// compressed, or read by the CPU: what a GPU-only plan of the same homes
// copies), and the bytes copied into homes once, in the stage's first
// pass.
func streamedPerPass(p *residency.Plan) (streamed, enter map[string]int64) {
	streamed, enter = map[string]int64{}, map[string]int64{}
	for _, sp := range p.Stages {
		streamed[string(sp.Stage)] = sp.CopiedBytes + sp.CPUBytes
		if sp.EnterCopiedBytes > 0 {
			enter[string(sp.Stage)] = sp.EnterCopiedBytes
		}
	}
	return streamed, enter
}

// medianTiming is the per-stage median of the runs, in ms.
func medianTiming(ts []alpamayo.Timing) map[string]float64 {
	pick := map[string]func(alpamayo.Timing) time.Duration{
		"vision": func(t alpamayo.Timing) time.Duration { return t.Vision }, "prefill": func(t alpamayo.Timing) time.Duration { return t.Prefill },
		"decode": func(t alpamayo.Timing) time.Duration { return t.Decode }, "diffusion": func(t alpamayo.Timing) time.Duration { return t.Diffusion },
		"total": func(t alpamayo.Timing) time.Duration { return t.Total },
	}
	out := map[string]float64{}
	for k, f := range pick {
		v := make([]float64, len(ts))
		for i, t := range ts {
			v[i] = float64(f(t)) / 1e6
		}
		out[k] = median(v)
	}
	return out
}

// resultDigest is the SHA-256 of the reasoning ids, the sampled actions
// and the trajectory, little-endian.
func resultDigest(r *alpamayo.Result) string {
	h := sha256.New()
	_ = binary.Write(h, binary.LittleEndian, r.ReasoningIDs)
	_ = binary.Write(h, binary.LittleEndian, r.Normalized)
	_ = binary.Write(h, binary.LittleEndian, r.XYZ)
	_ = binary.Write(h, binary.LittleEndian, r.Rot)
	return hex.EncodeToString(h.Sum(nil))
}

// maxAbsDiff is the largest |a[i] − b[i]| (+Inf for different lengths).
func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// sameResult reports whether two inferences agree bit for bit.
func sameResult(a, b *alpamayo.Result) bool {
	return slices.Equal(a.ReasoningIDs, b.ReasoningIDs) && slices.Equal(a.Normalized, b.Normalized) &&
		slices.Equal(a.XYZ, b.XYZ) && slices.Equal(a.Rot, b.Rot)
}

// fillBounds computes each run's GPU-only streaming lower bound with the
// bandwidth measured first and the stage compute times of the unlimited
// run (every unit resident): per stage, a pass takes at least its compute
// and at least the copies of its streamed bytes (the formula of
// ../shared/bench/accelerate_baseline.py's bound, with vlanode's own
// placement):
//
//	Σ over stages: E/BW + n·max(C/n, S/BW)
//
// where S are the bytes a pass of the stage streams (or, in a plan with
// CPU shards, would stream on the GPU alone), E the bytes copied into
// homes once in the stage's first pass, n its passes and C its compute.
func (rep *benchReport) fillBounds() {
	var ref *benchRun
	for i := range rep.Runs {
		if rep.Runs[i].Budget == 0 && rep.Runs[i].Streamed == 0 {
			ref = &rep.Runs[i]
			break
		}
	}
	if ref == nil || rep.H2DGBps == 0 {
		rep.BoundSource = "not computed: needs the budget none and a measured copy bandwidth"
		return
	}
	rep.BoundSource = fmt.Sprintf("compute: the unlimited run's stage times; copies: %.1f GB/s measured", rep.H2DGBps)
	bw := rep.H2DGBps * 1e9 / 1e3 // bytes per ms
	for i := range rep.Runs {
		r := &rep.Runs[i]
		c := ref.stageMs
		nd, nf := float64(max(r.DecodeSteps, 1)), float64(max(r.EulerSteps, 1))
		copyMs := func(stage string) float64 { return float64(r.StreamedBytes[stage]) / bw }
		enter := func(stage string) float64 { return float64(r.EnterBytes[stage]) / bw }
		r.BoundMs = map[string]float64{
			"vision":    max(c["vision"], copyMs("vision")) + enter("vision"),
			"prefill":   max(c["prefill"], copyMs("prefill")) + enter("prefill"),
			"decode":    nd*max(c["decode"]/float64(max(ref.DecodeSteps, 1)), copyMs("decode")) + enter("decode"),
			"diffusion": nf*max(c["diffusion"]/float64(max(ref.EulerSteps, 1)), copyMs("diffusion")) + enter("diffusion"),
		}
		r.BoundMs["total"] = r.BoundMs["vision"] + r.BoundMs["prefill"] + r.BoundMs["decode"] + r.BoundMs["diffusion"]
	}
}

// print writes the report as tables.
func (rep *benchReport) print(w io.Writer) {
	fmt.Fprintf(w, "model %s; standard workload: %d images × %d patches, %d prompt tokens planned, %d decode passes, %d Euler steps\n",
		rep.Model, rep.Workload.Images, rep.Workload.PatchesPerImage, rep.Workload.PromptTokens, rep.Workload.ReasoningTokens, rep.Workload.EulerSteps)
	if rep.H2DGBps > 0 {
		fmt.Fprintf(w, "pinned host-to-device: %.1f GB/s; bound: %s\n", rep.H2DGBps, rep.BoundSource)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "budget\tmode\tplan\tweights\tresident\tstreamed\tpinned GB\tvision ms\tprefill ms\tdecode ms\tdiffusion ms\ttotal ms\tpredicted ms\tvs plan\tbound ms\tvs bound\tpeak alloc GB\tpeak NVML GB\twithin\tidentical\tsame ids\tmax action diff\taccelerate s\tspeedup\t")
	for _, r := range rep.Runs {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tfailed: %s\t\n", shortBudget(r.Budget), r.Mode, r.PlanKind, variantName(r.Compress), r.Error)
			continue
		}
		m := r.MeasuredMs
		within := "-"
		if r.Budget > 0 && r.PeakAllocBytes > 0 {
			within = yesNo(r.PeakAllocBytes <= r.Budget && r.PeakNVMLBytes <= r.Budget)
		}
		// The prediction and the bound are the GPU's: none on the CPU.
		predicted, vsPlan, bound, vsBound := "-", "-", "-", "-"
		if r.Backend == "cuda" {
			predicted, vsPlan = fmt.Sprintf("%.1f", r.PredictedMs["total"]), fmt.Sprintf("%+.1f%%", 100*(m["total"]/r.PredictedMs["total"]-1))
			if r.BoundMs != nil {
				bound, vsBound = fmt.Sprintf("%.0f", r.BoundMs["total"]), fmt.Sprintf("%+.1f%%", 100*(m["total"]/r.BoundMs["total"]-1))
			}
		}
		accS, speedup := "-", "-"
		if a, ok := rep.Accelerate[budgetText(r.Budget)]; ok && a.LatencyS > 0 {
			accS, speedup = fmt.Sprintf("%.2f", a.LatencyS), fmt.Sprintf("%.1f×", a.LatencyS*1e3/m["total"])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t%.3g\t%s\t%s\t\n",
			shortBudget(r.Budget), r.Mode, kindsText(r.PlanKind, r.StageKinds), weightsText(r), r.Resident, streamedText(r), pinnedText(r), m["vision"], m["prefill"], m["decode"], m["diffusion"], m["total"],
			predicted, vsPlan, bound, vsBound,
			float64(r.PeakAllocBytes)/1e9, float64(r.PeakNVMLBytes)/1e9, within, yesNo(r.Identical), yesNo(r.SameReasoning), r.MaxActionDiff, accS, speedup)
	}
	tw.Flush()
	if rep.Sweep != nil {
		fmt.Fprintln(w)
		rep.Sweep.print(w)
	}
	rep.printCompression(w)
}

// weightsText says how a run streamed: raw, or compressed (with its
// speedup over the raw run of the same budget and mode).
func weightsText(r benchRun) string {
	switch {
	case r.Compressed == 0 && r.Compress:
		return "raw (--compress: see below)"
	case r.Compressed == 0:
		return "raw"
	case r.SpeedupVsRaw > 0:
		return fmt.Sprintf("bf16z %d (%.2f× raw)", r.Compressed, r.SpeedupVsRaw)
	}
	return fmt.Sprintf("bf16z %d", r.Compressed)
}

// pinnedText is the streamed units' pinned host memory, with the raw
// figure when compressed.
func pinnedText(r benchRun) string {
	if r.Compressed == 0 {
		return fmt.Sprintf("%.2f", float64(r.PinnedBytes)/1e9)
	}
	return fmt.Sprintf("%.2f of %.2f", float64(r.PinnedBytes)/1e9, float64(r.PinnedRawBytes)/1e9)
}

// printCompression writes, for each run that streamed compressed units,
// the compression per module, and why runs with --compress streamed raw.
func (rep *benchReport) printCompression(w io.Writer) {
	for _, r := range rep.Runs {
		if r.Error != "" || !r.Compress {
			continue
		}
		if r.Compressed == 0 {
			fmt.Fprintf(w, "%s %s: %s\n", shortBudget(r.Budget), r.Mode, r.CompressNote)
			continue
		}
		mods := make([]string, 0, len(r.Compression))
		for m := range r.Compression {
			mods = append(mods, m)
		}
		sort.Strings(mods)
		var parts []string
		for _, m := range mods {
			z := r.Compression[m]
			part := fmt.Sprintf("%s %d units %.3f→%.3f GB (%.4f)", m, z.Units, float64(z.RawBytes)/1e9, float64(z.StoredBytes)/1e9, z.Ratio)
			if z.Shares > 0 {
				part += fmt.Sprintf(", %d GPU shares %.3f→%.3f GB", z.Shares, float64(z.ShareRaw)/1e9, float64(z.ShareBytes)/1e9)
			}
			parts = append(parts, part)
		}
		fmt.Fprintf(w, "%s %s compression (coded in %.1f s): %s\n", shortBudget(r.Budget), r.Mode, r.CompressS, strings.Join(parts, "; "))
	}
}

// streamedText is the streamed units, with the CPU engine's busy time
// and read rate when it computed shares.
func streamedText(r benchRun) string {
	out := fmt.Sprint(r.Streamed)
	if r.CPUBusyMs > 0 {
		out += fmt.Sprintf(" (CPU %.0f ms, %.1f GB/s)", r.CPUBusyMs, r.CPUGBps)
	}
	if r.HomeError != "" {
		out += " (homes refused)"
	}
	return out
}

// shortBudget is a budget for a table column: "4G", "4.3G", "none".
func shortBudget(b int64) string {
	if b <= 0 {
		return "none"
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", float64(b)/1e9), "0"), ".") + "G"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

// startNVMLSampler samples this process's device memory every 2 ms until
// the returned function is called, which returns the peak.
func startNVMLSampler(nv *gpu.NVML) func() int64 {
	if nv == nil {
		return func() int64 { return 0 }
	}
	var (
		mu   sync.Mutex
		peak uint64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	pid := os.Getpid()
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := nv.ProcessMemory(pid); err == nil {
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		return int64(peak)
	}
}

// measureH2D times pinned host-to-device copies of size bytes into a
// device buffer: the median of 10 after 2 warm-ups.
func measureH2D(size int64) (float64, error) {
	be, err := cuda.New()
	if err != nil {
		return 0, err
	}
	defer be.Close()
	dev := be.NewDFBDevice()
	buf, err := cuda.HostAlloc(size)
	if err != nil {
		return 0, err
	}
	blob := &weights.Blob{Name: "bandwidth", Data: buf}
	gbps, err := func() (float64, error) {
		defer dev.Close()
		slot, err := dev.AllocSlot(size)
		if err != nil {
			return 0, err
		}
		if err := dev.PinHost(blob); err != nil {
			return 0, err
		}
		copyS, err := dev.NewStream("copy")
		if err != nil {
			return 0, err
		}
		ms, err := medianOnStream(dev, copyS, 10, func() error { return dev.CopyAsync(slot, blob, copyS) })
		if err != nil {
			return 0, err
		}
		return float64(size) / (ms / 1e3) / 1e9, nil
	}()
	return gbps, errors.Join(err, cuda.HostFree(buf))
}

// medianOnStream times op, queued on stream s of dev between two events,
// runs times after two warm-ups (each run synchronized), and returns the
// median in ms.
func medianOnStream(dev *cuda.DFBDevice, s layering.Stream, runs int, op func() error) (float64, error) {
	a, err := dev.NewEvent("a")
	if err != nil {
		return 0, err
	}
	b, err := dev.NewEvent("b")
	if err != nil {
		return 0, err
	}
	var ms []float64
	for i := range runs + 2 {
		for _, step := range []func() error{
			func() error { return dev.Record(a, s) },
			op,
			func() error { return dev.Record(b, s) },
			dev.Synchronize,
		} {
			if err := step(); err != nil {
				return 0, err
			}
		}
		t, err := dev.Elapsed(a, b)
		if err != nil {
			return 0, err
		}
		if i >= 2 {
			ms = append(ms, t)
		}
	}
	sort.Float64s(ms)
	return ms[len(ms)/2], nil
}

// runAccelerate runs the Accelerate baseline script at the budgets (not
// none) and reads its results.json.
func runAccelerate(ctx context.Context, rep *benchReport, script, python string, reps int, out string, budgets []int64, log io.Writer) error {
	dir := filepath.Join(out, "accelerate")
	if out == "" {
		var err error
		if dir, err = os.MkdirTemp("", "vlanode-accelerate-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	var names []string
	byName := map[string]int64{}
	for _, b := range budgets {
		if b > 0 {
			// The script reads budgets in GiB (it hands them to accelerate's
			// max_memory and its own bound): 4G = 3.7253GiB.
			n := fmt.Sprintf("%.4fGiB", float64(b)/(1<<30))
			names = append(names, n)
			byName[n] = b
		}
	}
	if len(names) == 0 {
		return nil
	}
	args := []string{script, "--budgets", strings.Join(names, ","), "--reps", fmt.Sprint(reps),
		"--skip", "preload,layers,overlap,dma", "--out", dir, "--deadline", "100000"}
	fmt.Fprintf(log, "vlanode bench: %s %s\n", python, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the Accelerate baseline: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return fmt.Errorf("the Accelerate baseline's results: %w", err)
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("the Accelerate baseline's results.json: %w", err)
	}
	rep.Accelerate = map[string]accelerateRun{}
	for _, n := range names {
		var a struct {
			LatencyS  float64 `json:"latency_s"`
			PeakAlloc int64   `json:"peak_alloc_B"`
			Error     string  `json:"error"`
		}
		if r, ok := res["acc_"+n]; ok {
			_ = json.Unmarshal(r, &a)
		} else {
			a.Error = "not in results.json"
		}
		rep.Accelerate[budgetText(byName[n])] = accelerateRun{Budget: n, LatencyS: a.LatencyS, PeakBytes: a.PeakAlloc, Error: a.Error}
	}
	return nil
}
