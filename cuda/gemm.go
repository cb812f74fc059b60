package cuda

import (
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// gemmShape is the column-major cublasGemmEx call that computes the
// row-major product dst[M,N] = x[M,K] · w[N,K]ᵀ.
//
// cuBLAS reads a row-major r×c matrix with leading dimension c as its
// column-major c×r transpose. So dst is seen as dstᵀ (N×M, ldc N), w as wᵀ
// (K×N, lda K) and x as xᵀ (K×M, ldb K), and dstᵀ = w · xᵀ = op(wᵀ)·xᵀ with
// op = transpose on A = w and none on B = x: m = N, n = M, k = K.
type gemmShape struct {
	transA, transB driver.Op
	m, n, k        int
	lda, ldb, ldc  int
}

// rowMajorXWt maps dst[M,N] = x[M,K]·w[N,K]ᵀ to cuBLAS's arguments.
func rowMajorXWt(M, N, K int) gemmShape {
	return gemmShape{transA: driver.OpT, transB: driver.OpN, m: N, n: M, k: K, lda: K, ldb: K, ldc: N}
}

// blasType is the cudaDataType of a tensor element type.
func blasType(dt tensor.DType) (driver.DataType, error) {
	switch dt {
	case tensor.F32:
		return driver.R32F, nil
	case tensor.F16:
		return driver.R16F, nil
	case tensor.BF16:
		return driver.R16BF, nil
	}
	return 0, fmt.Errorf("cuda: matmul: no cuBLAS type for %v", dt)
}

// MatMul computes dst[M,N] = x[M,K] · wᵀ + bias for w [N,K] (F32, F16 or
// BF16), accumulating in float32. For an F16 or BF16 weight, x is rounded
// to the weight's type (cuBLAS needs both operands of one type); the
// product and the output stay float32. One row of x with a 16-bit weight
// (decoding) takes one GEMV kernel that streams the weight at memory speed
// and rounds x as it reads it; larger products go, after a kernel that
// rounds x into a scratch buffer, to vla_gemm_rows (2 to 64 rows with a
// 16-bit weight: rows.go) or cuBLAS. dst must not overlap x.
func (b *Backend) MatMul(dst, x, w, bias backend.Tensor) error {
	a, err := b.matmulArgs(dst, x, w, bias)
	if err != nil || a.M == 0 || a.N == 0 {
		return err
	}
	return b.run(func(g *gpu) error { return g.matmul(a.d, a.x, a.w, a.bias, a.M, a.N, a.K) })
}

// matmulOperands are MatMul's checked operands.
type matmulOperands struct {
	d, x, w, bias *Tensor
	M, N, K       int
}

// matmulArgs checks MatMul's operands.
func (b *Backend) matmulArgs(dst, x, w, bias backend.Tensor) (matmulOperands, error) {
	const op = "matmul"
	var a matmulOperands
	var err error
	if a.d, err = b.dstArg(op, "dst", dst); err != nil {
		return a, err
	}
	if a.x, err = b.f32Arg(op, "x", x); err != nil {
		return a, err
	}
	if a.w, err = b.floatArg(op, "w", w); err != nil {
		return a, err
	}
	if a.bias, err = b.optArg(op, "bias", bias); err != nil {
		return a, err
	}
	if len(a.w.shape) != 2 {
		return a, fmt.Errorf("cuda: matmul: w %v must be [N, K]", a.w)
	}
	N, K := a.w.shape[0], a.w.shape[1]
	M, xk := backend.Matrix(a.x)
	dm, dn := backend.Matrix(a.d)
	if xk != K || dm != M || dn != N {
		return a, fmt.Errorf("cuda: matmul: dst %v = x %v · wᵀ for w %v", a.d, a.x, a.w)
	}
	if a.bias != nil && a.bias.elements() != int64(N) {
		return a, fmt.Errorf("cuda: matmul: bias %v for %d outputs", a.bias, N)
	}
	if a.d.overlaps(a.x) {
		return a, fmt.Errorf("cuda: matmul: dst %v overlaps x", a.d)
	}
	if M > math.MaxInt32 || N > math.MaxInt32 || K > math.MaxInt32 {
		return a, fmt.Errorf("cuda: matmul: %d×%d×%d is too large for cuBLAS", M, N, K)
	}
	a.M, a.N, a.K = M, N, K
	return a, nil
}

// matmul queues the conversion of x, the GEMM and the bias.
func (g *gpu) matmul(d, x, w, bias *Tensor, M, N, K int) error {
	if _, err := blasType(w.dt); err != nil {
		return err
	}
	if K == 0 { // an empty sum: cuBLAS may leave C untouched
		if err := g.drv.MemsetD8Async(d.ptr, 0, d.bytes(), g.stream); err != nil {
			return fmt.Errorf("cuda: matmul: %w", err)
		}
		return g.addBias(d, bias, M, N)
	}
	if !g.noGEMV && useGEMV(x, w, M, K) {
		return g.gemv(d, x, w, bias, M, N, K, false)
	}
	xp := x.ptr
	if w.dt != tensor.F32 {
		var err error
		if xp, err = g.convertX(x, w.dt); err != nil {
			return err
		}
	}
	return g.gemm(d, xp, w, bias, M, N, K)
}

// gemm queues the cuBLAS product dst = xp·wᵀ + bias, xp being x in w's
// type (x itself for an F32 weight).
func (g *gpu) gemm(d *Tensor, xp driver.DevicePtr, w, bias *Tensor, M, N, K int) error {
	return g.gemmBeta(d, xp, w, bias, M, N, K, 0)
}

// gemmBeta is gemm with dst = xp·wᵀ + beta·dst (then + bias): beta 1 adds
// the product to what dst holds, in float as Add would. Products of 2 to
// 64 rows with a 16-bit weight take vla_gemm_rows (useRows).
func (g *gpu) gemmBeta(d *Tensor, xp driver.DevicePtr, w, bias *Tensor, M, N, K int, beta float32) error {
	wType, err := blasType(w.dt)
	if err != nil {
		return err
	}
	if (beta == 0 || beta == 1) && g.useRows(w, xp, M, K) {
		mode := int32(rowsPlain)
		if beta == 1 {
			mode = rowsResidual
		}
		ops := []matmulOperands{{d: d, w: w, bias: bias, M: M, N: N, K: K}}
		if ok, err := g.gemmRows(xp, ops, mode, 0); ok || err != nil {
			return err
		}
	}
	if bias != nil && g.epilogues(M) {
		// The bias in cuBLASLt's epilogue: (x·wᵀ + beta·dst) + bias in
		// float, as below, in one pass.
		if ok, err := g.gemmEpilogue(d.ptr, driver.R32F, xp, w, bias, M, N, K, beta, driver.EpilogueBias); ok || err != nil {
			return err
		}
	}
	s := rowMajorXWt(M, N, K)
	gemm := &driver.Gemm{
		TransA: s.transA, TransB: s.transB, M: s.m, N: s.n, K: s.k,
		Alpha: 1, Beta: beta,
		A: w.ptr, AType: wType, LDA: s.lda,
		B: xp, BType: wType, LDB: s.ldb,
		C: d.ptr, CType: driver.R32F, LDC: s.ldc,
		Compute: driver.Compute32F, Algo: driver.GemmDefault,
	}
	err = g.traced(func() string {
		if beta != 0 {
			return fmt.Sprintf("gemm+residual %d×%d×%d %v", M, N, K, w.dt)
		}
		return fmt.Sprintf("gemm %d×%d×%d %v", M, N, K, w.dt)
	}, func() error {
		return g.blas.GemmEx(g.handle, gemm)
	})
	if err != nil {
		return fmt.Errorf("cuda: matmul %d×%d×%d %v: %w", M, N, K, w.dt, err)
	}
	return g.addBias(d, bias, M, N)
}

// addBias adds bias [N] (nil: none) to every row of d [M, N].
func (g *gpu) addBias(d, bias *Tensor, M, N int) error {
	if bias == nil {
		return nil
	}
	return g.biasAct("matmul bias", d, bias, M, N, 0)
}

// biasAct adds bias (nil: none) to every row of d [M, N], then applies
// act: 0 nothing, 1 the exact GELU, 2 the tanh GELU (vla_add_bias).
func (g *gpu) biasAct(name string, d, bias *Tensor, M, N int, act int32) error {
	bp, bdt := biasArg(bias)
	g.args.Reset()
	g.args.Ptr(d.ptr).Ptr(bp).I32(bdt).U64(uint64(M)).U64(uint64(N)).I32(act)
	n := int64(M) * int64(N)
	if N%4 == 0 && d.ptr%16 == 0 {
		n /= 4
	}
	return g.elementwise(name, g.k.addBias, n)
}

// biasArg is a bias's pointer and element type code as the kernels take
// them: 0 and 0 for none.
func biasArg(bias *Tensor) (driver.DevicePtr, int32) {
	if bias == nil {
		return 0, 0
	}
	return bias.ptr, dtypeCode(bias.dt)
}

// is16 says whether dt is a 16-bit float type (the cuBLAS products' input
// types besides float).
func is16(dt tensor.DType) bool { return dt == tensor.BF16 || dt == tensor.F16 }

// kind16 indexes the kernels made for bf16 ([0]) and f16 ([1]) weights.
func kind16(dt tensor.DType) int {
	if dt == tensor.F16 {
		return 1
	}
	return 0
}

// convertX rounds x to dt (F16 or BF16) into the scratch buffer, or
// returns the bf16 twin of x that the op before wrote there (gpu.twinIn).
func (g *gpu) convertX(x *Tensor, dt tensor.DType) (driver.DevicePtr, error) {
	n := x.elements()
	if t := g.twinIn; t.p != 0 && dt == tensor.BF16 && t.src == x.ptr && t.n == n {
		return t.p, nil
	}
	p, err := g.scratch(&g.xScratch, n*int64(dt.Size()))
	if err != nil {
		return 0, fmt.Errorf("cuda: matmul: %w", err)
	}
	f := g.k.f32ToBF16
	if dt == tensor.F16 {
		f = g.k.f32ToF16
	}
	g.args.Reset()
	g.args.Ptr(p).Ptr(x.ptr).U64(uint64(n))
	return p, g.elementwise("matmul convert", f, convertItems(n, x.ptr, p))
}

// convertItems is the work items of vla_f32_to_bf16 or vla_f32_to_f16
// (convert.cu) for n floats at x into y: groups of 4 where the kernel
// takes them so, else elements.
func convertItems(n int64, x, y driver.DevicePtr) int64 {
	if n%4 == 0 && x%16 == 0 && y%8 == 0 {
		return n / 4
	}
	return n
}

// scratchMin is the smallest scratch buffer.
const scratchMin = 64 << 10

// scratch returns a device buffer of at least n bytes held in *slot,
// replacing a smaller one (after the queued work that may use it). Inside
// a capture it cannot grow.
func (g *gpu) scratch(slot **block, n int64) (driver.DevicePtr, error) {
	if *slot != nil && (*slot).bytes >= n {
		return (*slot).ptr, nil
	}
	if err := g.inCapture(fmt.Sprintf("growing a scratch buffer to %s", formatBytes(n))); err != nil {
		return 0, err
	}
	if *slot != nil {
		if err := g.drv.StreamSynchronize(g.stream); err != nil {
			return 0, err
		}
		err := g.mem.free(*slot)
		*slot = nil
		if err != nil {
			return 0, err
		}
	}
	blk, err := g.mem.alloc(PurposeScratch, max(scratchMin, accountedSize(n)))
	if err != nil {
		return 0, err
	}
	*slot = blk
	return blk.ptr, nil
}
