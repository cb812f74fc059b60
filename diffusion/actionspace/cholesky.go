package actionspace

import (
	"errors"
	"fmt"
	"math"
)

// errNotPositiveDefinite is returned by cholesky32 for a matrix that is not
// (numerically) symmetric positive definite.
var errNotPositiveDefinite = errors.New("matrix is not positive definite")

// cholesky32 factors a symmetric positive-definite matrix as L·Lᵀ in float32
// (the unblocked column algorithm of LAPACK's spotf2) and returns L, lower
// triangular. Only the lower triangle of a is read.
func cholesky32(a [][]float32) ([][]float32, error) {
	n := len(a)
	l := make([][]float32, n)
	for i := range l {
		l[i] = make([]float32, n)
	}
	for j := range n {
		d := a[j][j]
		for k := range j {
			d -= float32(l[j][k] * l[j][k])
		}
		if !(d > 0) {
			return nil, fmt.Errorf("%w (pivot %d is %g)", errNotPositiveDefinite, j, d)
		}
		ljj := float32(math.Sqrt(float64(d)))
		l[j][j] = ljj
		for i := j + 1; i < n; i++ {
			s := a[i][j]
			for k := range j {
				s -= float32(l[i][k] * l[j][k])
			}
			l[i][j] = s / ljj
		}
	}
	return l, nil
}

// choleskySolve32 solves L·Lᵀ·x = b in float32 by forward and back
// substitution.
func choleskySolve32(l [][]float32, b []float32) []float32 {
	n := len(b)
	z := make([]float32, n)
	for i := range n {
		s := b[i]
		for k := range i {
			s -= float32(l[i][k] * z[k])
		}
		z[i] = s / l[i][i]
	}
	x := make([]float32, n)
	for i := n - 1; i >= 0; i-- {
		s := z[i]
		for k := i + 1; k < n; k++ {
			s -= float32(l[k][i] * x[k])
		}
		x[i] = s / l[i][i]
	}
	return x
}
