package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"

	"vlanode/configs"
	"vlanode/models/qwen3vl"
	"vlanode/safetensors"
	"vlanode/tensor"
)

// evalFlags are eval's flags beyond the model's.
type evalFlags struct {
	inputs, out, expect string
	atol, rtol, scale   float64
	states, vlm         string // alpamayo_r1 only
	json                bool
}

// tolerance is --expect's tolerance on a backend: --scale-tol's default is
// cudaScaleTol on cuda, off elsewhere.
func (f *evalFlags) tolerance(backend string) tolerance {
	tol := tolerance{atol: f.atol, rtol: f.rtol, scale: f.scale}
	if tol.scale < 0 {
		tol.scale = 0
		if backend == "cuda" {
			tol.scale = cudaScaleTol
		}
	}
	return tol
}

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", stderr)
	var mf modelFlags
	mf.register(fs)
	var ef evalFlags
	fs.StringVar(&ef.inputs, "inputs", "", "safetensors file with input_ids (int64 [1, T]); for qwen3_vl also pixel_values "+
		"(float32 [patches, 1536]), image_grid_thw (int64 [images, 3]) and optionally mm_token_type_ids (int64 [1, T]); "+
		"for alpamayo_r1 (its action side) prefix (int64 [3]: cached tokens, offset, rope delta), kv_k and kv_v "+
		"(float32 [layers, cached tokens, kv heads × head dim]) and noise (float32 [waypoints, 2])")
	fs.StringVar(&ef.out, "out", "", "safetensors file to write logits (float32 [T, vocab]) to; for alpamayo_r1 velocity, hidden, in_proj, new_k and new_v")
	fs.StringVar(&ef.expect, "expect", "", "optional reference safetensors file whose logits to compare with "+
		"(for alpamayo_r1: v_steps, hidden_steps, inproj_steps, new_k and new_v)")
	fs.Float64Var(&ef.atol, "atol", defaultAtol, "absolute tolerance of --expect")
	fs.Float64Var(&ef.rtol, "rtol", defaultRtol, "relative tolerance of --expect")
	fs.Float64Var(&ef.scale, "scale-tol", -1, fmt.Sprintf("--expect tolerance as a fraction of the reference's max |value| (default: %g on cuda, off on cpu)", cudaScaleTol))
	fs.StringVar(&ef.states, "states", "", "alpamayo_r1: safetensors file with the flow states to evaluate the velocity at, "+
		"x_steps (float32 [S, waypoints, 2]) at time_steps (float32, at least S); default: the noise at t = 0")
	fs.StringVar(&ef.vlm, "vlm", "", "alpamayo_r1: the VLM's config folder, overriding the checkpoint's vlm_name_or_path")
	fs.BoolVar(&ef.json, "json", false, "print the result as one JSON object (what was written; with --expect, whether it matched)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	if ef.inputs == "" || ef.out == "" {
		return usagef("--inputs and --out are required")
	}
	mt, err := configs.ReadModelType(mf.dir)
	if err != nil {
		return err
	}
	rep := newReport(ef.json, stdout, stderr)
	if configs.IsAlpamayo(mt) {
		return evalExpert(ctx, &mf, &ef, rep, stderr)
	}
	if ef.states != "" || ef.vlm != "" {
		return usagef("--states and --vlm are for alpamayo_r1 checkpoints; %s is %s", mf.dir, mt)
	}
	prompt, err := qwen3vl.ReadPrompt(ef.inputs)
	if err != nil {
		return err
	}
	ids := prompt.IDs
	lm, err := mf.loadAnyModel(stderr)
	if err != nil {
		return err
	}
	defer lm.Close()
	logits, err := lm.evalLogits(ctx, ef.inputs, prompt)
	if err != nil {
		return err
	}
	vocab := lm.vocab()
	if err := safetensors.WriteFile(ef.out, []safetensors.Tensor{
		safetensors.F32Tensor("logits", []int{len(ids), vocab}, logits),
	}, map[string]string{"model": mf.dir, "device": mf.device}); err != nil {
		return fmt.Errorf("writing %s: %w", ef.out, err)
	}
	fmt.Fprintf(rep.lines(), "wrote logits [%d, %d] to %s\n", len(ids), vocab, ef.out)
	rep.set("out", ef.out)
	rep.set("logits", []int{len(ids), vocab})
	if ef.expect == "" {
		return rep.done(nil)
	}
	err = expectLogits(rep.lines(), ef.expect, logits, ef.tolerance(lm.be.Name()))
	rep.set("expect", expectJSON{Reference: ef.expect, Match: err == nil})
	return rep.done(err)
}

// expectJSON is the --expect result in --json output.
type expectJSON struct {
	Reference string   `json:"reference"`
	Match     bool     `json:"match"`
	Differ    []string `json:"differ,omitempty"` // the outputs beyond the tolerance
}

// evalLogits runs one forward over the prompt and returns the logits of
// every position, [T, vocab] row-major.
func (l *loadedModel) evalLogits(ctx context.Context, path string, p qwen3vl.Prompt) ([]float32, error) {
	if l.vl != nil {
		sess, err := l.vl.NewSession(len(p.IDs))
		if err != nil {
			return nil, err
		}
		defer sess.Close()
		return sess.Prefill(ctx, p, true)
	}
	if p.Images != nil {
		return nil, fmt.Errorf("%s: pixel_values given, but model_type qwen3 takes no images", path)
	}
	if slices.ContainsFunc(p.TokenTypes, func(t int32) bool { return t != qwen3vl.TextToken }) {
		return nil, fmt.Errorf("%s: mm_token_type_ids marks image tokens, but model_type qwen3 takes no images", path)
	}
	sess, err := l.model.NewSession(len(p.IDs))
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	return sess.Forward(ctx, p.IDs, true)
}

// readInputIDs reads input_ids (int64 or int32 [1, T]) from a safetensors file.
func readInputIDs(path string) ([]int32, error) {
	f, err := safetensors.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Tensor("input_ids")
	if err != nil {
		return nil, err
	}
	if info.DType != tensor.I64 && info.DType != tensor.I32 {
		return nil, fmt.Errorf("%s: input_ids has dtype %v, want I64", path, info.DType)
	}
	if len(info.Shape) != 2 || info.Shape[0] != 1 || info.Shape[1] == 0 {
		return nil, fmt.Errorf("%s: input_ids has shape %v, want [1, T] with T > 0", path, info.Shape)
	}
	raw, err := info.I64()
	if err != nil {
		return nil, fmt.Errorf("%s: input_ids: %w", path, err)
	}
	ids := make([]int32, len(raw))
	for i, v := range raw {
		if v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("%s: input_ids[0][%d] = %d is not a token id", path, i, v)
		}
		ids[i] = int32(v)
	}
	return ids, nil
}
