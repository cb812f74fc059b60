package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"vlanode/safetensors"
	"vlanode/sample"
)

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr)
	var mf modelFlags
	mf.register(fs)
	inputs := fs.String("inputs", "", "safetensors file with input_ids (int64 [1, T])")
	maxNew := fs.Int("max-new-tokens", 16, "number of tokens to generate")
	out := fs.String("out", "", "optional safetensors file to write greedy_ids (int64 [N]) to")
	expect := fs.String("expect", "", "optional reference safetensors file whose greedy_ids to compare with")
	asJSON := fs.Bool("json", false, "print the result as one JSON object: greedy_ids (and, with --expect, whether they matched)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	if *inputs == "" {
		return usagef("--inputs is required")
	}
	if *maxNew <= 0 {
		return usagef("--max-new-tokens must be positive")
	}
	prompt, err := readInputIDs(*inputs)
	if err != nil {
		return err
	}
	lm, err := mf.loadModel(stderr)
	if err != nil {
		return err
	}
	defer lm.Close()
	ids, err := greedy(ctx, lm, prompt, *maxNew)
	if err != nil {
		return err
	}
	parts := make([]string, len(ids))
	out64 := make([]int64, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
		out64[i] = int64(id)
	}
	rep := newReport(*asJSON, stdout, stderr)
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

// greedy prefills the prompt and decodes n tokens by argmax, through the
// KV cache. It generates exactly n tokens (no stop token).
func greedy(ctx context.Context, lm *loadedModel, prompt []int32, n int) ([]int32, error) {
	sess, err := lm.model.NewSession(len(prompt) + n)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	logits, err := sess.Forward(ctx, prompt, false)
	if err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	out := make([]int32, 0, n)
	for len(out) < n {
		next := int32(sample.Greedy(logits))
		out = append(out, next)
		if len(out) == n {
			break
		}
		if logits, err = sess.Forward(ctx, []int32{next}, false); err != nil {
			return nil, fmt.Errorf("decode step %d: %w", len(out), err)
		}
	}
	return out, nil
}
