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
// and rounds x as it reads it; larger products go to cuBLAS, after a
// kernel that rounds x into a scratch buffer. dst must not overlap x.
func (b *Backend) MatMul(dst, x, w, bias backend.Tensor) error {
	const op = "matmul"
	d, err := b.dstArg(op, "dst", dst)
	if err != nil {
		return err
	}
	xt, err := b.f32Arg(op, "x", x)
	if err != nil {
		return err
	}
	wt, err := b.floatArg(op, "w", w)
	if err != nil {
		return err
	}
	bt, err := b.optArg(op, "bias", bias)
	if err != nil {
		return err
	}
	if len(wt.shape) != 2 {
		return fmt.Errorf("cuda: matmul: w %v must be [N, K]", wt)
	}
	N, K := wt.shape[0], wt.shape[1]
	M, xk := backend.Matrix(xt)
	dm, dn := backend.Matrix(d)
	if xk != K || dm != M || dn != N {
		return fmt.Errorf("cuda: matmul: dst %v = x %v · wᵀ for w %v", d, xt, wt)
	}
	if bt != nil && bt.elements() != int64(N) {
		return fmt.Errorf("cuda: matmul: bias %v for %d outputs", bt, N)
	}
	if d.overlaps(xt) {
		return fmt.Errorf("cuda: matmul: dst %v overlaps x", d)
	}
	if M > math.MaxInt32 || N > math.MaxInt32 || K > math.MaxInt32 {
		return fmt.Errorf("cuda: matmul: %d×%d×%d is too large for cuBLAS", M, N, K)
	}
	if M == 0 || N == 0 {
		return nil
	}
	return b.run(func(g *gpu) error { return g.matmul(d, xt, wt, bt, M, N, K) })
}

// matmul queues the conversion of x, the GEMM and the bias.
func (g *gpu) matmul(d, x, w, bias *Tensor, M, N, K int) error {
	wType, err := blasType(w.dt)
	if err != nil {
		return err
	}
	if K == 0 { // an empty sum: cuBLAS may leave C untouched
		if err := g.drv.MemsetD8Async(d.ptr, 0, d.bytes(), g.stream); err != nil {
			return fmt.Errorf("cuda: matmul: %w", err)
		}
		return g.addBias(d, bias, M, N)
	}
	if !g.noGEMV && useGEMV(x, w, M, K) {
		return g.gemv(d, x, w, bias, M, N, K)
	}
	xp := x.ptr
	if w.dt != tensor.F32 {
		if xp, err = g.convertX(x, w.dt); err != nil {
			return err
		}
	}
	s := rowMajorXWt(M, N, K)
	gemm := &driver.Gemm{
		TransA: s.transA, TransB: s.transB, M: s.m, N: s.n, K: s.k,
		Alpha: 1, Beta: 0,
		A: w.ptr, AType: wType, LDA: s.lda,
		B: xp, BType: wType, LDB: s.ldb,
		C: d.ptr, CType: driver.R32F, LDC: s.ldc,
		Compute: driver.Compute32F, Algo: driver.GemmDefault,
	}
	err = g.traced(func() string { return fmt.Sprintf("gemm %d×%d×%d %v", M, N, K, w.dt) }, func() error {
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
	g.args.Reset()
	g.args.Ptr(d.ptr).Ptr(bias.ptr).I32(dtypeCode(bias.dt)).U64(uint64(M)).U64(uint64(N))
	return g.elementwise("matmul bias", g.k.addBias, int64(M)*int64(N))
}

// convertX rounds x to dt (F16 or BF16) into the scratch buffer.
func (g *gpu) convertX(x *Tensor, dt tensor.DType) (driver.DevicePtr, error) {
	n := x.elements()
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
	return p, g.elementwise("matmul convert", f, n)
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
