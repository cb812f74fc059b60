// Package driver is the cgo shim over the NVIDIA libraries vlanode uses:
// the CUDA driver API (libcuda), cuBLAS (libcublas) and NVRTC (libnvrtc).
//
// Nothing is linked at build time: each library is opened at run time with
// dlopen, and each function is found with dlsym under its exact, versioned
// symbol name (cuMemAlloc_v2, cuMemGetInfo_v2, ...; with CUDA 13 the plain
// names are the legacy ABI). The prototypes are declared in shim.h from
// NVIDIA's documentation; no CUDA header is needed to build, and a binary
// built on a machine without a GPU says at run time which library is
// missing.
//
// A Driver, BLAS or NVRTC value is opened, passed to whoever needs it and
// closed; there is no package-level state. Every failed call becomes an
// *Error that names the call and the status. Package driver does not manage
// threads: the caller keeps a context current on the OS thread that calls
// (package cuda runs every call on one locked thread).
package driver
