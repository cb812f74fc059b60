package driver

// #include "shim.h"
import "C"

import "unsafe"

// BLASHandle is a cublasHandle_t.
type BLASHandle uintptr

// Op is a cublasOperation_t.
type Op int

// Matrix operations.
const (
	OpN Op = 0 // as stored
	OpT Op = 1 // transposed
)

// DataType is a cudaDataType.
type DataType int

// Element types of cublasGemmEx operands.
const (
	R32F  DataType = 0  // CUDA_R_32F
	R16F  DataType = 2  // CUDA_R_16F
	R16BF DataType = 14 // CUDA_R_16BF
)

// ComputeType is a cublasComputeType_t.
type ComputeType int

// Compute32F accumulates in float32 without TF32 shortcuts.
const Compute32F ComputeType = 68 // CUBLAS_COMPUTE_32F

// GemmDefault lets cuBLAS pick the algorithm (CUBLAS_GEMM_DEFAULT).
const GemmDefault = -1

// hintBLAS says what a missing libcublas means.
const hintBLAS = "cuBLAS of the CUDA 13 (or 12) toolkit is not installed or not on the loader path (ldconfig, LD_LIBRARY_PATH)"

// BLAS is libcublas.
type BLAS struct {
	lib *Library
	f   struct {
		create, destroy, setStream, setWorkspace, gemmEx, getProperty,
		getStatusName unsafe.Pointer // optional
	}
}

// OpenBLAS loads libcublas and resolves the functions vlanode uses.
func OpenBLAS() (*BLAS, error) {
	lib, err := OpenLibrary(hintBLAS, "libcublas.so.13", "libcublas.so.12")
	if err != nil {
		return nil, err
	}
	b := &BLAS{lib: lib}
	f := &b.f
	err = resolve(lib, []symbol{
		sym(&f.create, "cublasCreate_v2"),
		sym(&f.destroy, "cublasDestroy_v2"),
		sym(&f.setStream, "cublasSetStream_v2"),
		sym(&f.setWorkspace, "cublasSetWorkspace_v2"),
		sym(&f.gemmEx, "cublasGemmEx"),
		sym(&f.getProperty, "cublasGetProperty"),
	})
	if err != nil {
		lib.Close()
		return nil, err
	}
	f.getStatusName, _, _ = lib.Lookup("cublasGetStatusName")
	return b, nil
}

// Close releases the library handle.
func (b *BLAS) Close() error { return b.lib.Close() }

// LibraryName is the soname that was loaded.
func (b *BLAS) LibraryName() string { return b.lib.Name }

// check turns a cublasStatus_t into an *Error naming call, or nil.
func (b *BLAS) check(call string, s C.vla_status) error {
	if s == 0 {
		return nil
	}
	e := &Error{Lib: LibCUBLAS, Call: call, Code: int(s), Name: StatusName(LibCUBLAS, int(s))}
	if b.f.getStatusName != nil {
		if p := C.vla_cublasGetStatusName(b.f.getStatusName, s); p != nil {
			e.Name = C.GoString(p)
		}
	}
	return e
}

// Version is cuBLAS's major, minor and patch version.
func (b *BLAS) Version() (major, minor, patch int, err error) {
	var v [3]C.int
	for i := range v {
		if err := b.check("cublasGetProperty", C.vla_cublasGetProperty(b.f.getProperty, C.int(i), &v[i])); err != nil {
			return 0, 0, 0, err
		}
	}
	return int(v[0]), int(v[1]), int(v[2]), nil
}

// Create makes a handle on the current context. It allocates device memory
// of its own; MUST be released with Destroy.
func (b *BLAS) Create() (BLASHandle, error) {
	var h C.uintptr_t
	if err := b.check("cublasCreate_v2", C.vla_cublasCreate(b.f.create, &h)); err != nil {
		return 0, err
	}
	return BLASHandle(h), nil
}

// Destroy releases a handle.
func (b *BLAS) Destroy(h BLASHandle) error {
	return b.check("cublasDestroy_v2", C.vla_cublasDestroy(b.f.destroy, C.uintptr_t(h)))
}

// SetStream makes h queue its work on s.
func (b *BLAS) SetStream(h BLASHandle, s Stream) error {
	return b.check("cublasSetStream_v2", C.vla_cublasSetStream(b.f.setStream, C.uintptr_t(h), C.uintptr_t(s)))
}

// SetWorkspace gives h a workspace; call it after SetStream (which resets
// the workspace to cuBLAS's own).
func (b *BLAS) SetWorkspace(h BLASHandle, ws DevicePtr, bytes int64) error {
	return b.check("cublasSetWorkspace_v2", C.vla_cublasSetWorkspace(b.f.setWorkspace, C.uintptr_t(h), C.vla_dptr(ws), C.size_t(bytes)))
}

// Gemm is the argument list of cublasGemmEx, column-major:
// C = Alpha·op(A)·op(B) + Beta·C with op(A) M×K, op(B) K×N, C M×N.
type Gemm struct {
	TransA, TransB Op
	M, N, K        int
	Alpha, Beta    float32
	A              DevicePtr
	AType          DataType
	LDA            int
	B              DevicePtr
	BType          DataType
	LDB            int
	C              DevicePtr
	CType          DataType
	LDC            int
	Compute        ComputeType
	Algo           int
}

// GemmEx queues g on h's stream.
func (b *BLAS) GemmEx(h BLASHandle, g *Gemm) error {
	st := C.vla_cublasGemmEx(b.f.gemmEx, C.uintptr_t(h), C.int(g.TransA), C.int(g.TransB),
		C.int(g.M), C.int(g.N), C.int(g.K), C.float(g.Alpha),
		C.vla_dptr(g.A), C.int(g.AType), C.int(g.LDA),
		C.vla_dptr(g.B), C.int(g.BType), C.int(g.LDB), C.float(g.Beta),
		C.vla_dptr(g.C), C.int(g.CType), C.int(g.LDC), C.int(g.Compute), C.int(g.Algo))
	return b.check("cublasGemmEx", st)
}
