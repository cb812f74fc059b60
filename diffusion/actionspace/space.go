package actionspace

import (
	"errors"
	"fmt"
	"math"

	"vlanode/tensor"
)

// ErrBadInput is wrapped by errors about malformed inputs (lengths, NaNs).
var ErrBadInput = errors.New("actionspace: bad input")

// Space is UnicycleAccelCurvatureActionSpace: its normalisation buffers and
// the constants of its estimators. Build one with New or Default.
type Space struct {
	// AccelMean, AccelStd, CurvatureMean and CurvatureStd are the
	// normalisation buffers as the model holds them. The release loads them
	// in bfloat16 (see RoundBF16), so these are usually bf16 values.
	AccelMean, AccelStd         float32
	CurvatureMean, CurvatureStd float32
	// DT is the time step in seconds (dt, 0.1).
	DT float64
	// Waypoints is the number of future steps (n_waypoints, 64).
	Waypoints int
	// VLambda and VRidge weigh the third-difference smoothing and the ridge
	// term of the history speed fit (v_lambda 1e-6, v_ridge 1e-4).
	VLambda, VRidge float64
}

// Default is the source's constructor defaults (mean 0, std 1, dt 0.1, 64
// waypoints, v_lambda 1e-6, v_ridge 1e-4).
func Default() Space {
	return Space{AccelStd: 1, CurvatureStd: 1, DT: 0.1, Waypoints: 64, VLambda: 1e-6, VRidge: 1e-4}
}

// Validate checks that the constants describe a usable space.
func (s *Space) Validate() error {
	switch {
	case !(s.DT > 0):
		return fmt.Errorf("actionspace: dt %g must be positive", s.DT)
	case s.Waypoints <= 0:
		return fmt.Errorf("actionspace: n_waypoints %d must be positive", s.Waypoints)
	case s.AccelStd == 0 || s.CurvatureStd == 0:
		return fmt.Errorf("actionspace: zero std (accel %g, curvature %g)", s.AccelStd, s.CurvatureStd)
	case s.VLambda < 0 || !(s.VRidge > 0):
		return fmt.Errorf("actionspace: v_lambda %g must be >= 0 and v_ridge %g > 0", s.VLambda, s.VRidge)
	}
	for _, v := range []float32{s.AccelMean, s.AccelStd, s.CurvatureMean, s.CurvatureStd} {
		if !finite32(v) {
			return fmt.Errorf("actionspace: non-finite normalisation constant %g", v)
		}
	}
	return nil
}

// Denormalize splits normalised actions [Waypoints][2] (row-major: accel,
// curvature per step) into physical acceleration (m/s²) and curvature
// (1/m): value·std + mean, each step rounded to float32. The bounds of the
// source (±9.8 m/s², ±0.2 or ±0.33 1/m) are not applied, as at inference.
func (s *Space) Denormalize(actions []float32) (accel, kappa []float32, err error) {
	if len(actions) != 2*s.Waypoints {
		return nil, nil, fmt.Errorf("%w: %d action values, want %d×2", ErrBadInput, len(actions), s.Waypoints)
	}
	accel = make([]float32, s.Waypoints)
	kappa = make([]float32, s.Waypoints)
	for i := range accel {
		accel[i] = float32(actions[2*i]*s.AccelStd) + s.AccelMean
		kappa[i] = float32(actions[2*i+1]*s.CurvatureStd) + s.CurvatureMean
	}
	return accel, kappa, nil
}

// Trajectory is a future trajectory in the t0 frame: one pose per waypoint,
// the first at t0 + dt.
type Trajectory struct {
	XYZ [][3]float32 // metres
	Rot [][9]float32 // row-major 3×3, a rotation about z only
}

// ToTrajectory integrates normalised actions [Waypoints][2] from the state
// at t0 that the history gives: the speed from EstimateV0, the heading 0
// (the t0 frame) and the height of the last history pose, as the source's
// action_to_traj does. histXYZ and histRot are the history poses in the t0
// frame, oldest first, the last one at t0.
func (s *Space) ToTrajectory(actions []float32, histXYZ [][3]float32, histRot [][9]float32) (*Trajectory, error) {
	accel, kappa, err := s.Denormalize(actions)
	if err != nil {
		return nil, err
	}
	v0, err := s.EstimateV0(histXYZ, histRot)
	if err != nil {
		return nil, err
	}
	r := s.Integrate(accel, kappa, v0)
	z := histXYZ[len(histXYZ)-1][2]
	tr := &Trajectory{XYZ: make([][3]float32, s.Waypoints), Rot: make([][9]float32, s.Waypoints)}
	for i := range tr.XYZ {
		tr.XYZ[i] = [3]float32{r.X[i], r.Y[i], z}
		tr.Rot[i] = YawRotation(r.Theta[i+1])
	}
	return tr, nil
}

// YawRotation is the row-major rotation about z by theta, with cos and sin
// rounded to float32: [[c, -s, 0], [s, c, 0], [0, 0, 1]].
func YawRotation(theta float32) [9]float32 {
	c, s := cos32(theta), sin32(theta)
	return [9]float32{c, -s, 0, s, c, 0, 0, 0, 1}
}

// Yaw is the heading of a row-major rotation: atan2(R10, R00) in float32.
func Yaw(rot [9]float32) float32 { return atan2f32(rot[3], rot[0]) }

// RoundBF16 rounds v to the nearest bfloat16 (ties to even), as a float32.
// The release holds the action-space buffers and the Fourier frequencies in
// bf16; values taken from a config rather than the checkpoint need it.
func RoundBF16(v float32) float32 { return tensor.BF16ToF32(tensor.F32ToBF16(v)) }

func finite32(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

func sin32(x float32) float32 { return float32(math.Sin(float64(x))) }
func cos32(x float32) float32 { return float32(math.Cos(float64(x))) }
func atan2f32(y, x float32) float32 {
	return float32(math.Atan2(float64(y), float64(x)))
}
