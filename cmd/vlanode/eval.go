package main

import (
	"context"
	"fmt"
	"io"
	"math"

	"vlanode/safetensors"
	"vlanode/tensor"
)

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", stderr)
	var mf modelFlags
	mf.register(fs)
	inputs := fs.String("inputs", "", "safetensors file with input_ids (int64 [1, T])")
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
	ids, err := readInputIDs(*inputs)
	if err != nil {
		return err
	}
	lm, err := mf.loadModel(stderr)
	if err != nil {
		return err
	}
	defer lm.Close()
	sess, err := lm.model.NewSession(len(ids))
	if err != nil {
		return err
	}
	defer sess.Close()
	logits, err := sess.Forward(ctx, ids, true)
	if err != nil {
		return err
	}
	vocab := lm.model.Config.VocabSize
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
