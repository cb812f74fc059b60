package actionspace

import (
	"fmt"
	"math"
)

// EstimateV0 is the source's estimate_t0_states: the ego speed at t0 from
// the history poses (positions and rotations in the t0 frame, oldest first,
// the last at t0, one every dt). With n poses, N = n−1 displacements and the
// unwrapped headings θ, it solves for speeds v_0 … v_N
//
//	min Σ_t ‖v_t·u_t + v_{t+1}·u_{t+1} − 2·Δp_t/dt‖² + (λ/dt⁶)·‖D₃v‖² + ridge·‖v‖²
//
// with u_t = (cos θ_t, sin θ_t) and D₃ the third-difference operator (rows
// −1, 3, −3, 1): the trapezoid relation between speed and displacement, a
// smooth jerk, and a small ridge. The normal equations are solved by a
// float32 Cholesky factorisation, and v_N is the speed at t0. Only x and y
// of the positions are used.
func (s *Space) EstimateV0(histXYZ [][3]float32, histRot [][9]float32) (float32, error) {
	v, err := s.HistorySpeeds(histXYZ, histRot)
	if err != nil {
		return 0, err
	}
	return v[len(v)-1], nil
}

// HistorySpeeds returns all the speeds v_0 … v_N of EstimateV0's fit.
func (s *Space) HistorySpeeds(histXYZ [][3]float32, histRot [][9]float32) ([]float32, error) {
	n := len(histXYZ)
	if n < 2 || len(histRot) != n {
		return nil, fmt.Errorf("%w: %d history positions and %d rotations, want equal counts of at least 2", ErrBadInput, n, len(histRot))
	}
	for i := range histXYZ {
		for _, v := range histXYZ[i][:2] {
			if !finite32(v) {
				return nil, fmt.Errorf("%w: history position %d is not finite", ErrBadInput, i)
			}
		}
		if !finite32(histRot[i][0]) || !finite32(histRot[i][3]) {
			return nil, fmt.Errorf("%w: history rotation %d is not finite", ErrBadInput, i)
		}
	}
	theta := make([]float32, n)
	for i, r := range histRot {
		theta[i] = Yaw(r)
	}
	theta = UnwrapAngles(theta)
	lhs, rhs := s.speedNormalEquations(histXYZ, theta)
	l, err := cholesky32(lhs)
	if err != nil {
		return nil, fmt.Errorf("actionspace: history speed fit: %w", err)
	}
	return choleskySolve32(l, rhs), nil
}

// speedNormalEquations builds (AᵀA + λ/dt⁶·D₃ᵀD₃ + ridge·I) and Aᵀb of the
// speed fit, as dense float32 matrices of N+1 unknowns.
func (s *Space) speedNormalEquations(xyz [][3]float32, theta []float32) (lhs [][]float32, rhs []float32) {
	m := len(theta) // unknowns v_0 … v_N
	nDisp := m - 1
	g := float32(2 / s.DT) // 2/dt is a Python float
	cosT, sinT := make([]float32, m), make([]float32, m)
	for i, t := range theta {
		cosT[i], sinT[i] = cos32(t), sin32(t)
	}
	// A has rows 2t (x) and 2t+1 (y): [.., u_t, u_{t+1}, ..]; b = g·Δp.
	a := make([][]float32, 2*nDisp)
	b := make([]float32, 2*nDisp)
	for t := range nDisp {
		a[2*t], a[2*t+1] = make([]float32, m), make([]float32, m)
		a[2*t][t], a[2*t][t+1] = cosT[t], cosT[t+1]
		a[2*t+1][t], a[2*t+1][t+1] = sinT[t], sinT[t+1]
		b[2*t] = float32(g * (xyz[t+1][0] - xyz[t][0]))
		b[2*t+1] = float32(g * (xyz[t+1][1] - xyz[t][1]))
	}
	lam3 := float32(s.VLambda / math.Pow(s.DT, 6))
	dtd := thirdDiffGram(m)
	ridge := float32(s.VRidge)
	lhs = make([][]float32, m)
	rhs = make([]float32, m)
	for j := range m {
		lhs[j] = make([]float32, m)
		for k := range m {
			var ata float32
			for i := range a {
				ata += float32(a[i][j] * a[i][k])
			}
			v := ata + float32(lam3*dtd[j][k])
			if j == k {
				v += ridge
			}
			lhs[j][k] = v
		}
		var r float32
		for i := range a {
			r += float32(a[i][j] * b[i])
		}
		rhs[j] = r
	}
	return lhs, rhs
}

// thirdDiffGram is D₃ᵀD₃ for the third-difference operator on m values
// (m−3 rows of −1, 3, −3, 1); its entries are small integers, exact in
// float32.
func thirdDiffGram(m int) [][]float32 {
	coef := [4]float32{-1, 3, -3, 1}
	out := make([][]float32, m)
	for i := range out {
		out[i] = make([]float32, m)
	}
	for r := 0; r+3 < m; r++ {
		for p, cp := range coef {
			for q, cq := range coef {
				out[r+p][r+q] += cp * cq
			}
		}
	}
	return out
}

// UnwrapAngles is the source's unwrap_angle: successive differences brought
// into [−π, π] by atan2(sin d, cos d), then summed back onto the first angle,
// in float32.
func UnwrapAngles(phi []float32) []float32 {
	if len(phi) == 0 {
		return nil
	}
	d := make([]float32, len(phi)-1)
	for i := range d {
		x := phi[i+1] - phi[i]
		d[i] = atan2f32(sin32(x), cos32(x))
	}
	out := make([]float32, len(phi))
	out[0] = phi[0]
	for i, c := range cumsum(d) {
		out[i+1] = phi[0] + c
	}
	return out
}
