package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"vlanode/configs"
	"vlanode/models/alpamayo"
	"vlanode/models/qwen3"
	"vlanode/msgs"
	"vlanode/placement"
	"vlanode/residency"
)

// runPlan plans a model's VRAM residency under a budget and prints where
// each unit lives, where every byte goes and the predicted latency. It
// reads config files only, never the weights.
func runPlan(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plan", stderr)
	dir := fs.String("model", "", "model directory; only config.json is read (and, for alpamayo_r1, the VLM config it names)")
	budgetFlag := fs.String("budget", "none", "VRAM budget: 8G = 8·10⁹ bytes (K, M, G, T), 8GiB = 8·2³⁰ (KiB, MiB, GiB, TiB), or none")
	profileFile := fs.String("profile", "", "device profile JSON (default: the shipped H200 profile, derived from this repository's measurements)")
	workloadName := fs.String("workload", "", "workload: "+strings.Join(workloadNames(), ", ")+"; default: text for a Qwen3 text model, standard otherwise")
	var tf textFlags
	tf.register(fs, fmt.Sprintf("text workload: the prompt's tokens (default %d)", defaultPromptLen))
	fs.IntVar(&tf.newTokens, "new-tokens", 16, "text workload: the tokens generated (the first from the prefill, each other from one decode pass)")
	vlm := fs.String("vlm", "", "alpamayo_r1: the VLM's config folder or file, overriding the checkpoint's vlm_name_or_path")
	asJSON := fs.Bool("json", false, "print the plan as one JSON object")
	batch := fs.Int("batch", 1, "requests run together (serve --max-batch): each has its own KV cache and activations; states the largest batch that fits the budget")
	samples := fs.Int("samples", 1, "trajectory samples of each request (num_traj_samples; serve --samples)")
	atRate := fs.Float64("at-cpu-rate", 0, "also predict the plan with the profile's one-row CPU rate at this many GB/s, its placement and CPU shares as planned: what the plan gives on a host whose CPU reads faster or slower (bench reports it at the rate its runs measured); the standard workload")
	var opts planOpts
	opts.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := opts.options().Validate(); err != nil {
		return usagef("%v", err)
	}
	if *dir == "" {
		return usagef("--model is required")
	}
	if *batch < 1 || *batch > residency.MaxBatchSearch {
		return usagef("--batch %d: want 1 to %d", *batch, residency.MaxBatchSearch)
	}
	if *samples < 1 || *samples > msgs.MaxTrajSamples {
		return usagef("--samples %d: want 1 to %d", *samples, msgs.MaxTrajSamples)
	}
	budget, err := residency.ParseBudget(*budgetFlag)
	if err != nil {
		return usageError{fmt.Sprintf("--budget: %v", err)}
	}
	if err := tf.check(); err != nil {
		return err
	}
	name := *workloadName
	if _, ok := placement.Workloads()[name]; !ok && name != "" && name != placement.TextWorkloadName {
		return usagef("unknown --workload %q (known: %s)", name, strings.Join(workloadNames(), ", "))
	}
	arch, err := loadArch(*dir, *vlm)
	if err != nil {
		return err
	}
	text := arch.Vision == nil && arch.Expert == nil
	switch {
	case name == "" && text, tf.promptLen > 0 && name == "":
		name = placement.TextWorkloadName
	case name == "":
		name = placement.StandardWorkloadName
	}
	if name != placement.TextWorkloadName && (tf.promptLen > 0 || tf.chunk > 0) {
		return usagef("--prompt-len and --prefill-chunk shape the text workload, not %q", name)
	}
	if name == placement.TextWorkloadName && !text {
		return fmt.Errorf("%s: the text workload plans Qwen3 text models, not %s", *dir, arch.Name)
	}
	prof, profName, err := loadProfile(*profileFile)
	if err != nil {
		return err
	}
	info := planInfo{dir: *dir, profile: profName, device: prof.Device, h2d: prof.H2DGBps, cpu: prof.CPU}
	var plan *residency.Plan
	if name == placement.TextWorkloadName {
		if *batch > 1 || *samples > 1 {
			return usagef("--batch and --samples plan Alpamayo requests, not the text workload")
		}
		if tf.promptLen == 0 {
			tf.promptLen = defaultPromptLen
		}
		plan, err = qwen3.PlanGeneration(arch, tf.promptLen, tf.newTokens, tf.chunk, prof, budget, opts.textOptions())
	} else {
		w := placement.Workloads()[name].WithBatch(*batch, *samples)
		if *batch > 1 || *samples > 1 {
			units := func(w placement.Workload) []placement.Unit { return alpamayo.PlanUnits(arch, w) }
			if info.largest, err = residency.LargestBatch(arch, units, w, prof, budget, opts.options(), residency.MaxBatchSearch); err != nil {
				return err
			}
			if info.largest < *batch {
				return fmt.Errorf("a batch of %d requests of %d trajectory samples does not fit a budget of %s: the largest that fits is %d",
					*batch, *samples, residency.FormatBytes(budget), info.largest)
			}
		}
		plan, err = residency.NewPlan(arch, alpamayo.PlanUnits(arch, w), w, prof, budget, opts.options())
	}
	if err != nil {
		return err
	}
	if *atRate != 0 {
		if name == placement.TextWorkloadName {
			return usagef("--at-cpu-rate re-predicts the standard workload's plans, not the text workload's")
		}
		q, err := prof.WithCPURate(1, *atRate)
		if err != nil {
			return usagef("--at-cpu-rate: %v", err)
		}
		if info.at, err = residency.Repredict(arch, alpamayo.PlanUnits(arch, plan.Workload), plan, q); err != nil {
			return err
		}
		info.atRate = *atRate
	}
	if *asJSON {
		return writePlanJSON(stdout, plan, info)
	}
	writePlanText(stdout, plan, info)
	return nil
}

func workloadNames() []string {
	names := []string{placement.TextWorkloadName}
	for n := range placement.Workloads() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// loadArch reads the architecture of the model in dir from its config
// files: Alpamayo-R1 (with the VLM config it names), Qwen3-VL or Qwen3.
func loadArch(dir, vlm string) (*residency.Arch, error) {
	mt, err := configs.ReadModelType(dir)
	if err != nil {
		return nil, err
	}
	switch mt {
	case configs.AlpamayoR1ModelType, configs.Alpamayo15ModelType:
		alp, err := configs.LoadAlpamayoR1(dir)
		if err != nil {
			return nil, err
		}
		v, err := alp.LocateVLM(dir, configs.VLMLocator{Override: vlm})
		if err != nil {
			return nil, err
		}
		return residency.AlpamayoR1Arch(alp, v)
	case "qwen3_vl":
		c, err := configs.LoadQwen3VL(dir)
		if err != nil {
			return nil, err
		}
		return residency.Qwen3VLArch(c), nil
	case "qwen3":
		c, err := configs.LoadQwen3(dir)
		if err != nil {
			return nil, err
		}
		return residency.Qwen3Arch(c), nil
	}
	return nil, configs.UnknownArchitecture(dir, mt)
}

// loadProfile reads the profile in file, or the default one when file is
// empty, and names it.
func loadProfile(file string) (*residency.Profile, string, error) {
	if file == "" {
		p, err := residency.DefaultProfile()
		return p, residency.DefaultProfileName, err
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("reading the profile: %w", err)
	}
	p, err := residency.ParseProfile(raw)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	return p, file, nil
}
