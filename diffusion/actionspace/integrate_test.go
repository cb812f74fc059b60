package actionspace

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func constant(n int, v float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// within reports |got − want| ≤ atol + rtol·|want|.
func within(t *testing.T, want, got float64, atol, rtol float64, msg string, args ...any) {
	t.Helper()
	if d := math.Abs(got - want); !(d <= atol+rtol*math.Abs(want)) {
		t.Fatalf("%s: got %.9g, want %.9g (|diff| %.3g > %.3g)", sprintf(msg, args...), got, want, d, atol+rtol*math.Abs(want))
	}
}

func TestIntegrateStraightLine(t *testing.T) {
	s := Default()
	const v0 = 12.5
	r := s.Integrate(constant(64, 0), constant(64, 0), v0)
	for k := range 64 {
		tk := float64(k+1) * s.DT
		within(t, v0*tk, float64(r.X[k]), 1e-5, 1e-6, "x[%d]", k)
		assert.Zero(t, r.Y[k], "y[%d]", k)
		assert.Zero(t, r.Theta[k+1], "heading %d", k)
		assert.Equal(t, float32(v0), r.V[k+1], "speed %d", k)
	}
}

// TestIntegrateConstantCurvature checks the closed form of the discrete
// rollout at constant speed v and curvature κ. With φ = κ·v·dt the heading
// after k steps is kφ = κ·s (s the arc length v·k·dt), and the trapezoid
// sums have closed forms
//
//	Σ_{j<k} (cos jφ + cos (j+1)φ)/2 = sin(kφ)·cot(φ/2)/2
//	Σ_{j<k} (sin jφ + sin (j+1)φ)/2 = (1 − cos kφ)·cot(φ/2)/2
//
// so every point lies on the circle of radius R = (1/κ)·(φ/2)/tan(φ/2)
// about (0, R): the radius 1/κ shrunk by the rule's known factor ≈ 1 − φ²/12.
func TestIntegrateConstantCurvature(t *testing.T) {
	s := Default()
	for _, tc := range []struct{ v, kappa float64 }{{10, 0.02}, {4, -0.3}, {25, 0.005}} {
		r := s.Integrate(constant(64, 0), constant(64, float32(tc.kappa)), float32(tc.v))
		phi := tc.kappa * tc.v * s.DT
		radius := (1 / tc.kappa) * (phi / 2) / math.Tan(phi/2)
		scale := math.Abs(1 / tc.kappa)
		for k := 1; k <= 64; k++ {
			arc := tc.v * float64(k) * s.DT
			within(t, tc.kappa*arc, float64(r.Theta[k]), 1e-6, 2e-6, "v %g κ %g: heading after %d steps", tc.v, tc.kappa, k)
			x, y := float64(r.X[k-1]), float64(r.Y[k-1])
			within(t, radius*math.Sin(float64(k)*phi), x, 2e-6*scale, 0, "v %g κ %g: x[%d]", tc.v, tc.kappa, k-1)
			within(t, radius*(1-math.Cos(float64(k)*phi)), y, 2e-6*scale, 0, "v %g κ %g: y[%d]", tc.v, tc.kappa, k-1)
			within(t, math.Abs(radius), math.Hypot(x, y-radius), 2e-6*scale, 0, "v %g κ %g: distance of point %d from the centre", tc.v, tc.kappa, k-1)
		}
		// the discrete circle is measurably smaller than 1/κ, by φ²/12
		last := math.Hypot(float64(r.X[63]), float64(r.Y[63])-radius)
		within(t, scale*(1-phi*phi/12), last, 0, phi*phi*phi*phi/100+1e-6, "radius vs 1/κ·(1−φ²/12)")
	}
}

// TestIntegrateConstantAcceleration: a linear speed makes the trapezoid
// exact, so x = v0·t + a·t²/2 holds up to float32 rounding, and with a
// curvature the heading is κ times that arc length exactly (the dt²/2 term
// of the source is what makes it exact).
func TestIntegrateConstantAcceleration(t *testing.T) {
	s := Default()
	for _, tc := range []struct{ v0, a, kappa float64 }{{5, 1.5, 0}, {20, -2.25, 0}, {8, 0.75, 0.01}} {
		r := s.Integrate(constant(64, float32(tc.a)), constant(64, float32(tc.kappa)), float32(tc.v0))
		for k := 1; k <= 64; k++ {
			tk := float64(k) * s.DT
			arc := tc.v0*tk + tc.a*tk*tk/2
			within(t, tc.v0+tc.a*tk, float64(r.V[k]), 2e-5, 1e-6, "speed %d", k)
			within(t, tc.kappa*arc, float64(r.Theta[k]), 1e-6, 1e-6, "heading %d", k)
			if tc.kappa == 0 {
				within(t, arc, float64(r.X[k-1]), 5e-5, 1e-6, "v0 %g a %g: x[%d]", tc.v0, tc.a, k-1)
				assert.Zero(t, r.Y[k-1])
			}
		}
	}
}

func TestDenormalize(t *testing.T) {
	s := Default()
	s.AccelMean, s.AccelStd = 0.029052734375, 0.6796875
	s.CurvatureMean, s.CurvatureStd = 0.0002689361572265625, 0.026123046875
	act := make([]float32, 128)
	for i := range act {
		act[i] = float32(i%7) - 3
	}
	a, k, err := s.Denormalize(act)
	require.NoError(t, err)
	for i := range 64 {
		assert.Equal(t, float32(act[2*i]*s.AccelStd)+s.AccelMean, a[i])
		within(t, float64(act[2*i+1])*float64(s.CurvatureStd)+float64(s.CurvatureMean), float64(k[i]), 1e-9, 1e-6, "kappa %d", i)
	}
	_, _, err = s.Denormalize(act[:10])
	assert.ErrorIs(t, err, ErrBadInput)
}

func TestToTrajectory(t *testing.T) {
	s := Default()
	xyz, rot := straightHistory(16, 10, 0, 1.25)
	tr, err := s.ToTrajectory(make([]float32, 128), xyz, rot)
	require.NoError(t, err)
	require.Len(t, tr.XYZ, 64)
	v0, err := s.EstimateV0(xyz, rot)
	require.NoError(t, err)
	for k := range 64 {
		within(t, float64(v0)*float64(k+1)*s.DT, float64(tr.XYZ[k][0]), 1e-5, 1e-6, "x[%d]", k)
		assert.Zero(t, tr.XYZ[k][1])
		assert.Equal(t, float32(1.25), tr.XYZ[k][2], "z is the last history height")
		assert.Equal(t, [9]float32{1, 0, 0, 0, 1, 0, 0, 0, 1}, tr.Rot[k])
	}
	_, err = s.ToTrajectory(make([]float32, 128), xyz[:1], rot[:1])
	assert.ErrorIs(t, err, ErrBadInput)
}

func TestYawRotation(t *testing.T) {
	r := YawRotation(0.5)
	assert.InDelta(t, math.Cos(0.5), r[0], 1e-7)
	assert.InDelta(t, -math.Sin(0.5), r[1], 1e-7)
	assert.InDelta(t, math.Sin(0.5), r[3], 1e-7)
	assert.Equal(t, float32(1), r[8])
	assert.InDelta(t, 0.5, Yaw(r), 1e-7)
}

func TestRoundBF16(t *testing.T) {
	// the release's normalisation buffers in bf16 (ALPAMAYO.md §6)
	for in, want := range map[float64]float32{
		0.02902694707164455:   0.029052734375,
		0.6810426736454882:    0.6796875,
		0.0002692167976330542: 0.0002689361572265625,
		0.026148280660833106:  0.026123046875,
	} {
		assert.Equal(t, want, RoundBF16(float32(in)), "%g", in)
	}
}
