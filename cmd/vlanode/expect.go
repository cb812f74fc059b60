package main

import (
	"fmt"
	"io"
	"math"

	"vlanode/safetensors"
)

// Default tolerances of --expect for float32 logits computed from the same
// bf16 weights by another float32 implementation: the results differ only
// by summation order (measured ≤ 3e-5 against transformers on logits up to
// 33; see models/qwen3/reference_test.go).
const (
	defaultAtol = 2e-4
	defaultRtol = 1e-4
)

// cudaScaleTol is --expect's tolerance on the cuda backend, as a fraction
// of the reference's largest |logit|: cuBLAS multiplies with activations
// rounded to bf16 (as PyTorch's bf16 autocast does), an error of 2^-9 per
// element that scales with the logits (measured 0.3–0.7% on the reference
// checkpoints; see models/qwen3/gpu_test.go).
const cudaScaleTol = 0.02

// closeness is the result of comparing values with a reference.
type closeness struct {
	maxAbs float64
	worst  int
	ok     bool
}

// tolerance is how --expect judges logits: elementwise atol + rtol·|ref|,
// or, when scale > 0, max |diff| ≤ scale · max |ref|.
type tolerance struct{ atol, rtol, scale float64 }

func (t tolerance) String() string {
	if t.scale > 0 {
		return fmt.Sprintf("%g of max |ref|", t.scale)
	}
	return fmt.Sprintf("%g + %g·|ref|", t.atol, t.rtol)
}

// compareClose checks got against want within tol.
func compareClose(got, want []float32, tol tolerance) (closeness, error) {
	atol, rtol := tol.atol, tol.rtol
	if tol.scale > 0 {
		maxRef := 0.0
		for _, w := range want {
			maxRef = math.Max(maxRef, math.Abs(float64(w)))
		}
		atol, rtol = tol.scale*maxRef, 0
	}
	if len(got) != len(want) {
		return closeness{}, fmt.Errorf("%d values, reference has %d", len(got), len(want))
	}
	c := closeness{ok: true, worst: -1}
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			c.ok, c.worst, c.maxAbs = false, i, math.NaN()
			return c, nil
		}
		if d > c.maxAbs {
			c.maxAbs, c.worst = d, i
		}
		if d > atol+rtol*math.Abs(float64(want[i])) {
			c.ok = false
		}
	}
	return c, nil
}

// readReference reads a float32 or int64 tensor from a reference file.
func readReference(path, name string) (safetensors.Info, *safetensors.File, error) {
	f, err := safetensors.OpenFile(path)
	if err != nil {
		return safetensors.Info{}, nil, err
	}
	info, err := f.Tensor(name)
	if err != nil {
		f.Close()
		return safetensors.Info{}, nil, err
	}
	return info, f, nil
}

// expectLogits compares logits [rows, vocab] with the reference's "logits".
func expectLogits(w io.Writer, path string, logits []float32, tol tolerance) error {
	info, f, err := readReference(path, "logits")
	if err != nil {
		return err
	}
	defer f.Close()
	want, err := info.F32()
	if err != nil {
		return fmt.Errorf("%s: logits: %w", path, err)
	}
	c, err := compareClose(logits, want, tol)
	if err != nil {
		return fmt.Errorf("%s: logits: %w", path, err)
	}
	verdict := "MATCH"
	if !c.ok {
		verdict = "MISMATCH"
	}
	fmt.Fprintf(w, "%s: logits vs %s: max |diff| %.3g (tolerance %v)\n", verdict, path, c.maxAbs, tol)
	if !c.ok {
		return fmt.Errorf("logits differ from %s beyond the tolerance (worst at flat index %d)", path, c.worst)
	}
	return nil
}

// expectIDs compares token ids with the reference's "greedy_ids".
func expectIDs(w io.Writer, path string, ids []int64) error {
	info, f, err := readReference(path, "greedy_ids")
	if err != nil {
		return err
	}
	defer f.Close()
	want, err := info.I64()
	if err != nil {
		return fmt.Errorf("%s: greedy_ids: %w", path, err)
	}
	n := min(len(want), len(ids))
	for i := 0; i < n; i++ {
		if ids[i] != want[i] {
			fmt.Fprintf(w, "MISMATCH: token %d is %d, reference %s has %d\n", i, ids[i], path, want[i])
			return fmt.Errorf("greedy ids differ from %s at token %d", path, i)
		}
	}
	if len(ids) != len(want) {
		fmt.Fprintf(w, "MISMATCH: %d tokens, reference has %d\n", len(ids), len(want))
		return fmt.Errorf("generated %d tokens, %s has %d", len(ids), path, len(want))
	}
	fmt.Fprintf(w, "MATCH: %d greedy ids identical to %s\n", len(ids), path)
	return nil
}
