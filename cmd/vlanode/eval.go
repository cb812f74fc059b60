package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"

	"vlanode/models/qwen3vl"
	"vlanode/safetensors"
	"vlanode/tensor"
)

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", stderr)
	var mf modelFlags
	mf.register(fs)
	inputs := fs.String("inputs", "", "safetensors file with input_ids (int64 [1, T]); for qwen3_vl also pixel_values "+
		"(float32 [patches, 1536]), image_grid_thw (int64 [images, 3]) and optionally mm_token_type_ids (int64 [1, T])")
	out := fs.String("out", "", "safetensors file to write logits (float32 [T, vocab]) to")
	expect := fs.String("expect", "", "optional reference safetensors file whose logits to compare with")
	atol := fs.Float64("atol", defaultAtol, "absolute tolerance of --expect")
	rtol := fs.Float64("rtol", defaultRtol, "relative tolerance of --expect")
	scaleTol := fs.Float64("scale-tol", -1, "--expect tolerance as a fraction of the reference's max |logit| (default: 0.02 on cuda, off on cpu)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	if *inputs == "" || *out == "" {
		return usagef("--inputs and --out are required")
	}
	prompt, err := qwen3vl.ReadPrompt(*inputs)
	if err != nil {
		return err
	}
	ids := prompt.IDs
	lm, err := mf.loadAnyModel(stderr)
	if err != nil {
		return err
	}
	defer lm.Close()
	logits, err := lm.evalLogits(ctx, *inputs, prompt)
	if err != nil {
		return err
	}
	vocab := lm.vocab()
	if err := safetensors.WriteFile(*out, []safetensors.Tensor{
		safetensors.F32Tensor("logits", []int{len(ids), vocab}, logits),
	}, map[string]string{"model": mf.dir, "device": mf.device}); err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	fmt.Fprintf(stdout, "wrote logits [%d, %d] to %s\n", len(ids), vocab, *out)
	if *expect != "" {
		tol := tolerance{atol: *atol, rtol: *rtol, scale: *scaleTol}
		if tol.scale < 0 {
			tol.scale = 0
			if lm.be.Name() == "cuda" {
				tol.scale = cudaScaleTol
			}
		}
		return expectLogits(stdout, *expect, logits, tol)
	}
	return nil
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
