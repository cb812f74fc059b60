package driver

import "fmt"

// Lib names the library a status came from.
type Lib string

// The libraries package driver wraps.
const (
	LibCUDA   Lib = "cuda"
	LibCUBLAS Lib = "cublas"
	LibNVRTC  Lib = "nvrtc"
)

// Error is a failed call into a CUDA library: the call, its status and the
// status's name, as the library spells it when it can say, else from the
// tables below.
type Error struct {
	Lib  Lib
	Call string // the symbol called, e.g. "cuMemAlloc_v2"
	Code int    // the status returned
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Text string // a description, when the library gives one
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Text != "" && e.Text != e.Name {
		s += ": " + e.Text
	}
	return s
}

// Is reports whether target is an *Error with the same library and code,
// so errors.Is(err, &driver.Error{Lib: driver.LibCUDA, Code: driver.ErrNotReady})
// works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Lib == e.Lib && t.Code == e.Code
}

// CUDA driver statuses that callers test for.
const (
	CUDASuccess    = 0
	ErrOutOfMemory = 2
	ErrNoDevice    = 100
	ErrNotReady    = 600
)

// StatusName returns the name of a status of lib from a built-in table, for
// when the library cannot be asked (it is missing, or too old to say).
func StatusName(lib Lib, code int) string {
	var names map[int]string
	switch lib {
	case LibCUDA:
		names = cudaStatusNames
	case LibCUBLAS:
		names = cublasStatusNames
	case LibNVRTC:
		names = nvrtcStatusNames
	}
	if n, ok := names[code]; ok {
		return n
	}
	return fmt.Sprintf("%s status %d", lib, code)
}

// cudaStatusNames holds the CUresult values of cuda.h that vlanode is
// likely to meet.
var cudaStatusNames = map[int]string{
	0:   "CUDA_SUCCESS",
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	34:  "CUDA_ERROR_STUB_LIBRARY",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE",
	101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	218: "CUDA_ERROR_INVALID_PTX",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	716: "CUDA_ERROR_MISALIGNED_ADDRESS",
	719: "CUDA_ERROR_LAUNCH_FAILED",
	801: "CUDA_ERROR_NOT_SUPPORTED",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	999: "CUDA_ERROR_UNKNOWN",
}

// cublasStatusNames holds every cublasStatus_t of cublas_api.h.
var cublasStatusNames = map[int]string{
	0:  "CUBLAS_STATUS_SUCCESS",
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

// nvrtcStatusNames holds the nvrtcResult values of nvrtc.h.
var nvrtcStatusNames = map[int]string{
	0:  "NVRTC_SUCCESS",
	1:  "NVRTC_ERROR_OUT_OF_MEMORY",
	2:  "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
	3:  "NVRTC_ERROR_INVALID_INPUT",
	4:  "NVRTC_ERROR_INVALID_PROGRAM",
	5:  "NVRTC_ERROR_INVALID_OPTION",
	6:  "NVRTC_ERROR_COMPILATION",
	7:  "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
	8:  "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
	9:  "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
	10: "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
	11: "NVRTC_ERROR_INTERNAL_ERROR",
	12: "NVRTC_ERROR_TIME_FILE_WRITE_FAILED",
}
