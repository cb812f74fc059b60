package actionspace

import (
	"fmt"
	"math"
)

// DeltaTokenizer is the source's DeltaTrajectoryTokenizer (without yaw): it
// quantises the displacement between successive poses, per axis, into Bins
// uniform bins over [Min, Max].
type DeltaTokenizer struct {
	Min, Max [3]float32 // ego_xyz_min, ego_xyz_max: (−4, −4, −10), (4, 4, 10)
	Bins     int        // num_bins: 1000
}

// DefaultDeltaTokenizer is the source's constructor defaults.
func DefaultDeltaTokenizer() DeltaTokenizer {
	return DeltaTokenizer{Min: [3]float32{-4, -4, -10}, Max: [3]float32{4, 4, 10}, Bins: 1000}
}

// Validate checks the bins and ranges.
func (d DeltaTokenizer) Validate() error {
	if d.Bins < 2 {
		return fmt.Errorf("actionspace: delta tokenizer needs at least 2 bins, got %d", d.Bins)
	}
	for i := range 3 {
		if !(d.Max[i] > d.Min[i]) {
			return fmt.Errorf("actionspace: delta tokenizer axis %d has min %g >= max %g", i, d.Min[i], d.Max[i])
		}
	}
	return nil
}

// Encode returns 3 tokens per position, in [0, Bins): for each pose p_k
// (p_{−1} = 0, so the first "delta" is the oldest position itself) and each
// axis, round((p_k − p_{k−1} − min)/(max − min)·(Bins−1)) to the nearest
// integer, ties to even, clamped to [0, Bins−1]; x, y, z per step, in
// order. The history tokens of Alpamayo are these plus an offset (the
// first trajectory token id plus the future tokenizer's vocabulary).
func (d DeltaTokenizer) Encode(xyz [][3]float32) ([]int32, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	scale := float32(d.Bins - 1)
	out := make([]int32, 0, 3*len(xyz))
	var prev [3]float32
	for k, p := range xyz {
		for i := range 3 {
			if !finite32(p[i]) {
				return nil, fmt.Errorf("%w: position %d is not finite", ErrBadInput, k)
			}
			q := (p[i] - prev[i] - d.Min[i]) / (d.Max[i] - d.Min[i])
			r := math.RoundToEven(float64(float32(q * scale)))
			out = append(out, int32(min(max(r, 0), float64(d.Bins-1))))
		}
		prev = p
	}
	return out, nil
}

// HistoryTokens returns Encode's tokens plus offset, as vocabulary ids.
func (d DeltaTokenizer) HistoryTokens(xyz [][3]float32, offset int32) ([]int32, error) {
	ids, err := d.Encode(xyz)
	if err != nil {
		return nil, err
	}
	for i := range ids {
		ids[i] += offset
	}
	return ids, nil
}
