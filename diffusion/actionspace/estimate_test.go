package actionspace

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fitSpeeds64 solves the regularised least squares of EstimateV0 directly
// from its definition, in float64 with Gaussian elimination: an independent
// check of the normal equations and the float32 Cholesky.
func fitSpeeds64(s Space, xyz [][3]float32, theta []float64) []float64 {
	m := len(theta)
	// rows of the stacked system [A; sqrt(λ/dt⁶)·D₃; sqrt(ridge)·I] v = [b; 0; 0]
	var rows [][]float64
	var rhs []float64
	for t := 0; t+1 < m; t++ {
		for axis, f := range []func(float64) float64{math.Cos, math.Sin} {
			row := make([]float64, m)
			row[t], row[t+1] = f(theta[t]), f(theta[t+1])
			rows = append(rows, row)
			rhs = append(rhs, 2/s.DT*(float64(xyz[t+1][axis])-float64(xyz[t][axis])))
		}
	}
	w := math.Sqrt(s.VLambda / math.Pow(s.DT, 6))
	for r := 0; r+3 < m; r++ {
		row := make([]float64, m)
		row[r], row[r+1], row[r+2], row[r+3] = -w, 3*w, -3*w, w
		rows, rhs = append(rows, row), append(rhs, 0)
	}
	for i := range m {
		row := make([]float64, m)
		row[i] = math.Sqrt(s.VRidge)
		rows, rhs = append(rows, row), append(rhs, 0)
	}
	// normal equations, then Gaussian elimination with partial pivoting
	a := make([][]float64, m)
	for j := range m {
		a[j] = make([]float64, m+1)
		for i, row := range rows {
			for k := range m {
				a[j][k] += row[j] * row[k]
			}
			a[j][m] += row[j] * rhs[i]
		}
	}
	for c := range m {
		p := c
		for r := c + 1; r < m; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		a[c], a[p] = a[p], a[c]
		for r := c + 1; r < m; r++ {
			f := a[r][c] / a[c][c]
			for k := c; k <= m; k++ {
				a[r][k] -= f * a[c][k]
			}
		}
	}
	v := make([]float64, m)
	for r := m - 1; r >= 0; r-- {
		sum := a[r][m]
		for k := r + 1; k < m; k++ {
			sum -= a[r][k] * v[k]
		}
		v[r] = sum / a[r][r]
	}
	return v
}

func TestEstimateV0ConstantSpeed(t *testing.T) {
	s := Default()
	for _, tc := range []struct{ speed, psi float64 }{{10, 0}, {3.5, 2.4}, {27, -3.1}} {
		xyz, rot := straightHistory(16, tc.speed, tc.psi, 0)
		v, err := s.HistorySpeeds(xyz, rot)
		require.NoError(t, err)
		theta := make([]float64, 16)
		for i := range theta {
			theta[i] = tc.psi
		}
		want := fitSpeeds64(s, xyz, theta)
		for i := range v {
			within(t, want[i], float64(v[i]), 1e-5, 2e-6, "speed %g: v[%d] vs the float64 solution", tc.speed, i)
		}
		// the ridge pulls the estimate towards zero by ~1e-4 relative
		within(t, tc.speed, float64(v[15]), 0, 5e-4, "speed %g heading %g: v0", tc.speed, tc.psi)
	}
}

// TestEstimateV0Accelerating: a linear speed has no third difference, so
// only the ridge biases the fit.
func TestEstimateV0Accelerating(t *testing.T) {
	s := Default()
	const vEnd, a = 12.0, -1.5
	xyz := make([][3]float32, 16)
	rot := make([][9]float32, 16)
	for k := range 16 {
		tk := -0.1 * float64(15-k) // time relative to t0
		xyz[k] = [3]float32{float32(vEnd*tk + a*tk*tk/2), 0, 0}
		rot[k] = YawRotation(0)
	}
	v0, err := s.EstimateV0(xyz, rot)
	require.NoError(t, err)
	within(t, vEnd, float64(v0), 0, 1e-3, "v0")
}

// TestEstimateV0Turning drives a circle whose heading crosses ±π, so the
// yaw from atan2 wraps. Exact arc positions give chords, for which the
// trapezoid relation yields the speed (2R/dt)·tan(ω·dt/2) ≈ v·(1 + (ω·dt)²/12).
func TestEstimateV0Turning(t *testing.T) {
	s := Default()
	const speed, omega = 9.0, 0.6 // rad/s
	radius := speed / omega
	xyz := make([][3]float32, 16)
	rot := make([][9]float32, 16)
	theta := make([]float64, 16)
	for k := range 16 {
		yaw := 2.6 + omega*0.1*float64(k) // crosses π near k = 9
		theta[k] = yaw
		xyz[k] = [3]float32{float32(radius * math.Sin(yaw)), float32(-radius * math.Cos(yaw)), 0}
		rot[k] = YawRotation(float32(yaw))
	}
	require.Less(t, Yaw(rot[15]), float32(0), "the test must wrap")
	v, err := s.HistorySpeeds(xyz, rot)
	require.NoError(t, err)
	want := fitSpeeds64(s, xyz, theta)
	for i := range v {
		within(t, want[i], float64(v[i]), 2e-5, 2e-6, "v[%d] vs the float64 solution", i)
	}
	chord := 2 * radius / s.DT * math.Tan(omega*s.DT/2)
	within(t, chord, float64(v[15]), 0, 5e-4, "v0")
}

func TestUnwrapAngles(t *testing.T) {
	got := UnwrapAngles([]float32{3.0, -3.1, 3.1, -3.0})
	want := []float64{3.0, 3.0 + (-6.1 + 2*math.Pi), 3.0 + (-6.1 + 2*math.Pi) + (6.2 - 2*math.Pi), 3.0 + (-6.1 + 2*math.Pi) + (6.2 - 2*math.Pi) + (-6.1 + 2*math.Pi)}
	for i := range want {
		assert.InDelta(t, want[i], got[i], 2e-6, "angle %d", i)
	}
	assert.Nil(t, UnwrapAngles(nil))
}

func TestEstimateV0Errors(t *testing.T) {
	s := Default()
	xyz, rot := straightHistory(16, 10, 0, 0)
	_, err := s.EstimateV0(xyz, rot[:15])
	assert.ErrorIs(t, err, ErrBadInput)
	xyz[3][0] = float32(math.NaN())
	_, err = s.EstimateV0(xyz, rot)
	assert.ErrorIs(t, err, ErrBadInput)
}

func TestCholesky(t *testing.T) {
	a := [][]float32{{4, 2, 0.4}, {2, 5, 1}, {0.4, 1, 3}}
	l, err := cholesky32(a)
	require.NoError(t, err)
	for i := range 3 {
		for j := range 3 {
			var s float64
			for k := range 3 {
				s += float64(l[i][k]) * float64(l[j][k])
			}
			assert.InDelta(t, a[i][j], s, 1e-6, "(LLᵀ)[%d][%d]", i, j)
		}
	}
	x := choleskySolve32(l, []float32{1, 2, 3})
	for i := range 3 {
		var s float64
		for k := range 3 {
			s += float64(a[i][k]) * float64(x[k])
		}
		assert.InDelta(t, float64(i+1), s, 1e-5)
	}
	_, err = cholesky32([][]float32{{1, 2}, {2, 1}})
	assert.ErrorIs(t, err, errNotPositiveDefinite)
}
