package driver

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"unsafe"
)

// LtHandle is a cublasLtHandle_t.
type LtHandle uintptr

// Epilogue is a cublasLtEpilogue_t: what cublasLtMatmul does to the
// product before it stores it.
type Epilogue int

// Epilogues.
const (
	EpilogueDefault  Epilogue = 1  // nothing
	EpilogueBias     Epilogue = 4  // + bias, by row of D (column-major)
	EpilogueGELUBias Epilogue = 36 // + bias, then the tanh GELU
)

// hintBLASLt says what a missing libcublasLt means.
const hintBLASLt = "cuBLASLt of the CUDA 13 (or 12) toolkit is not installed or not on the loader path (ldconfig, LD_LIBRARY_PATH)"

// ltNames are the functions of libcublasLt in the order of vla_lt_fn.
var ltNames = [C.VLA_LT_NFNS]string{
	C.VLA_LT_DESC_CREATE:    "cublasLtMatmulDescCreate",
	C.VLA_LT_DESC_DESTROY:   "cublasLtMatmulDescDestroy",
	C.VLA_LT_DESC_SET:       "cublasLtMatmulDescSetAttribute",
	C.VLA_LT_LAYOUT_CREATE:  "cublasLtMatrixLayoutCreate",
	C.VLA_LT_LAYOUT_DESTROY: "cublasLtMatrixLayoutDestroy",
	C.VLA_LT_PREF_CREATE:    "cublasLtMatmulPreferenceCreate",
	C.VLA_LT_PREF_DESTROY:   "cublasLtMatmulPreferenceDestroy",
	C.VLA_LT_PREF_SET:       "cublasLtMatmulPreferenceSetAttribute",
	C.VLA_LT_HEURISTIC:      "cublasLtMatmulAlgoGetHeuristic",
	C.VLA_LT_MATMUL:         "cublasLtMatmul",
}

// BLASLt is libcublasLt: products with epilogues (a bias, a GELU) that
// cublasGemmEx cannot fold in.
type BLASLt struct {
	lib            *Library
	create, destry unsafe.Pointer
	// fns is C memory (cgo forbids passing a Go array of C pointers).
	fns *[C.VLA_LT_NFNS]unsafe.Pointer
}

// OpenBLASLt loads libcublasLt and resolves the functions vlanode uses.
func OpenBLASLt() (*BLASLt, error) {
	lib, err := OpenLibrary(hintBLASLt, "libcublasLt.so.13", "libcublasLt.so.12")
	if err != nil {
		return nil, err
	}
	b := &BLASLt{lib: lib}
	syms := []symbol{sym(&b.create, "cublasLtCreate"), sym(&b.destry, "cublasLtDestroy")}
	var fns [C.VLA_LT_NFNS]unsafe.Pointer
	for i, name := range ltNames {
		syms = append(syms, sym(&fns[i], name))
	}
	if err := resolve(lib, syms); err != nil {
		lib.Close()
		return nil, err
	}
	b.fns = (*[C.VLA_LT_NFNS]unsafe.Pointer)(C.calloc(C.VLA_LT_NFNS, C.size_t(unsafe.Sizeof(unsafe.Pointer(nil)))))
	*b.fns = fns
	return b, nil
}

// Close releases the library handle.
func (b *BLASLt) Close() error {
	if b.fns != nil {
		C.free(unsafe.Pointer(b.fns))
		b.fns = nil
	}
	return b.lib.Close()
}

// LibraryName is the soname that was loaded.
func (b *BLASLt) LibraryName() string { return b.lib.Name }

func (b *BLASLt) check(call string, s C.vla_status) error {
	if s == 0 {
		return nil
	}
	return &Error{Lib: LibCUBLAS, Call: call, Code: int(s), Name: StatusName(LibCUBLAS, int(s))}
}

// Create makes a handle. It MUST be released with Destroy.
func (b *BLASLt) Create() (LtHandle, error) {
	var h C.uintptr_t
	if err := b.check("cublasLtCreate", C.vla_cublasLtCreate(b.create, &h)); err != nil {
		return 0, err
	}
	return LtHandle(h), nil
}

// Destroy releases a handle.
func (b *BLASLt) Destroy(h LtHandle) error {
	return b.check("cublasLtDestroy", C.vla_cublasLtDestroy(b.destry, C.uintptr_t(h)))
}

// LtGemm is one product shape for cublasLtMatmul, column-major as Gemm:
// D = Alpha·op(A)·op(B) + Beta·C, then the epilogue; bias (of BiasType)
// has one element per row of D. Workspace is the most the algorithm may
// take.
type LtGemm struct {
	TransA, TransB Op
	M, N, K        int
	AType, BType   DataType
	LDA, LDB       int
	CType, DType   DataType
	LDC, LDD       int
	Epilogue       Epilogue
	BiasType       DataType
	Workspace      int64
}

// ErrNoAlgorithm says that cuBLASLt has no algorithm for a product.
var ErrNoAlgorithm = errors.New("cublasLtMatmulAlgoGetHeuristic: no algorithm for the product")

// LtPlan is a product ready to run: its descriptors and the algorithm the
// heuristic chose (the same one every time for a shape, so a product's
// bits do not change from call to call). Release it with FreePlan.
type LtPlan struct {
	p *C.vla_lt_plan // C memory: it holds C pointers
}

// Plan makes the descriptors of g and asks the heuristic for its best
// algorithm.
func (b *BLASLt) Plan(h LtHandle, g *LtGemm) (*LtPlan, error) {
	p := (*C.vla_lt_plan)(C.calloc(1, C.size_t(unsafe.Sizeof(C.vla_lt_plan{}))))
	var stage C.int
	st := C.vla_ltPlanCreate(&b.fns[0], C.uintptr_t(h), C.int(g.TransA), C.int(g.TransB), C.int(g.M), C.int(g.N), C.int(g.K),
		C.int(g.AType), C.int(g.LDA), C.int(g.BType), C.int(g.LDB), C.int(g.CType), C.int(g.LDC), C.int(g.DType), C.int(g.LDD),
		C.int(g.Epilogue), C.int(g.BiasType), C.size_t(g.Workspace), p, &stage)
	if st != 0 || p.desc == 0 {
		C.free(unsafe.Pointer(p))
		if st == 0 {
			return nil, ErrNoAlgorithm
		}
		return nil, b.check(ltNames[stage], st)
	}
	return &LtPlan{p: p}, nil
}

// FreePlan releases p's descriptors.
func (b *BLASLt) FreePlan(p *LtPlan) error {
	if p == nil || p.p == nil {
		return nil
	}
	err := b.check("cublasLtMatmulDescDestroy", C.vla_ltPlanDestroy(&b.fns[0], p.p))
	C.free(unsafe.Pointer(p.p))
	p.p = nil
	return err
}

// Matmul queues p's product on s: D = alpha·op(A)·op(B) + beta·C, then the
// epilogue with bias (ignored without a bias epilogue). ws is the
// workspace, at least the bytes Plan was given.
func (b *BLASLt) Matmul(h LtHandle, p *LtPlan, alpha, beta float32, a, bm, c, d, bias, ws DevicePtr, wsBytes int64, s Stream) error {
	st := C.vla_ltMatmul(&b.fns[0], C.uintptr_t(h), p.p, C.float(alpha), C.float(beta), C.vla_dptr(a), C.vla_dptr(bm),
		C.vla_dptr(c), C.vla_dptr(d), C.vla_dptr(bias), C.vla_dptr(ws), C.size_t(wsBytes), C.uintptr_t(s))
	return b.check("cublasLtMatmul", st)
}
