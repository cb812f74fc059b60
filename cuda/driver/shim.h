// shim.h declares the C trampolines of package driver. No CUDA header is
// used: the few types the trampolines need are declared here, and every
// library function is called through a pointer that dlsym returned.
//
// Conventions:
//   - fn is the function pointer from dlsym; the trampoline casts it to the
//     prototype it documents and calls it.
//   - Handles (CUcontext, CUstream, CUevent, CUmodule, CUfunction,
//     cublasHandle_t, nvrtcProgram) travel as uintptr_t so that Go keeps
//     them as plain integers.
//   - Every status (CUresult, cublasStatus_t, nvrtcResult) is an int.
#ifndef VLANODE_CUDA_SHIM_H
#define VLANODE_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef int vla_status;              // CUresult, cublasStatus_t, nvrtcResult
typedef unsigned long long vla_dptr; // CUdeviceptr

// Upper bound on kernel parameters per launch.
#define VLA_MAX_KERNEL_ARGS 64

// dl: dlopen / dlsym / dlclose with dlerror read on the same thread.
void *vla_dlopen(const char *name, char *err, size_t errlen);
void *vla_dlsym(void *lib, const char *name, char *err, size_t errlen);
int vla_dlclose(void *lib);

// libcuda: initialization, devices, contexts.
vla_status vla_cuInit(void *fn, unsigned flags);
vla_status vla_cuDriverGetVersion(void *fn, int *v);
vla_status vla_cuDeviceGetCount(void *fn, int *n);
vla_status vla_cuDeviceGet(void *fn, int *dev, int ordinal);
vla_status vla_cuDeviceGetName(void *fn, char *name, int len, int dev);
vla_status vla_cuDeviceGetAttribute(void *fn, int *v, int attr, int dev);
vla_status vla_cuDeviceGetUuid(void *fn, unsigned char *uuid, int dev);
vla_status vla_cuDeviceTotalMem(void *fn, size_t *bytes, int dev);
vla_status vla_cuDevicePrimaryCtxRetain(void *fn, uintptr_t *ctx, int dev);
vla_status vla_cuDevicePrimaryCtxRelease(void *fn, int dev);
vla_status vla_cuCtxSetCurrent(void *fn, uintptr_t ctx);
const char *vla_cuGetErrorText(void *fn, vla_status s);

// libcuda: memory.
vla_status vla_cuMemGetInfo(void *fn, size_t *free, size_t *total);
vla_status vla_cuMemAlloc(void *fn, vla_dptr *p, size_t bytes);
vla_status vla_cuMemFree(void *fn, vla_dptr p);
vla_status vla_cuMemHostAlloc(void *fn, void **p, size_t bytes, unsigned flags);
vla_status vla_cuMemFreeHost(void *fn, void *p);
vla_status vla_cuMemHostRegister(void *fn, void *p, size_t bytes, unsigned flags);
vla_status vla_cuMemHostUnregister(void *fn, void *p);
vla_status vla_cuMemHostGetDevicePointer(void *fn, vla_dptr *dp, void *p);
vla_status vla_cuMemcpyHtoDAsync(void *fn, vla_dptr dst, const void *src, size_t bytes, uintptr_t stream);
vla_status vla_cuMemcpyDtoHAsync(void *fn, void *dst, vla_dptr src, size_t bytes, uintptr_t stream);
vla_status vla_cuMemcpyDtoDAsync(void *fn, vla_dptr dst, vla_dptr src, size_t bytes, uintptr_t stream);
vla_status vla_cuMemsetD8Async(void *fn, vla_dptr dst, unsigned char v, size_t n, uintptr_t stream);
// Copies between Go memory and the device: the async copy and a stream
// synchronization in one C call, so that the Go memory is not used after
// the call returns. *which is 0 when the copy failed, 1 when the sync did.
vla_status vla_copyHtoDWait(void *copy, void *sync, vla_dptr dst, const void *src, size_t bytes, uintptr_t stream, int *which);
vla_status vla_copyDtoHWait(void *copy, void *sync, void *dst, vla_dptr src, size_t bytes, uintptr_t stream, int *which);

