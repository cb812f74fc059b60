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

// closeness is the result of comparing values with a reference.
type closeness struct {
	maxAbs float64
	worst  int
	ok     bool
}

// compareClose checks |got-want| ≤ atol + rtol·|want| elementwise.
func compareClose(got, want []float32, atol, rtol float64) (closeness, error) {
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
func expectLogits(w io.Writer, path string, logits []float32, atol, rtol float64) error {
	info, f, err := readReference(path, "logits")
	if err != nil {
		return err
	}
	defer f.Close()
	want, err := info.F32()
	if err != nil {
		return fmt.Errorf("%s: logits: %w", path, err)
	}
	c, err := compareClose(logits, want, atol, rtol)
	if err != nil {
		return fmt.Errorf("%s: logits: %w", path, err)
	}
	verdict := "MATCH"
	if !c.ok {
		verdict = "MISMATCH"
	}
	fmt.Fprintf(w, "%s: logits vs %s: max |diff| %.3g (tolerance %g + %g·|ref|)\n", verdict, path, c.maxAbs, atol, rtol)
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
