package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"

	"vlanode/backend"
	"vlanode/cuda"
	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/tensor"
)

// runProfile measures the machine for the planner and writes the profile
// it reads (residency.Profile): pinned copy bandwidth, the GEMV and GEMM
// rates, the fixed device memory (context, cuBLAS), and every unit's
// compute time in each stage of the standard workload, run with every unit
// resident.
func runProfile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("profile", stderr)
	dir := fs.String("model", "", "an alpamayo_r1 checkpoint to time (e.g. one \"vlanode synth --arch alpamayo-r1-10b\" wrote): it must fit the GPU")
	vlm := fs.String("vlm", "", "the VLM's config folder, overriding the checkpoint's vlm_name_or_path")
	out := fs.String("out", "", "where to write the profile JSON (default: stdout)")
	runs := fs.Int("runs", 2, "profiled inferences (after one warm-up); each unit's time is its median")
	cpuProfile := fs.Bool("cpu", true, "profile the CPU engine too (its kernels' rates per token tier with copies in flight, the copy rate meanwhile, the hand-off)")
	cpuThreads := fs.Int("cpu-threads", 0, "threads of the CPU engine (default: all cores but two)")
	cpuOnly := fs.Bool("cpu-only", false, "measure the CPU engine alone and replace the CPU section of the profile --from names, keeping the rest (after a change of --cpu-threads or of the host)")
	from := fs.String("from", "", "with --cpu-only, --decode-only or --calibrate: the profile JSON whose section is re-measured")
	decode := fs.Bool("decode", true, "profile the decode kernel of compressed streaming too (its rate in GB/s of output and its cost per decode)")
	decodeOnly := fs.Bool("decode-only", false, "measure the decode kernel alone and replace the decode section of the profile --from names, keeping the rest")
	calibrate := fs.String("calibrate", "", "a VRAM budget whose plan gives the CPU decode shares (e.g. 8GiB): load --model within it with the profile --from names, run the standard workload, and set the CPU's decode rate and the copy rate while it computes to what the executor measured")
	rounds := fs.Int("rounds", 2, "with --calibrate: calibrations, each planning with the figures of the one before")
	calStage := fs.String("calibrate-stage", "decode", "with --calibrate: the stage whose CPU tier is measured: decode (its one-row rate and the copy rate, from the budget's own plan) or diffusion (the Euler steps' 64-row tier: its cost per call and rate, fitted through the forced Static and Dynamic plans' shares at the budget, e.g. 4GiB; --rounds does not apply)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *calStage != string(placement.StageDecode) && *calibrate == "" {
		return usagef("--calibrate-stage goes with --calibrate")
	}
	if *calibrate != "" {
		if *from == "" || *dir == "" || *cpuOnly || *decodeOnly {
			return usagef("--calibrate needs --model and --from (and neither --cpu-only nor --decode-only)")
		}
		if *rounds < 1 {
			return usagef("--rounds must be ≥ 1")
		}
		stage := placement.Stage(*calStage)
		if stage != placement.StageDecode && stage != placement.StageDiffusion {
			return usagef("--calibrate-stage: decode or diffusion, got %q", *calStage)
		}
		budget, err := residency.ParseBudget(*calibrate)
		if err != nil || budget <= 0 {
			return usagef("--calibrate: a budget such as 8GiB, got %q", *calibrate)
		}
		if err := cuda.Available(); err != nil {
			return fmt.Errorf("profile measures a GPU: %w", err)
		}
		p, _, err := loadProfile(*from)
		if err != nil {
			return err
		}
		spec := budgetSpec{dir: *dir, vlm: *vlm, device: "cuda", budget: budget,
			layers: layerFlags{mode: "auto", planOpts: planOpts{cpuThreads: *cpuThreads}}}
		if stage == placement.StageDiffusion {
			if err := calibrateTier(ctx, p, spec, stage, *from, stderr); err != nil {
				return fmt.Errorf("calibrating the CPU engine's %s tier: %w", stage, err)
			}
			return writeProfile(p, *out, stdout, stderr)
		}
		if err := calibrateCPU(ctx, p, spec, *rounds, *from, stderr); err != nil {
			return fmt.Errorf("calibrating the CPU engine: %w", err)
		}
		return writeProfile(p, *out, stdout, stderr)
	}
	if *cpuOnly && *decodeOnly {
		return usagef("--cpu-only and --decode-only each re-measure one section: run them one after the other")
	}
	if (*cpuOnly || *decodeOnly) != (*from != "") {
		return usagef("--cpu-only or --decode-only, and --from, go together")
	}
	if *dir == "" && !*cpuOnly && !*decodeOnly {
		return usagef("--model is required")
	}
	if *runs < 1 {
		return usagef("--runs must be ≥ 1")
	}
	if err := cuda.Available(); err != nil {
		return fmt.Errorf("profile measures a GPU: %w", err)
	}
	if *cpuOnly {
		p, _, err := loadProfile(*from)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "vlanode profile: the CPU engine, alone and with copies in flight (the rest from %s)…\n", *from)
		if err := measureCPU(p, *cpuThreads, stderr); err != nil {
			return fmt.Errorf("the CPU engine: %w", err)
		}
		return writeProfile(p, *out, stdout, stderr)
	}
	if *decodeOnly {
		p, _, err := loadProfile(*from)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "vlanode profile: the decode kernel of compressed streaming (the rest from %s)…\n", *from)
		if err := measureDecode(p, stderr); err != nil {
			return fmt.Errorf("the decode kernel: %w", err)
		}
		return writeProfile(p, *out, stdout, stderr)
	}
	p := &residency.Profile{StageMs: map[placement.Stage]float64{}, GraphStageMs: map[placement.Stage]float64{}}
	var err error
	fmt.Fprintln(stderr, "vlanode profile: pinned host-to-device bandwidth…")
	if p.H2DGBps, err = measureH2D(386 << 20); err != nil {
		return fmt.Errorf("copy bandwidth: %w", err)
	}
	fmt.Fprintln(stderr, "vlanode profile: GEMV and GEMM rates, fixed device memory…")
	if err := measureBackend(p); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "vlanode profile: %.1f GB/s H2D, GEMV %.0f GB/s, GEMM %.0f TFLOP/s; timing every unit of the standard workload…\n",
		p.H2DGBps, p.Roofline.MemGBps, p.Roofline.TFLOPs)
	if err := profileUnits(ctx, p, *dir, *vlm, *runs, stderr); err != nil {
		return err
	}
	if *cpuProfile {
		fmt.Fprintln(stderr, "vlanode profile: the CPU engine, alone and with copies in flight…")
		if err := measureCPU(p, *cpuThreads, stderr); err != nil {
			return fmt.Errorf("the CPU engine: %w", err)
		}
	}
	if *decode {
		fmt.Fprintln(stderr, "vlanode profile: the decode kernel of compressed streaming…")
		if err := measureDecode(p, stderr); err != nil {
			return fmt.Errorf("the decode kernel: %w", err)
		}
	}
	return writeProfile(p, *out, stdout, stderr)
}