// libcuda: streams and events.
vla_status vla_cuStreamCreate(void *fn, uintptr_t *s, unsigned flags);
vla_status vla_cuStreamDestroy(void *fn, uintptr_t s);
vla_status vla_cuStreamSynchronize(void *fn, uintptr_t s);
vla_status vla_cuStreamWaitEvent(void *fn, uintptr_t s, uintptr_t e, unsigned flags);
vla_status vla_cuEventCreate(void *fn, uintptr_t *e, unsigned flags);
vla_status vla_cuEventDestroy(void *fn, uintptr_t e);
vla_status vla_cuEventRecord(void *fn, uintptr_t e, uintptr_t s);
vla_status vla_cuEventSynchronize(void *fn, uintptr_t e);
vla_status vla_cuEventQuery(void *fn, uintptr_t e);
vla_status vla_cuEventElapsedTime(void *fn, float *ms, uintptr_t start, uintptr_t end);

// libcuda: stream memory operations (the V2 API: cuStreamWaitValue32_v2,
// cuStreamWriteValue32_v2) on a 32-bit word at a device address (which
// may be device-mapped host memory).
vla_status vla_cuStreamWaitValue32(void *fn, uintptr_t s, vla_dptr addr, uint32_t value, unsigned flags);
vla_status vla_cuStreamWriteValue32(void *fn, uintptr_t s, vla_dptr addr, uint32_t value, unsigned flags);
// A host-to-device rectangle through cuMemcpy2DAsync_v2: height rows of
// width bytes, row r read at src + r*srcPitch and written at
// dst + r*dstPitch.
vla_status vla_cuMemcpy2DHtoDAsync(void *fn, vla_dptr dst, size_t dstPitch, const void *src, size_t srcPitch,
                                   size_t width, size_t height, uintptr_t stream);

// libcuda: stream capture and graphs.
vla_status vla_cuStreamBeginCapture(void *fn, uintptr_t s, int mode);
vla_status vla_cuStreamEndCapture(void *fn, uintptr_t s, uintptr_t *graph);
vla_status vla_cuStreamIsCapturing(void *fn, uintptr_t s, int *status);
vla_status vla_cuGraphInstantiateWithFlags(void *fn, uintptr_t *exec, uintptr_t graph, unsigned long long flags);
vla_status vla_cuGraphLaunch(void *fn, uintptr_t exec, uintptr_t s);
vla_status vla_cuGraphExecDestroy(void *fn, uintptr_t exec);
vla_status vla_cuGraphDestroy(void *fn, uintptr_t graph);
vla_status vla_cuGraphGetNodes(void *fn, uintptr_t graph, size_t *n);

// libcuda: modules and launches.
vla_status vla_cuModuleLoadData(void *fn, uintptr_t *m, const void *image);
vla_status vla_cuModuleUnload(void *fn, uintptr_t m);
vla_status vla_cuModuleGetFunction(void *fn, uintptr_t *f, uintptr_t m, const char *name);
vla_status vla_cuFuncSetAttribute(void *fn, uintptr_t f, int attrib, int value);
// Launches f with nargs parameters, parameter i at buf+offs[i].
vla_status vla_cuLaunchKernel(void *fn, uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
                              unsigned bx, unsigned by, unsigned bz, unsigned shmem, uintptr_t stream,
                              void *buf, const int *offs, int nargs);
// The same through cuLaunchKernelEx (fn) with programmatic stream
// serialization allowed: f may start before the kernel ahead of it in the
// stream ends, and must wait for it (griddepcontrol.wait) before it reads
// or writes anything that kernel touches.
vla_status vla_cuLaunchKernelPDL(void *fn, uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned shmem, uintptr_t stream,
                                 void *buf, const int *offs, int nargs);

