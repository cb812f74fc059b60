// Package actionspace is Alpamayo-R1's action space: the unicycle model
// with (acceleration, curvature) controls of NVlabs/alpamayo
// (action_space/unicycle_accel_curvature.py, action_space/utils.py) and the
// delta tokenizer of the trajectory history (models/delta_tokenizer.py).
//
// Everything here is pure host arithmetic on plain slices, in float32 where
// the source computes in float32, so that it can be checked against closed
// forms without a backend:
//
//   - Space.Denormalize turns the model's normalised controls into physical
//     ones (value·std + mean).
//   - Space.EstimateV0 fits the speeds of the 16 history poses by
//     regularised least squares and returns the speed at t0.
//   - Space.Integrate rolls the unicycle forward from t0 (dt 0.1 s) with the
//     source's trapezoid: two cumulative sums for the position.
//   - Space.ToTrajectory composes the three into xyz and yaw-only rotations.
//   - DeltaTokenizer.Encode quantises the history into the 48 ids that
//     replace the <|traj_history|> placeholders.
//
// Float32 fidelity. Each elementwise product and sum is rounded to float32
// as torch does (explicit conversions keep Go from fusing a multiply-add).
// A cumulative sum accumulates in float64 and rounds every prefix to
// float32, as torch's CPU kernel does; torch's CUDA scan accumulates in
// float32 in tree order, so a run of the source on a GPU can differ from
// this package by a few float32 ulps. sin, cos and atan2 are computed in
// float64 and rounded, which is within an ulp of any libm.
package actionspace
