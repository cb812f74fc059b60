package placement

import (
	"errors"
	"fmt"
)

// Axis is how a tensor divides when its unit is split between the CPU and
// the GPU.
type Axis uint8

// The axes.
const (
	// Shared tensors (norm weights, biases of unsplit outputs) are read
	// whole by both engines.
	Shared Axis = iota
	// SplitRows tensors divide by rows: each engine computes its rows of
	// the output (gate and up [intermediate, hidden]; a split bias).
	SplitRows
	// SplitCols tensors divide by columns: each engine multiplies its
	// columns by its share of the input and the partial sums are added
	// (down [hidden, intermediate]).
	SplitCols
)

// Tensor is one tensor of a unit, as its family's loader table binds it.
type Tensor struct {
	// Name is the tensor's name inside the unit, e.g. "mlp.gate_proj.weight".
	Name  string
	Shape []int
	// Matrix tensors multiply every row that passes through the unit:
	// 2·rows·out·in FLOPs a pass.
	Matrix bool
	// Split is how the tensor divides in a split unit.
	Split Axis
}

// Unit is what the planner knows of one unit: its tensors, its blob's
// size and the work it does in each stage of a workload.
type Unit struct {
	ID      ID
	Tensors []Tensor
	// Bytes is the blob's size: every tensor at a 256-byte aligned offset,
	// padding included (weights.Layout).
	Bytes int64
	// HostOnly units never take VRAM (the embedding table: its rows are
	// gathered on the host).
	HostOnly bool
	// SplitDim is the length of the dimension a CPU/GPU split divides
	// (an MLP's intermediate size); 0 when the unit does not split.
	SplitDim int
	// Work is one entry per stage the unit runs in, in stage order.
	Work []Work
}

// String names the unit.
func (u Unit) String() string { return u.ID.String() }

// WorkIn returns the unit's work in stage s.
func (u Unit) WorkIn(s Stage) (Work, bool) {
	for _, w := range u.Work {
		if w.Stage == s {
			return w, true
		}
	}
	return Work{}, false
}

// MatrixBytes is the bytes of the unit's matrices (bf16), which a CPU
// reading the weights streams once a pass.
func (u Unit) MatrixBytes() int64 {
	var n int64
	for _, t := range u.Tensors {
		if t.Matrix {
			n += 2 * int64(elements(t.Shape))
		}
	}
	return n
}

// HandoffWidth is the values a row of activations has where a split of
// the unit crosses between the engines: the input width of its first
// matrix divided by rows (gate's and up's, or an LM head block's, hidden
// size); 0 when the unit does not split.
func (u Unit) HandoffWidth() int {
	if u.SplitDim <= 0 {
		return 0
	}
	for _, t := range u.Tensors {
		if t.Matrix && t.Split == SplitRows && len(t.Shape) == 2 {
			return t.Shape[1]
		}
	}
	return 0
}

// MatrixFLOPs is 2·rows·out·in summed over the unit's matrices.
func (u Unit) MatrixFLOPs(rows int) float64 {
	return MatrixFLOPs(u.Tensors, rows)
}

// MatrixFLOPs is 2·rows·out·in summed over the matrices of ts.
func MatrixFLOPs(ts []Tensor, rows int) float64 {
	var f float64
	for _, t := range ts {
		if t.Matrix && len(t.Shape) == 2 {
			f += 2 * float64(rows) * float64(t.Shape[0]) * float64(t.Shape[1])
		}
	}
	return f
}

// SplitShare is the share of the unit's matrix bytes that the first cpu
// indices of its split dimension hold (the CPU's share of a split).
func (u Unit) SplitShare(cpu int) float64 {
	if u.SplitDim <= 0 || cpu <= 0 {
		return 0
	}
	return float64(min(cpu, u.SplitDim)) / float64(u.SplitDim)
}

// Validate checks a unit as a family publishes it.
func (u Unit) Validate() error {
	var errs []error
	if u.ID.Module == "" || u.ID.Index < 0 {
		errs = append(errs, fmt.Errorf("bad id %+v", u.ID))
	}
	if u.Bytes < 0 {
		errs = append(errs, fmt.Errorf("negative size %d", u.Bytes))
	}
	for _, t := range u.Tensors {
		if t.Name == "" || len(t.Shape) == 0 || elements(t.Shape) <= 0 {
			errs = append(errs, fmt.Errorf("tensor %q has shape %v", t.Name, t.Shape))
		}
		if t.Matrix && len(t.Shape) != 2 {
			errs = append(errs, fmt.Errorf("matrix %q has shape %v", t.Name, t.Shape))
		}
		if u.SplitDim > 0 {
			switch {
			case t.Split == SplitRows && t.Shape[0] != u.SplitDim:
				errs = append(errs, fmt.Errorf("tensor %q %v splits by rows, not %d of them", t.Name, t.Shape, u.SplitDim))
			case t.Split == SplitCols && (len(t.Shape) != 2 || t.Shape[1] != u.SplitDim):
				errs = append(errs, fmt.Errorf("tensor %q %v splits by columns, not %d of them", t.Name, t.Shape, u.SplitDim))
			}
		}
	}
	stages := map[Stage]bool{}
	for _, w := range u.Work {
		if stages[w.Stage] {
			errs = append(errs, fmt.Errorf("two works in stage %s", w.Stage))
		}
		stages[w.Stage] = true
		if w.Passes < 0 || w.Rows < 0 || w.FLOPs < 0 {
			errs = append(errs, fmt.Errorf("stage %s: negative passes, rows or FLOPs %+v", w.Stage, w))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("placement: unit %s: %w", u.ID, err)
	}
	return nil
}

// Largest is the size of the largest unit of the lists that can take
// VRAM.
func Largest(lists ...[]Unit) int64 {
	var n int64
	for _, l := range lists {
		for _, u := range l {
			if !u.HostOnly {
				n = max(n, u.Bytes)
			}
		}
	}
	return n
}

func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Work is what a unit does in one stage.
type Work struct {
	Stage Stage
	// Passes is the repetition count R: how often the stage runs the unit.
	Passes int
	// Rows is the number of rows (tokens, patches) each pass multiplies
	// through the unit's matrices: the stage's token tier.
	Rows int
	// FLOPs is the arithmetic of one pass (matrix products and attention),
	// for the roofline: of one sequence's compute when Seqs > 1.
	FLOPs float64
	// Seqs is how many sequences of a batch compute the unit one after the
	// other in each pass, each over Rows (0 or 1: one); ExeMs counts them
	// all.
	Seqs int
	// ExeMs is the GPU compute time of one pass, C_EXE; the planner's
	// profile fills it.
	ExeMs float64
	// Timing says where ExeMs came from: "profile", "scaled" or "roofline".
	Timing string
}
