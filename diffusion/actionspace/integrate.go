package actionspace

// Rollout is the unicycle state along a horizon of n steps.
type Rollout struct {
	V     []float32 // [n+1] speed at t0, t0+dt, …
	Theta []float32 // [n+1] heading, Theta[0] = 0
	X, Y  []float32 // [n] position at t0+dt, …, t0+n·dt
}

// Integrate rolls the unicycle forward from the origin with heading 0 and
// speed v0 under physical controls accel and kappa (equal lengths n), as the
// source's action_to_traj does, in float32:
//
//	v[0] = v0,  v[k+1] = v0 + Σ_{j≤k} a_j·dt
//	θ[0] = 0,   θ[k+1] = Σ_{j≤k} κ_j·v_j·dt + Σ_{j≤k} κ_j·a_j·dt²/2
//	x[k] = Σ_{j≤k} v_j·cos θ_j·dt/2 + Σ_{j≤k} v_{j+1}·cos θ_{j+1}·dt/2
//
// and y likewise with sin: the trapezoid rule on the speed along the
// heading, written as two separate cumulative sums. The heading is exact
// arc length times curvature for piecewise-constant controls.
func (s *Space) Integrate(accel, kappa []float32, v0 float32) Rollout {
	n := len(accel)
	dt := float32(s.DT)
	dt2 := float32(0.5 * (s.DT * s.DT)) // dt_2_term = 0.5·dt², a Python float
	half := float32(0.5 * s.DT)         // half_dt_term = 0.5·dt
	r := Rollout{V: make([]float32, n+1), Theta: make([]float32, n+1), X: make([]float32, n), Y: make([]float32, n)}

	dv := make([]float32, n)
	for i := range dv {
		dv[i] = float32(accel[i] * dt)
	}
	r.V[0] = v0
	for i, c := range cumsum(dv) {
		r.V[i+1] = v0 + c
	}

	turn := make([]float32, n)
	bend := make([]float32, n)
	for i := range turn {
		turn[i] = float32(float32(kappa[i]*r.V[i]) * dt)
		bend[i] = float32(float32(kappa[i]*accel[i]) * dt2)
	}
	c1, c2 := cumsum(turn), cumsum(bend)
	for i := range c1 {
		r.Theta[i+1] = c1[i] + c2[i] // 0 + c1 + c2, left to right
	}

	xs, xe := make([]float32, n), make([]float32, n)
	ys, ye := make([]float32, n), make([]float32, n)
	for i := range n {
		vs, ve := r.V[i], r.V[i+1]
		xs[i] = float32(float32(vs*cos32(r.Theta[i])) * half)
		xe[i] = float32(float32(ve*cos32(r.Theta[i+1])) * half)
		ys[i] = float32(float32(vs*sin32(r.Theta[i])) * half)
		ye[i] = float32(float32(ve*sin32(r.Theta[i+1])) * half)
	}
	cxs, cxe, cys, cye := cumsum(xs), cumsum(xe), cumsum(ys), cumsum(ye)
	for i := range n {
		r.X[i] = cxs[i] + cxe[i]
		r.Y[i] = cys[i] + cye[i]
	}
	return r
}

// cumsum is torch.cumsum on the CPU for float32: a float64 running sum,
// each prefix rounded to float32.
func cumsum(v []float32) []float32 {
	out := make([]float32, len(v))
	var acc float64
	for i, x := range v {
		acc += float64(x)
		out[i] = float32(acc)
	}
	return out
}