// libcublas.
vla_status vla_cublasCreate(void *fn, uintptr_t *h);
vla_status vla_cublasDestroy(void *fn, uintptr_t h);
vla_status vla_cublasSetStream(void *fn, uintptr_t h, uintptr_t s);
vla_status vla_cublasSetWorkspace(void *fn, uintptr_t h, vla_dptr ws, size_t bytes);
vla_status vla_cublasGetProperty(void *fn, int prop, int *v);
const char *vla_cublasGetStatusName(void *fn, vla_status s);
vla_status vla_cublasGemmEx(void *fn, uintptr_t h, int transa, int transb, int m, int n, int k,
                            float alpha, vla_dptr a, int atype, int lda, vla_dptr b, int btype, int ldb,
                            float beta, vla_dptr c, int ctype, int ldc, int compute, int algo);

// libcublasLt. A plan holds the descriptors and the algorithm of one
// product shape and epilogue (vla_ltPlanCreate), used by vla_ltMatmul and
// released by vla_ltPlanDestroy. fns holds, in the order of vla_lt_fn,
// the library's functions.
enum vla_lt_fn {
	VLA_LT_DESC_CREATE,
	VLA_LT_DESC_DESTROY,
	VLA_LT_DESC_SET,
	VLA_LT_LAYOUT_CREATE,
	VLA_LT_LAYOUT_DESTROY,
	VLA_LT_PREF_CREATE,
	VLA_LT_PREF_DESTROY,
	VLA_LT_PREF_SET,
	VLA_LT_HEURISTIC,
	VLA_LT_MATMUL,
	VLA_LT_NFNS
};
typedef struct {
	uintptr_t desc, layout[4]; // matmul descriptor; layouts of A, B, C, D
	uint64_t algo[8];          // cublasLtMatmulAlgo_t
	size_t workspace;          // bytes the algorithm needs
	int epilogue;
} vla_lt_plan;
vla_status vla_cublasLtCreate(void *fn, uintptr_t *h);
vla_status vla_cublasLtDestroy(void *fn, uintptr_t h);
// vla_ltPlanCreate fills p; *stage names the call that failed (or that
// found no algorithm: status 0 and stage VLA_LT_HEURISTIC with p->desc 0).
vla_status vla_ltPlanCreate(void **fns, uintptr_t lt, int transa, int transb, int m, int n, int k, int atype, int lda,
                            int btype, int ldb, int ctype, int ldc, int dtype, int ldd, int epilogue, int biastype,
                            size_t maxws, vla_lt_plan *p, int *stage);
vla_status vla_ltPlanDestroy(void **fns, vla_lt_plan *p);
vla_status vla_ltMatmul(void **fns, uintptr_t lt, vla_lt_plan *p, float alpha, float beta, vla_dptr a, vla_dptr b,
                        vla_dptr c, vla_dptr d, vla_dptr bias, vla_dptr ws, size_t wsbytes, uintptr_t stream);

// libnvrtc.
vla_status vla_nvrtcVersion(void *fn, int *major, int *minor);
vla_status vla_nvrtcGetNumSupportedArchs(void *fn, int *n);
vla_status vla_nvrtcGetSupportedArchs(void *fn, int *archs);
const char *vla_nvrtcGetErrorString(void *fn, vla_status s);
vla_status vla_nvrtcCreateProgram(void *fn, uintptr_t *prog, const char *src, const char *name);
vla_status vla_nvrtcCompileProgram(void *fn, uintptr_t prog, int nopts, char **opts);
vla_status vla_nvrtcGetProgramLogSize(void *fn, uintptr_t prog, size_t *n);
vla_status vla_nvrtcGetProgramLog(void *fn, uintptr_t prog, char *log);
vla_status vla_nvrtcGetCUBINSize(void *fn, uintptr_t prog, size_t *n);
vla_status vla_nvrtcGetCUBIN(void *fn, uintptr_t prog, char *cubin);
vla_status vla_nvrtcDestroyProgram(void *fn, uintptr_t *prog);

#endif
