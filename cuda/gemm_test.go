package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"vlanode/cuda/driver"
)

// colMajorGemm is cublasGemmEx's definition, C = op(A)·op(B) column-major,
// on plain slices: the model the mapping is checked against.
func colMajorGemm(s gemmShape, a, b, c []float64) {
	at := func(i, l int) float64 { // op(A)[i, l], op(A) is m×k
		if s.transA == driver.OpT {
			return a[l+i*s.lda]
		}
		return a[i+l*s.lda]
	}
	bt := func(l, j int) float64 { // op(B)[l, j], op(B) is k×n
		if s.transB == driver.OpT {
			return b[j+l*s.ldb]
		}
		return b[l+j*s.ldb]
	}
	for i := 0; i < s.m; i++ {
		for j := 0; j < s.n; j++ {
			var sum float64
			for l := 0; l < s.k; l++ {
				sum += at(i, l) * bt(l, j)
			}
			c[i+j*s.ldc] = sum
		}
	}
}

func TestRowMajorXWtMapping(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][3]int{{1, 5, 7}, {4, 3, 2}, {6, 8, 5}, {3, 1, 4}, {2, 9, 1}} {
		M, N, K := sh[0], sh[1], sh[2]
		x := make([]float64, M*K) // row-major [M,K]
		w := make([]float64, N*K) // row-major [N,K]
		for i := range x {
			x[i] = r.NormFloat64()
		}
		for i := range w {
			w[i] = r.NormFloat64()
		}
		dst := make([]float64, M*N) // row-major [M,N]
		s := rowMajorXWt(M, N, K)
		// cuBLAS gets the row-major buffers as they are: A = w, B = x, C = dst.
		colMajorGemm(s, w, x, dst)
		for i := 0; i < M; i++ {
			for j := 0; j < N; j++ {
				var want float64
				for l := 0; l < K; l++ {
					want += x[i*K+l] * w[j*K+l]
				}
				if math.Abs(dst[i*N+j]-want) > 1e-12 {
					t.Fatalf("%d×%d×%d: dst[%d,%d] = %v, want %v", M, N, K, i, j, dst[i*N+j], want)
				}
			}
		}
	}
}