// writeProfile writes p to the file out, or to stdout when out is empty.
func writeProfile(p *residency.Profile, out string, stdout, stderr io.Writer) error {
	raw, err := p.Marshal()
	if err != nil {
		return err
	}
	if out == "" {
		_, err = stdout.Write(raw)
		return err
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "vlanode profile: wrote %s\n", out)
	return nil
}

// measureBackend times a bf16 decode GEMV (4096 × 12288) and a prefill
// GEMM (3,030 × 4096 × 12288) through the backend's MatMul, and reads the
// fixed memory a fresh backend charges: the context, the cuBLAS handle,
// its workspace and the kernel module.
func measureBackend(p *residency.Profile) error {
	be, err := cuda.New()
	if err != nil {
		return err
	}
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	const n, k = 12288, 4096
	w := make([]byte, n*k*2)
	for i := 0; i < len(w); i += 2 {
		b := tensor.F32ToBF16(float32(rng.NormFloat64() * 0.02))
		w[i], w[i+1] = byte(b), byte(b>>8)
	}
	wt, err := be.Weight("weights", tensor.BF16, []int{n, k}, w)
	if err != nil {
		return err
	}
	defer be.Free(wt)
	time1 := func(m int) (float64, error) {
		x, err := be.Alloc("activations", tensor.F32, m, k)
		if err != nil {
			return 0, err
		}
		defer be.Free(x)
		y, err := be.Alloc("activations", tensor.F32, m, n)
		if err != nil {
			return 0, err
		}
		defer be.Free(y)
		return timeOp(be, func() error { return be.MatMul(y, x, wt, nil) })
	}
	gemv, err := time1(1)
	if err != nil {
		return fmt.Errorf("timing the GEMV: %w", err)
	}
	gemm, err := time1(3030)
	if err != nil {
		return fmt.Errorf("timing the GEMM: %w", err)
	}
	p.Roofline = residency.Roofline{
		MemGBps: math.Round(float64(n*k*2)/gemv/1e6*10) / 10,
		TFLOPs:  math.Round(2*3030*float64(n)*k/gemm/1e9*10) / 10,
	}
	use := be.Usage()
	p.Fixed = residency.FixedCosts{
		ContextBytes:   use.Bytes(cuda.PurposeContext),
		CUBLASBytes:    use.Bytes(cuda.PurposeCUBLAS),
		WorkspaceBytes: use.Bytes(cuda.PurposeWorkspace),
		KernelBytes:    use.Bytes(cuda.PurposeKernels),
	}
	d := be.Device()
	p.Device = fmt.Sprintf("%s (sm_%d, %.1f GiB), %s, %s", d.Name, d.ComputeCapability, float64(d.TotalMemory)/(1<<30), d.Driver, d.CUBLAS)
	return nil
}

