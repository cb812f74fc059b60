package cuda

import (
	"errors"
	"fmt"

	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// epilogueMinRows: products of fewer rows keep cublasGemmEx and a bias
// kernel. With the action expert's 64-row products through cuBLASLt the
// diffusion took 45.0-46.6 ms against 42.2 through cublasGemmEx, on the
// same algorithms (the same bits); with its in- and out-projections'
// biases in the epilogue it was slower too (1.6-8.4 ms in two calls;
// bench/results/standard-workload.md run 11).
const epilogueMinRows = 65

// epilogues says whether a product of M rows folds its bias (and GELU)
// into cuBLASLt's epilogue.
func (g *gpu) epilogues(M int) bool { return !g.noEpilogues && M >= epilogueMinRows }

// ltKey names one planned cuBLASLt product (see gpu.ltPlan).
type ltKey struct {
	M, N, K    int
	w, d, bias driver.DataType
	epilogue   driver.Epilogue
}

// ltPlan returns the cuBLASLt plan of dst[M,N] (type dt) = xp·wᵀ with the
// epilogue, made on first use and kept: nil when cuBLASLt is missing or
// has no algorithm for it (the caller then takes cublasGemmEx and a
// kernel of its own).
func (g *gpu) ltPlan(k ltKey) (*driver.LtPlan, error) {
	if g.lt == nil {
		return nil, nil
	}
	if p, ok := g.ltPlans[k]; ok {
		return p, nil
	}
	s := rowMajorXWt(k.M, k.N, k.K)
	var ws int64
	if g.workspace != nil {
		ws = g.workspace.bytes
	}
	p, err := g.lt.Plan(g.ltHandle, &driver.LtGemm{
		TransA: s.transA, TransB: s.transB, M: s.m, N: s.n, K: s.k,
		AType: k.w, BType: k.w, LDA: s.lda, LDB: s.ldb,
		CType: k.d, DType: k.d, LDC: s.ldc, LDD: s.ldc,
		Epilogue: k.epilogue, BiasType: k.bias, Workspace: ws,
	})
	var le *driver.Error
	if errors.Is(err, driver.ErrNoAlgorithm) || errors.As(err, &le) && le.Call == "cublasLtMatmulAlgoGetHeuristic" {
		p, err = nil, nil // a combination cuBLASLt does not take
	}
	if err != nil {
		return nil, fmt.Errorf("cuda: matmul %d×%d×%d: %w", k.M, k.N, k.K, err)
	}
	if g.ltPlans == nil {
		g.ltPlans = map[ltKey]*driver.LtPlan{}
	}
	g.ltPlans[k] = p
	return p, nil
}

// epilogueKey is the plan key of d[M,N] (of type dt) = xp·wᵀ + bias with
// the epilogue: a float product takes its bias as float (biasF32 widens a
// 16-bit one), a 16-bit one in the bias's own type.
func epilogueKey(dt driver.DataType, w, bias *Tensor, M, N, K int, ep driver.Epilogue) (ltKey, error) {
	k := ltKey{M: M, N: N, K: K, d: dt, epilogue: ep}
	var err error
	if k.w, err = blasType(w.dt); err != nil {
		return k, err
	}
	if k.bias, err = blasType(bias.dt); err != nil {
		return k, err
	}
	if dt == driver.R32F {
		k.bias = driver.R32F
	}
	return k, nil
}

// hasEpilogue says whether cuBLASLt has a plan for the product with the
// epilogue (see gemmEpilogue), before anything is queued for it.
func (g *gpu) hasEpilogue(dt driver.DataType, w, bias *Tensor, M, N, K int, ep driver.Epilogue) (bool, error) {
	k, err := epilogueKey(dt, w, bias, M, N, K, ep)
	if err != nil {
		return false, err
	}
	p, err := g.ltPlan(k)
	return p != nil, err
}

// biasProduct queues d = x·wᵀ + beta·d + bias (x rounded to w's 16-bit
// type first, or its twin) as one cuBLASLt product. It returns false,
// having queued nothing, when cuBLASLt has no plan for it.
func (g *gpu) biasProduct(d, x, w, bias *Tensor, M, N, K int, beta float32) (bool, error) {
	if ok, err := g.hasEpilogue(driver.R32F, w, bias, M, N, K, driver.EpilogueBias); !ok || err != nil {
		return false, err
	}
	xp, err := g.convertX(x, w.dt)
	if err != nil {
		return false, err
	}
	return g.gemmEpilogue(d.ptr, driver.R32F, xp, w, bias, M, N, K, beta, driver.EpilogueBias)
}

// gemmEpilogue queues d[M,N] (of type dt, float or w's) = xp·wᵀ +
// beta·d, plus bias, then the epilogue's GELU, as one cuBLASLt product.
// It returns false, having queued nothing, when cuBLASLt has no plan for
// it.
func (g *gpu) gemmEpilogue(d driver.DevicePtr, dt driver.DataType, xp driver.DevicePtr, w, bias *Tensor, M, N, K int,
	beta float32, ep driver.Epilogue) (bool, error) {
	k, err := epilogueKey(dt, w, bias, M, N, K, ep)
	if err != nil {
		return false, err
	}
	p, err := g.ltPlan(k)
	if err != nil || p == nil {
		return false, err
	}
	bp, err := g.biasF32(bias, k.bias)
	if err != nil {
		return false, err
	}
	var ws driver.DevicePtr
	var wsBytes int64
	if g.workspace != nil {
		ws, wsBytes = g.workspace.ptr, g.workspace.bytes
	}
	err = g.traced(func() string {
		name := "gemm+bias"
		switch {
		case ep == driver.EpilogueGELUBias:
			name = "gemm+bias+gelu"
		case beta != 0:
			name = "gemm+bias+residual"
		}
		return fmt.Sprintf("%s %d×%d×%d %v", name, M, N, K, w.dt)
	}, func() error {
		return g.lt.Matmul(g.ltHandle, p, 1, beta, w.ptr, xp, d, d, bp, ws, wsBytes, g.stream)
	})
	if err != nil {
		return false, fmt.Errorf("cuda: matmul %d×%d×%d %v: %w", M, N, K, w.dt, err)
	}
	return true, nil
}

// biasF32 returns bias as type want: itself, or, for a 16-bit bias that a
// float product takes as float, widened (exactly) into the bias scratch.
func (g *gpu) biasF32(bias *Tensor, want driver.DataType) (driver.DevicePtr, error) {
	if want != driver.R32F || bias.dt == tensor.F32 {
		return bias.ptr, nil
	}
	n := bias.elements()
	p, err := g.scratch(&g.biasScratch, n*4)
	if err != nil {
		return 0, err
	}
	g.args.Reset()
	g.args.Ptr(p).Ptr(bias.ptr).I32(dtypeCode(bias.dt)).U64(uint64(n))
	return p, g.elementwise("bias to float", g.k.toF32, n)
}

// openLt loads cuBLASLt for the products with epilogues, charging what its
// handle takes; without it (an error here) those products take
// cublasGemmEx and a kernel for the bias.
func (g *gpu) openLt() error {
	lt, err := driver.OpenBLASLt()
	if err != nil {
		return err
	}
	used, err := g.measure(func() error {
		g.ltHandle, err = lt.Create()
		return err
	})
	if err != nil {
		lt.Close()
		return fmt.Errorf("cuda: %w", err)
	}
	if err := g.mem.charge(PurposeCUBLAS, used); err != nil {
		lt.Destroy(g.ltHandle)
		lt.Close()
		g.ltHandle = 0
		return err
	}
	g.lt = lt
	return nil
}

// closeLt releases the plans, the handle and the library.
func (g *gpu) closeLt() error {
	if g.lt == nil {
		return nil
	}
	var errs []error
	for _, p := range g.ltPlans {
		errs = append(errs, g.lt.FreePlan(p))
	}
	g.ltPlans = nil
	if g.ltHandle != 0 {
		errs = append(errs, g.lt.Destroy(g.ltHandle))
	}
	errs = append(errs, g.lt.Close())
	g.lt, g.ltHandle = nil, 0
	return errors.Join(errs...)
}
