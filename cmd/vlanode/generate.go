package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"vlanode/models/qwen3"
	"vlanode/residency"
	"vlanode/safetensors"
)

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr)
	var mf modelFlags
	mf.register(fs)
	inputs := fs.String("inputs", "", "safetensors file with input_ids (int64 [1, T]); or --prompt-len")
	var tf textFlags
	tf.register(fs, "instead of --inputs, a synthetic prompt of this many tokens (token i is (1 + 7919·i) mod min(vocab, 151643)), for measurements")
	maxNew := fs.Int("max-new-tokens", 16, "number of tokens to generate")
	budgetFlag := fs.String("budget", "", "VRAM budget (8G = 8·10⁹ bytes, 8GiB = 8·2³⁰, none): plan the generation's units (resident, streamed, CPU shares per token tier) and run them through the layering executor; empty: every unit resident, no planner")
	var lf layerFlags
	lf.register(fs)
	warmup := fs.Int("warmup", -1, "generations before the reported one (kernel compilation, cuBLAS); default 1 with --budget, 0 without")
	out := fs.String("out", "", "optional safetensors file to write greedy_ids (int64 [N]) to")
	expect := fs.String("expect", "", "optional reference safetensors file whose greedy_ids to compare with")
	asJSON := fs.Bool("json", false, "print the result as one JSON object: greedy_ids (and, with --expect, whether they matched; with --budget, the plan and the timing)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	tf.newTokens = *maxNew
	if *maxNew <= 0 {
		return usagef("--max-new-tokens must be positive")
	}
	if err := tf.check(); err != nil {
		return err
	}
	if (*inputs == "") == (tf.promptLen == 0) {
		return usagef("give one of --inputs and --prompt-len")
	}
	if err := lf.check(); err != nil {
		return err
	}
	if *budgetFlag == "" && (lf.exact || lf.kind != "" || lf.profile != "" || tf.chunk != 0) {
		return usagef("--exact, --plan-kind, --profile and --prefill-chunk plan a generation: give --budget (none for no budget)")
	}
	n := *warmup
	if n < 0 {
		n = map[bool]int{true: 1, false: 0}[*budgetFlag != ""]
	}
	rep := newReport(*asJSON, stdout, stderr)
	var ids []int32
	var err error
	if *budgetFlag == "" {
		ids, err = generateResident(ctx, mf, *inputs, tf, *maxNew, n, stderr)
	} else {
		ids, err = generateBudgeted(ctx, mf, lf, *budgetFlag, *inputs, tf, *maxNew, n, rep, stderr)
	}
	if err != nil {
		return err
	}
	parts := make([]string, len(ids))
	out64 := make([]int64, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
		out64[i] = int64(id)
	}
	fmt.Fprintln(rep.lines(), strings.Join(parts, " "))
	rep.set("greedy_ids", out64)
	if *out != "" {
		if err := safetensors.WriteFile(*out, []safetensors.Tensor{
			safetensors.I64Tensor("greedy_ids", []int{len(ids)}, out64),
		}, map[string]string{"model": mf.dir, "device": mf.device}); err != nil {
			return fmt.Errorf("writing %s: %w", *out, err)
		}
	}
	if *expect == "" {
		return rep.done(nil)
	}
	err = expectIDs(rep.lines(), *expect, out64)
	rep.set("expect", expectJSON{Reference: *expect, Match: err == nil})
	return rep.done(err)
}

// promptOf reads the prompt from inputs, or makes the synthetic one of
// tf.promptLen tokens.
func promptOf(inputs string, tf textFlags, vocab int) ([]int32, error) {
	if inputs != "" {
		return readInputIDs(inputs)
	}
	return syntheticPrompt(tf.promptLen, vocab), nil
}

// generateResident loads the model with every unit resident and
// greedy-decodes n tokens (warmup times before).
func generateResident(ctx context.Context, mf modelFlags, inputs string, tf textFlags, n, warmup int, log io.Writer) ([]int32, error) {
	lm, err := mf.loadModel(log)
	if err != nil {
		return nil, err
	}
	defer lm.Close()
	prompt, err := promptOf(inputs, tf, lm.vocab())
	if err != nil {
		return nil, err
	}
	var g *qwen3.Generation
	for range warmup + 1 {
		if g, err = lm.model.Generate(ctx, prompt, n, qwen3.GenerateOptions{}); err != nil {
			return nil, err
		}
	}
	return g.IDs, nil
}

// generateBudgeted plans the generation within the budget, loads the
// model as the plan places it and generates through the layering
// executor; it reports the plan and the last generation's timing beside
// the prediction.
func generateBudgeted(ctx context.Context, mf modelFlags, lf layerFlags, budgetFlag, inputs string, tf textFlags, n, warmup int, rep *report, log io.Writer) ([]int32, error) {
	budget, err := residency.ParseBudget(budgetFlag)
	if err != nil {
		return nil, usagef("--budget: %v", err)
	}
	arch, err := textArch(mf.dir)
	if err != nil {
		return nil, err
	}
	prompt, err := promptOf(inputs, tf, arch.Text.VocabSize)
	if err != nil {
		return nil, err
	}
	s := textSpec{dir: mf.dir, device: mf.device, threads: mf.threads, budget: budget, layers: lf,
		promptLen: len(prompt), newTokens: n, chunk: tf.chunk}
	bm, err := loadBudgetedText(s, log)
	if err != nil {
		return nil, err
	}
	defer bm.Close()
	var g *genResult
	for range warmup + 1 {
		if g, err = runGeneration(ctx, bm, prompt, n); err != nil {
			return nil, err
		}
	}
	t := timingOf(g.gen, bm.plan)
	predicted := ""
	if bm.be.Name() == "cuda" { // the prediction is the profile's GPU's
		predicted = fmt.Sprintf("; predicted %.1f ms (%.0f tokens/s) and %.1f ms (%.2f tokens/s)",
			t.PredPrefillMs, t.PredPrefillTok, t.PredDecodeMs, t.PredDecodeTok)
	}
	fmt.Fprintf(log, "vlanode generate: prefill of %d tokens in %d pass(es): %.1f ms, %.0f tokens/s; decode of %d tokens: %.1f ms, %.2f tokens/s%s; peak %.2f GB\n",
		t.PromptTokens, t.Chunks, t.PrefillMs, t.PrefillTokS, t.NewTokens-1, t.DecodeMs, t.DecodeTokS, predicted, float64(g.gen.VRAMPeakBytes)/1e9)
	if g.gen.HomeError != "" {
		fmt.Fprintf(log, "vlanode generate: homes refused, streamed instead: %s\n", g.gen.HomeError)
	}
	kinds := map[string]string{}
	for _, sp := range bm.plan.Stages {
		kinds[string(sp.Stage)] = string(sp.Kind)
	}
	rep.set("budget_bytes", budget)
	rep.set("plan", map[string]any{"stages": bm.plan.Stages, "predicted_ms": stageMap(bm.plan.PredictedMs, bm.plan.TotalMs),
		"resident_units": residentUnits(bm.plan), "streamed_units": streamedUnits(bm.plan), "kinds": kinds})
	rep.set("timing", t)
	rep.set("cpu_busy_ms", g.cpuBusyMs)
	rep.set("cpu_wait_ms", g.cpuWaitMs)
	rep.set("vram_peak_bytes", g.gen.VRAMPeakBytes)
	return g.gen.IDs, nil
}
