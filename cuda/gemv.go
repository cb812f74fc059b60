package cuda

import (
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// The GEMV kernels (kernels/gemv.cu): MatMul with one row of x and a
// 16-bit weight, in one launch that streams the weight once. Measured on
// the H200 (bench/results/cuda-kernels.md): 3.4–3.6 TB/s of weights at
// 4096×12288, against 3.1–3.3 for cuBLAS with its conversion kernel; with
// 4 rows of x it ran at half cuBLAS's speed, so more rows go to cuBLAS.
const (
	gemvMaxM    = 1   // rows of x the kernels are built for
	gemvThreads = 256 // VLA_GEMV_THREADS: 8 warps, one output column each
)

// useGEMV says whether MatMul takes the GEMV kernel: a bf16 or f16 weight,
// at most gemvMaxM rows, K a multiple of 8 and 16-byte aligned operands
// (each lane reads 8 weights at a time). The choice depends on the shapes
// and alignment alone, so a unit computes the same bits wherever it lives.
func useGEMV(x, w *Tensor, M, K int) bool {
	return (w.dt == tensor.BF16 || w.dt == tensor.F16) && M >= 1 && M <= gemvMaxM &&
		K%8 == 0 && w.ptr%16 == 0 && x.ptr%16 == 0
}

// gemv queues dst[M,N] = x[M,K]·wᵀ + bias with the GEMV kernel; with
// accum, dst += x·wᵀ + bias (MatMulResidual's residual add, in the same
// float steps as the product into scratch and Add).
func (g *gpu) gemv(d, x, w, bias *Tensor, M, N, K int, accum bool) error {
	if g.useStream(K) {
		mode, name := int32(gstreamModeSet), "matmul gemv stream"
		if accum {
			mode, name = gstreamModeAdd, "matmul+residual gemv stream"
		}
		return g.gemvStream(name, []matmulOperands{{d: d, x: x, w: w, bias: bias, M: M, N: N, K: K}}, mode, nil)
	}
	bp, bdt := biasArg(bias)
	g.args.Reset()
	g.args.Ptr(d.ptr).Ptr(x.ptr).Ptr(w.ptr).Ptr(bp).I32(bdt).I32(int32(N)).I32(int32(K)).I32(boolArg(accum)).
		I32(boolArg(g.gemvEarly(w)))
	name := "matmul gemv"
	if accum {
		name = "matmul+residual gemv"
	}
	return g.launch(name, g.k.gemv[kind16(w.dt)][M-1], gemvGrid(N), block1D(gemvThreads), 0)
}

// gemvEarly says whether a GEMV kernel may load w before the kernel ahead
// of it has finished (vla_gemv_enter): when launches overlap and w is a
// weight from Backend.Weight, written once by a copy and never by a
// kernel. Weights viewed in DFB slots (WeightAt) are not: a copy refills
// their slot.
func (g *gpu) gemvEarly(w *Tensor) bool { return g.pdl && !g.gemvLate && w.readOnly && w.root }

// gemvGrid is the grid of a GEMV kernel over n output columns, a warp each.
func gemvGrid(n int) driver.Dim3 {
	warps := gemvThreads / 32
	return driver.Dim3{uint32((n + warps - 1) / warps), 1, 1}
}

// boolArg is a kernel's int flag.
func boolArg(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