// timeOp is the median wall time of op in ms over 20 calls after 3
// warm-ups, each waited for.
func timeOp(be backend.Backend, op func() error) (float64, error) {
	var ms []float64
	for i := range 23 {
		t := time.Now()
		if err := op(); err != nil {
			return 0, err
		}
		if err := be.Sync(); err != nil {
			return 0, err
		}
		if i >= 3 {
			ms = append(ms, float64(time.Since(t))/1e6)
		}
	}
	sort.Float64s(ms)
	return ms[len(ms)/2], nil
}

// profileUnits runs the standard workload with every unit resident and
// the executor timing every compute, and records each module's median time
// per stage. A stage also spends time outside its units (the embedding
// gather, logits download and sampling, uploads): that share becomes the
// embedding's work in prefill and decode (it runs on the host before the
// layers) and is added to the first unit in vision and diffusion, so that
// the planner's sums give the stage's measured time.
func profileUnits(ctx context.Context, p *residency.Profile, dir, vlm string, runs int, log io.Writer) error {
	bm, err := loadBudgeted(budgetSpec{dir: dir, vlm: vlm, device: "cuda", layers: layerFlags{mode: "preload"}, profile: true}, log)
	if err != nil {
		return err
	}
	defer bm.Close()
	w := placement.StandardWorkload()
	req := standardRequest(bm.model, w)
	type key struct {
		module placement.Module
		part   placement.Part
		stage  placement.Stage
	}
	exe := map[key][]float64{}        // per turn, ms
	stageMs := map[string][]float64{} // per run, op by op
	graphMs := map[string][]float64{} // per run, decode and Euler steps from graphs
	// A warm-up, then runs timed as a user runs them: op by op (the stage
	// times the units add up to), then with graphs (what a plan that
	// streams nothing runs); then runs with an event pair around every
	// compute (the units' shares).
	defer bm.model.SetGraphs(true)
	for i := range 3*runs + 1 {
		opByOp, graphs, profiled := i >= 1 && i <= runs, i > runs && i <= 2*runs, i > 2*runs
		bm.model.SetProfiling(profiled)
		bm.model.SetGraphs(!opByOp)
		res, err := bm.model.Infer(ctx, req)
		if err != nil {
			return err
		}
		switch {
		case i == 0:
			continue // warm-up
		case opByOp, graphs:
			into := stageMs
			if graphs {
				into = graphMs
				if !res.DecodeGraph || !res.DiffusionGraph {
					return fmt.Errorf("profile: the decode and Euler steps did not replay graphs (%s)", res.GraphError)
				}
			}
			for s, d := range map[string]time.Duration{"vision": res.Timing.Vision, "prefill": res.Timing.Prefill, "decode": res.Timing.Decode, "diffusion": res.Timing.Diffusion} {
				into[s] = append(into[s], float64(d)/1e6)
			}
			continue
		}
		if res.Layers == nil || len(res.Layers.Turns) == 0 {
			return errors.New("profile: the executor returned no per-unit timing")
		}
		for _, t := range res.Layers.Turns {
			stage, _, _ := strings.Cut(t.Pass, ".")
			k := key{t.Unit.Module, t.Unit.Part, placement.Stage(stage)}
			exe[k] = append(exe[k], t.ExeMs)
		}
	}
	arch, err := loadArch(dir, vlm)
	if err != nil {
		return err
	}
	units := alpamayo.PlanUnits(arch, w)
	// The units' summed device time per stage (ΣR·C_EXE at the median).
	sum := map[placement.Stage]float64{}
	first := map[key]placement.Unit{}
	passes := map[placement.Stage]int{}
	var embedding placement.Unit
	for _, u := range units {
		if u.ID.Module == placement.Embedding {
			embedding = u
		}
		for _, wk := range u.Work {
			passes[wk.Stage] = wk.Passes
			k := key{u.ID.Module, u.ID.Part, wk.Stage}
			if ts, ok := exe[k]; ok {
				sum[wk.Stage] += float64(wk.Passes) * median(ts)
				if _, seen := first[k]; !seen {
					first[k] = u
				}
			}
		}
	}
	for _, s := range placement.Stages() {
		if ms, ok := stageMs[string(s)]; ok {
			p.StageMs[s] = round3(median(ms))
		}
		if ms, ok := graphMs[string(s)]; ok {
			p.GraphStageMs[s] = round3(median(ms))
		}
	}
	// What a stage spends outside its units' computes (the host's share:
	// gathering embedding rows, uploads, reading logits, sampling, launch
	// gaps), per pass: the embedding's work in prefill and decode, where it
	// happens before the layers; the first unit's in vision and diffusion,
	// whose computes already include their uploads.
	host := map[placement.Stage]float64{}
	for s, ms := range p.StageMs {
		if n := passes[s]; n > 0 {
			host[s] = max(ms-sum[s], 0) / float64(n)
		}
	}
	keys := make([]key, 0, len(first))
	for k := range first {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].stage != keys[j].stage {
			return stageIndex(keys[i].stage) < stageIndex(keys[j].stage)
		}
		if keys[i].module != keys[j].module {
			return keys[i].module < keys[j].module
		}
		return keys[i].part < keys[j].part
	})
	for _, k := range keys {
		u := first[k]
		wk, _ := u.WorkIn(k.stage)
		ms, src := median(exe[k]), fmt.Sprintf("median of %d computes", len(exe[k]))
		if (k.stage == placement.StageVision && k.module == placement.PatchEmbed) || (k.stage == placement.StageDiffusion && k.module == placement.ActionIn) {
			ms += host[k.stage]
			src += fmt.Sprintf(" + %.4f ms of the pass outside its units (the stage's host share)", host[k.stage])
		}
		p.Units = append(p.Units, residency.UnitTiming{
			Module: k.module, Part: k.part, Stage: k.stage, Rows: wk.Rows, WeightBytes: u.Bytes, FLOPs: wk.FLOPs, Ms: round3(ms), Source: src,
		})
	}
	for _, s := range []placement.Stage{placement.StagePrefill, placement.StageDecode} {
		wk, ok := embedding.WorkIn(s)
		if !ok {
			continue
		}
		p.Units = append(p.Units, residency.UnitTiming{
			Module: placement.Embedding, Stage: s, Rows: wk.Rows, WeightBytes: embedding.Bytes, FLOPs: wk.FLOPs, Ms: round3(max(host[s], 1e-3)),
			Source: fmt.Sprintf("the %s pass's time outside its units' computes: stage %.3f ms less %.3f ms of computes, over %d passes", s, p.StageMs[s], sum[s], passes[s]),
		})
	}
	p.Source = fmt.Sprintf("vlanode profile, %s: pinned H2D copies of 386 MiB; GEMV 1×4096×12288 and GEMM 3030×4096×12288 bf16 through the "+
		"backend's MatMul (median of 20); fixed: what a fresh CUDA backend charges (context, cuBLAS handle, workspace, kernel module); units: "+
		"%s (standard workload, every unit resident, after a warm-up): stage_ms is the median of %d inferences timed as served, op by op, "+
		"graph_stage_ms of %d more with the decode and Euler steps replayed from CUDA graphs; each module's "+
		"median compute per stage comes from %d more inferences with events around every unit; the rest of each stage's time "+
		"(gathering embedding rows, uploads, logits, sampling) is the embedding's work in prefill and decode and the first unit's in vision and diffusion", time.Now().UTC().Format("2006-01-02"), dir, runs, runs, runs)
	return nil
}

func stageIndex(s placement.Stage) int {
	for i, t := range placement.Stages() {
		if t == s {
			return i
		}
	}
	return len(placement.Stages())
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func round3(v float64) float64 { return math.Round(v*1e5) / 1e5 }
