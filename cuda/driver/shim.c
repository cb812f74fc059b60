// shim.c: the C trampolines declared in shim.h. Each one casts a pointer
// from dlsym to the library's prototype, written out here from NVIDIA's
// documentation, and calls it.
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "shim.h"

typedef void *H; // any CUDA handle type (CUcontext, CUstream, ...)

static void copy_err(char *err, size_t errlen) {
	const char *e = dlerror();
	if (errlen == 0) return;
	if (e == NULL) e = "unknown dlopen error";
	strncpy(err, e, errlen - 1);
	err[errlen - 1] = 0;
}

void *vla_dlopen(const char *name, char *err, size_t errlen) {
	// RTLD_NODELETE: the CUDA libraries run threads of their own; a later
	// dlclose must never unmap them under those threads.
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (h == NULL) copy_err(err, errlen);
	return h;
}

void *vla_dlsym(void *lib, const char *name, char *err, size_t errlen) {
	dlerror();
	void *p = dlsym(lib, name);
	if (p == NULL) copy_err(err, errlen);
	return p;
}

int vla_dlclose(void *lib) { return dlclose(lib); }

// ---- libcuda: initialization, devices, contexts ----

vla_status vla_cuInit(void *fn, unsigned flags) { return ((vla_status(*)(unsigned))fn)(flags); }
vla_status vla_cuDriverGetVersion(void *fn, int *v) { return ((vla_status(*)(int *))fn)(v); }
vla_status vla_cuDeviceGetCount(void *fn, int *n) { return ((vla_status(*)(int *))fn)(n); }
vla_status vla_cuDeviceGet(void *fn, int *dev, int ordinal) { return ((vla_status(*)(int *, int))fn)(dev, ordinal); }
vla_status vla_cuDeviceGetName(void *fn, char *name, int len, int dev) {
	return ((vla_status(*)(char *, int, int))fn)(name, len, dev);
}
vla_status vla_cuDeviceGetAttribute(void *fn, int *v, int attr, int dev) {
	return ((vla_status(*)(int *, int, int))fn)(v, attr, dev);
}
vla_status vla_cuDeviceGetUuid(void *fn, unsigned char *uuid, int dev) {
	// CUuuid is struct { char bytes[16]; }: uuid points at 16 bytes.
	return ((vla_status(*)(unsigned char *, int))fn)(uuid, dev);
}
vla_status vla_cuDeviceTotalMem(void *fn, size_t *bytes, int dev) {
	return ((vla_status(*)(size_t *, int))fn)(bytes, dev);
}
vla_status vla_cuDevicePrimaryCtxRetain(void *fn, uintptr_t *ctx, int dev) {
	H c = NULL;
	vla_status s = ((vla_status(*)(H *, int))fn)(&c, dev);
	*ctx = (uintptr_t)c;
	return s;
}
vla_status vla_cuDevicePrimaryCtxRelease(void *fn, int dev) { return ((vla_status(*)(int))fn)(dev); }
vla_status vla_cuCtxSetCurrent(void *fn, uintptr_t ctx) { return ((vla_status(*)(H))fn)((H)ctx); }

// vla_cuGetErrorText calls cuGetErrorName or cuGetErrorString (same
// prototype) and returns NULL when the status is unknown.
const char *vla_cuGetErrorText(void *fn, vla_status s) {
	const char *p = NULL;
	if (((vla_status(*)(vla_status, const char **))fn)(s, &p) != 0) return NULL;
	return p;
}

// ---- libcuda: memory ----

vla_status vla_cuMemGetInfo(void *fn, size_t *free, size_t *total) {
	return ((vla_status(*)(size_t *, size_t *))fn)(free, total);
}
vla_status vla_cuMemAlloc(void *fn, vla_dptr *p, size_t bytes) {
	return ((vla_status(*)(vla_dptr *, size_t))fn)(p, bytes);
}
vla_status vla_cuMemFree(void *fn, vla_dptr p) { return ((vla_status(*)(vla_dptr))fn)(p); }
vla_status vla_cuMemHostAlloc(void *fn, void **p, size_t bytes, unsigned flags) {
	return ((vla_status(*)(void **, size_t, unsigned))fn)(p, bytes, flags);
}
vla_status vla_cuMemHostGetDevicePointer(void *fn, vla_dptr *dp, void *p) {
	return ((vla_status(*)(vla_dptr *, void *, unsigned))fn)(dp, p, 0);
}
vla_status vla_cuMemFreeHost(void *fn, void *p) { return ((vla_status(*)(void *))fn)(p); }
vla_status vla_cuMemHostRegister(void *fn, void *p, size_t bytes, unsigned flags) {
	return ((vla_status(*)(void *, size_t, unsigned))fn)(p, bytes, flags);
}
vla_status vla_cuMemHostUnregister(void *fn, void *p) { return ((vla_status(*)(void *))fn)(p); }
vla_status vla_cuMemcpyHtoDAsync(void *fn, vla_dptr dst, const void *src, size_t bytes, uintptr_t stream) {
	return ((vla_status(*)(vla_dptr, const void *, size_t, H))fn)(dst, src, bytes, (H)stream);
}
vla_status vla_cuMemcpyDtoHAsync(void *fn, void *dst, vla_dptr src, size_t bytes, uintptr_t stream) {
	return ((vla_status(*)(void *, vla_dptr, size_t, H))fn)(dst, src, bytes, (H)stream);
}
vla_status vla_cuMemcpyDtoDAsync(void *fn, vla_dptr dst, vla_dptr src, size_t bytes, uintptr_t stream) {
	return ((vla_status(*)(vla_dptr, vla_dptr, size_t, H))fn)(dst, src, bytes, (H)stream);
}
vla_status vla_cuMemsetD8Async(void *fn, vla_dptr dst, unsigned char v, size_t n, uintptr_t stream) {
	return ((vla_status(*)(vla_dptr, unsigned char, size_t, H))fn)(dst, v, n, (H)stream);
}
vla_status vla_copyHtoDWait(void *copy, void *sync, vla_dptr dst, const void *src, size_t bytes, uintptr_t stream,
                            int *which) {
	*which = 0;
	vla_status s = vla_cuMemcpyHtoDAsync(copy, dst, src, bytes, stream);
	if (s != 0) return s;
	*which = 1;
	return vla_cuStreamSynchronize(sync, stream);
}
vla_status vla_copyDtoHWait(void *copy, void *sync, void *dst, vla_dptr src, size_t bytes, uintptr_t stream,
                            int *which) {
	*which = 0;
	vla_status s = vla_cuMemcpyDtoHAsync(copy, dst, src, bytes, stream);
	if (s != 0) return s;
	*which = 1;
	return vla_cuStreamSynchronize(sync, stream);
}

// ---- libcuda: streams and events ----

vla_status vla_cuStreamCreate(void *fn, uintptr_t *s, unsigned flags) {
	H h = NULL;
	vla_status r = ((vla_status(*)(H *, unsigned))fn)(&h, flags);
	*s = (uintptr_t)h;
	return r;
}
vla_status vla_cuStreamDestroy(void *fn, uintptr_t s) { return ((vla_status(*)(H))fn)((H)s); }
vla_status vla_cuStreamSynchronize(void *fn, uintptr_t s) { return ((vla_status(*)(H))fn)((H)s); }
vla_status vla_cuStreamWaitEvent(void *fn, uintptr_t s, uintptr_t e, unsigned flags) {
	return ((vla_status(*)(H, H, unsigned))fn)((H)s, (H)e, flags);
}
vla_status vla_cuEventCreate(void *fn, uintptr_t *e, unsigned flags) {
	H h = NULL;
	vla_status r = ((vla_status(*)(H *, unsigned))fn)(&h, flags);
	*e = (uintptr_t)h;
	return r;
}
vla_status vla_cuEventDestroy(void *fn, uintptr_t e) { return ((vla_status(*)(H))fn)((H)e); }
vla_status vla_cuEventRecord(void *fn, uintptr_t e, uintptr_t s) { return ((vla_status(*)(H, H))fn)((H)e, (H)s); }
vla_status vla_cuEventSynchronize(void *fn, uintptr_t e) { return ((vla_status(*)(H))fn)((H)e); }
vla_status vla_cuEventQuery(void *fn, uintptr_t e) { return ((vla_status(*)(H))fn)((H)e); }
vla_status vla_cuEventElapsedTime(void *fn, float *ms, uintptr_t start, uintptr_t end) {
	return ((vla_status(*)(float *, H, H))fn)(ms, (H)start, (H)end);
}

// ---- libcuda: stream memory operations and 2D copies ----

vla_status vla_cuStreamWaitValue32(void *fn, uintptr_t s, vla_dptr addr, uint32_t value, unsigned flags) {
	return ((vla_status(*)(H, vla_dptr, uint32_t, unsigned))fn)((H)s, addr, value, flags);
}
vla_status vla_cuStreamWriteValue32(void *fn, uintptr_t s, vla_dptr addr, uint32_t value, unsigned flags) {
	return ((vla_status(*)(H, vla_dptr, uint32_t, unsigned))fn)((H)s, addr, value, flags);
}

// CUDA_MEMCPY2D (CUDA_MEMCPY2D_v2 of cuda.h, CUDA 3.2 on), declared here
// since the shim includes no CUDA header; CUmemorytype is an enum (int).
typedef struct {
	size_t srcXInBytes, srcY;
	int srcMemoryType;
	const void *srcHost;
	vla_dptr srcDevice;
	H srcArray;
	size_t srcPitch;
	size_t dstXInBytes, dstY;
	int dstMemoryType;
	void *dstHost;
	vla_dptr dstDevice;
	H dstArray;
	size_t dstPitch;
	size_t WidthInBytes, Height;
} vla_memcpy2d;
enum { VLA_MEMORYTYPE_HOST = 1, VLA_MEMORYTYPE_DEVICE = 2 }; // CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE
_Static_assert(sizeof(vla_memcpy2d) == 128 && offsetof(vla_memcpy2d, srcHost) == 24 &&
                   offsetof(vla_memcpy2d, srcPitch) == 48 && offsetof(vla_memcpy2d, dstMemoryType) == 72 &&
                   offsetof(vla_memcpy2d, dstDevice) == 88 && offsetof(vla_memcpy2d, dstPitch) == 104 &&
                   offsetof(vla_memcpy2d, WidthInBytes) == 112,
               "CUDA_MEMCPY2D layout");

vla_status vla_cuMemcpy2DHtoDAsync(void *fn, vla_dptr dst, size_t dstPitch, const void *src, size_t srcPitch,
                                   size_t width, size_t height, uintptr_t stream) {
	vla_memcpy2d c;
	memset(&c, 0, sizeof c);
	c.srcMemoryType = VLA_MEMORYTYPE_HOST;
	c.srcHost = src;
	c.srcPitch = srcPitch;
	c.dstMemoryType = VLA_MEMORYTYPE_DEVICE;
	c.dstDevice = dst;
	c.dstPitch = dstPitch;
	c.WidthInBytes = width;
	c.Height = height;
	// The driver reads the descriptor before cuMemcpy2DAsync returns.
	return ((vla_status(*)(const vla_memcpy2d *, H))fn)(&c, (H)stream);
}

// ---- libcuda: stream capture and graphs ----

vla_status vla_cuStreamBeginCapture(void *fn, uintptr_t s, int mode) {
	return ((vla_status(*)(H, int))fn)((H)s, mode);
}
vla_status vla_cuStreamEndCapture(void *fn, uintptr_t s, uintptr_t *graph) {
	H g = NULL;
	vla_status r = ((vla_status(*)(H, H *))fn)((H)s, &g);
	*graph = (uintptr_t)g;
	return r;
}
vla_status vla_cuStreamIsCapturing(void *fn, uintptr_t s, int *status) {
	return ((vla_status(*)(H, int *))fn)((H)s, status);
}
vla_status vla_cuGraphInstantiateWithFlags(void *fn, uintptr_t *exec, uintptr_t graph, unsigned long long flags) {
	H e = NULL;
	vla_status r = ((vla_status(*)(H *, H, unsigned long long))fn)(&e, (H)graph, flags);
	*exec = (uintptr_t)e;
	return r;
}
vla_status vla_cuGraphLaunch(void *fn, uintptr_t exec, uintptr_t s) { return ((vla_status(*)(H, H))fn)((H)exec, (H)s); }
vla_status vla_cuGraphExecDestroy(void *fn, uintptr_t exec) { return ((vla_status(*)(H))fn)((H)exec); }
vla_status vla_cuGraphDestroy(void *fn, uintptr_t graph) { return ((vla_status(*)(H))fn)((H)graph); }
// cuGraphGetNodes with a null node array stores the node count.
vla_status vla_cuGraphGetNodes(void *fn, uintptr_t graph, size_t *n) {
	return ((vla_status(*)(H, H *, size_t *))fn)((H)graph, NULL, n);
}

// ---- libcuda: modules and launches ----

vla_status vla_cuModuleLoadData(void *fn, uintptr_t *m, const void *image) {
	H h = NULL;
	vla_status r = ((vla_status(*)(H *, const void *))fn)(&h, image);
	*m = (uintptr_t)h;
	return r;
}
vla_status vla_cuModuleUnload(void *fn, uintptr_t m) { return ((vla_status(*)(H))fn)((H)m); }
vla_status vla_cuModuleGetFunction(void *fn, uintptr_t *f, uintptr_t m, const char *name) {
	H h = NULL;
	vla_status r = ((vla_status(*)(H *, H, const char *))fn)(&h, (H)m, name);
	*f = (uintptr_t)h;
	return r;
}
vla_status vla_cuFuncSetAttribute(void *fn, uintptr_t f, int attrib, int value) {
	return ((vla_status(*)(H, int, int))fn)((H)f, attrib, value);
}
// vla_params points params[i] at parameter i, buf+offs[i]; 0 when nargs is
// out of range.
static int vla_params(void **params, void *buf, const int *offs, int nargs) {
	if (nargs < 0 || nargs > VLA_MAX_KERNEL_ARGS) return 0;
	for (int i = 0; i < nargs; i++) params[i] = (char *)buf + offs[i];
	return 1;
}
vla_status vla_cuLaunchKernel(void *fn, uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shmem, uintptr_t stream, void *buf,
                              const int *offs, int nargs) {
	void *params[VLA_MAX_KERNEL_ARGS];
	if (!vla_params(params, buf, offs, nargs)) return 1; // CUDA_ERROR_INVALID_VALUE
	// cuLaunchKernel copies the parameter values before it returns.
	return ((vla_status(*)(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **,
	                       void **))fn)((H)f, gx, gy, gz, bx, by, bz, shmem, (H)stream, params, NULL);
}

// cuLaunchKernelEx's CUlaunchAttribute and CUlaunchConfig (cuda.h, CUDA
// 12.0+), declared here since the shim includes no CUDA header: an
// attribute is its id, 4 bytes of padding and a 64-byte value union.
typedef struct {
	int id;
	char pad[4];
	union {
		char raw[64];
		int programmaticStreamSerializationAllowed;
	} value;
} vla_launch_attr;
typedef struct {
	unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
	H hStream;
	vla_launch_attr *attrs;
	unsigned numAttrs;
} vla_launch_config;
#define VLA_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
_Static_assert(sizeof(vla_launch_attr) == 72 && offsetof(vla_launch_attr, value) == 8, "CUlaunchAttribute layout");
_Static_assert(offsetof(vla_launch_config, hStream) == 32 && offsetof(vla_launch_config, attrs) == 40 &&
                   offsetof(vla_launch_config, numAttrs) == 48,
               "CUlaunchConfig layout");

vla_status vla_cuLaunchKernelPDL(void *fn, uintptr_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem, uintptr_t stream, void *buf,
                                 const int *offs, int nargs) {
	void *params[VLA_MAX_KERNEL_ARGS];
	if (!vla_params(params, buf, offs, nargs)) return 1; // CUDA_ERROR_INVALID_VALUE
	vla_launch_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.id = VLA_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	attr.value.programmaticStreamSerializationAllowed = 1;
	vla_launch_config cfg = {gx, gy, gz, bx, by, bz, shmem, (H)stream, &attr, 1};
	return ((vla_status(*)(const vla_launch_config *, H, void **, void **))fn)(&cfg, (H)f, params, NULL);
}

// ---- libcublas ----

vla_status vla_cublasCreate(void *fn, uintptr_t *h) {
	H p = NULL;
	vla_status r = ((vla_status(*)(H *))fn)(&p);
	*h = (uintptr_t)p;
	return r;
}
vla_status vla_cublasDestroy(void *fn, uintptr_t h) { return ((vla_status(*)(H))fn)((H)h); }
vla_status vla_cublasSetStream(void *fn, uintptr_t h, uintptr_t s) { return ((vla_status(*)(H, H))fn)((H)h, (H)s); }
vla_status vla_cublasSetWorkspace(void *fn, uintptr_t h, vla_dptr ws, size_t bytes) {
	return ((vla_status(*)(H, void *, size_t))fn)((H)h, (void *)(uintptr_t)ws, bytes);
}
vla_status vla_cublasGetProperty(void *fn, int prop, int *v) { return ((vla_status(*)(int, int *))fn)(prop, v); }
const char *vla_cublasGetStatusName(void *fn, vla_status s) { return ((const char *(*)(vla_status))fn)(s); }
vla_status vla_cublasGemmEx(void *fn, uintptr_t h, int transa, int transb, int m, int n, int k, float alpha,
                            vla_dptr a, int atype, int lda, vla_dptr b, int btype, int ldb, float beta, vla_dptr c,
                            int ctype, int ldc, int compute, int algo) {
	// alpha and beta are host scalars (the default pointer mode), read
	// before cublasGemmEx returns.
	typedef vla_status (*gemm_t)(H, int, int, int, int, int, const void *, const void *, int, int, const void *,
	                             int, int, const void *, void *, int, int, int, int);
	return ((gemm_t)fn)((H)h, transa, transb, m, n, k, &alpha, (const void *)(uintptr_t)a, atype, lda,
	                    (const void *)(uintptr_t)b, btype, ldb, &beta, (void *)(uintptr_t)c, ctype, ldc, compute,
	                    algo);
}

// ---- libcublasLt ----

vla_status vla_cublasLtCreate(void *fn, uintptr_t *h) {
	H p = NULL;
	vla_status r = ((vla_status(*)(H *))fn)(&p);
	*h = (uintptr_t)p;
	return r;
}
vla_status vla_cublasLtDestroy(void *fn, uintptr_t h) { return ((vla_status(*)(H))fn)((H)h); }

// Attributes of cublasLtMatmulDesc_t and cublasLtMatmulPreference_t, and
// the heuristic's result, from cublasLt.h.
enum {
	LT_DESC_TRANSA = 3,
	LT_DESC_TRANSB = 4,
	LT_DESC_EPILOGUE = 7,
	LT_DESC_BIAS_POINTER = 8,
	LT_DESC_BIAS_DATA_TYPE = 26,
	LT_PREF_MAX_WORKSPACE_BYTES = 1,
	LT_EPILOGUE_BIAS = 4,
};
typedef struct {
	uint64_t algo[8];
	size_t workspace;
	vla_status state;
	float waves;
	int reserved[4];
} lt_heuristic_result;

typedef vla_status (*lt_desc_create_t)(H *, int, int);
typedef vla_status (*lt_destroy_t)(H);
typedef vla_status (*lt_set_t)(H, int, const void *, size_t);
typedef vla_status (*lt_layout_create_t)(H *, int, uint64_t, uint64_t, int64_t);
typedef vla_status (*lt_pref_create_t)(H *);
typedef vla_status (*lt_heuristic_t)(H, H, H, H, H, H, H, int, lt_heuristic_result *, int *);
typedef vla_status (*lt_matmul_t)(H, H, const void *, const void *, H, const void *, H, const void *, const void *, H,
                                  void *, H, const void *, void *, size_t, H);

vla_status vla_ltPlanDestroy(void **fns, vla_lt_plan *p) {
	vla_status r = 0, e;
	if (p->desc) {
		e = ((lt_destroy_t)fns[VLA_LT_DESC_DESTROY])((H)p->desc);
		if (r == 0) r = e;
	}
	for (int i = 0; i < 4; i++) {
		if (p->layout[i]) {
			e = ((lt_destroy_t)fns[VLA_LT_LAYOUT_DESTROY])((H)p->layout[i]);
			if (r == 0) r = e;
		}
	}
	memset(p, 0, sizeof(*p));
	return r;
}

vla_status vla_ltPlanCreate(void **fns, uintptr_t lt, int transa, int transb, int m, int n, int k, int atype, int lda,
                            int btype, int ldb, int ctype, int ldc, int dtype, int ldd, int epilogue, int biastype,
                            size_t maxws, vla_lt_plan *p, int *stage) {
	memset(p, 0, sizeof(*p));
	p->epilogue = epilogue;
	const int compute = 68, scale = 0; // CUBLAS_COMPUTE_32F, CUDA_R_32F
	H h = NULL;
	vla_status r;
#define LT_TRY(st, call)                                                                                             \
	do {                                                                                                         \
		*stage = (st);                                                                                       \
		if ((r = (call)) != 0) {                                                                             \
			vla_ltPlanDestroy(fns, p);                                                                   \
			return r;                                                                                    \
		}                                                                                                    \
	} while (0)
	LT_TRY(VLA_LT_DESC_CREATE, ((lt_desc_create_t)fns[VLA_LT_DESC_CREATE])(&h, compute, scale));
	p->desc = (uintptr_t)h;
	lt_set_t dset = (lt_set_t)fns[VLA_LT_DESC_SET];
	LT_TRY(VLA_LT_DESC_SET, dset(h, LT_DESC_TRANSA, &transa, sizeof(transa)));
	LT_TRY(VLA_LT_DESC_SET, dset(h, LT_DESC_TRANSB, &transb, sizeof(transb)));
	uint32_t ep = (uint32_t)epilogue;
	LT_TRY(VLA_LT_DESC_SET, dset(h, LT_DESC_EPILOGUE, &ep, sizeof(ep)));
	if (epilogue & LT_EPILOGUE_BIAS) LT_TRY(VLA_LT_DESC_SET, dset(h, LT_DESC_BIAS_DATA_TYPE, &biastype, sizeof(biastype)));
	const int types[4] = {atype, btype, ctype, dtype};
	const uint64_t rows[4] = {(uint64_t)(transa ? k : m), (uint64_t)(transb ? n : k), (uint64_t)m, (uint64_t)m};
	const uint64_t cols[4] = {(uint64_t)(transa ? m : k), (uint64_t)(transb ? k : n), (uint64_t)n, (uint64_t)n};
	const int64_t lds[4] = {lda, ldb, ldc, ldd};
	for (int i = 0; i < 4; i++) {
		H l = NULL;
		LT_TRY(VLA_LT_LAYOUT_CREATE, ((lt_layout_create_t)fns[VLA_LT_LAYOUT_CREATE])(&l, types[i], rows[i], cols[i], lds[i]));
		p->layout[i] = (uintptr_t)l;
	}
	H pref = NULL;
	LT_TRY(VLA_LT_PREF_CREATE, ((lt_pref_create_t)fns[VLA_LT_PREF_CREATE])(&pref));
	uint64_t ws = maxws;
	lt_heuristic_result res;
	int found = 0;
	*stage = VLA_LT_PREF_SET;
	r = ((lt_set_t)fns[VLA_LT_PREF_SET])(pref, LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
	if (r == 0) {
		*stage = VLA_LT_HEURISTIC;
		memset(&res, 0, sizeof(res));
		r = ((lt_heuristic_t)fns[VLA_LT_HEURISTIC])((H)lt, h, (H)p->layout[0], (H)p->layout[1], (H)p->layout[2],
		                                             (H)p->layout[3], pref, 1, &res, &found);
	}
	((lt_destroy_t)fns[VLA_LT_PREF_DESTROY])(pref);
	if (r != 0 || found < 1) {
		vla_ltPlanDestroy(fns, p);
		return r;
	}
#undef LT_TRY
	memcpy(p->algo, res.algo, sizeof(p->algo));
	p->workspace = res.workspace;
	return 0;
}

vla_status vla_ltMatmul(void **fns, uintptr_t lt, vla_lt_plan *p, float alpha, float beta, vla_dptr a, vla_dptr b,
                        vla_dptr c, vla_dptr d, vla_dptr bias, vla_dptr ws, size_t wsbytes, uintptr_t stream) {
	if (p->epilogue & LT_EPILOGUE_BIAS) {
		// Read when the product is queued (and captured), so one
		// descriptor serves every bias.
		const void *bp = (const void *)(uintptr_t)bias;
		vla_status r = ((lt_set_t)fns[VLA_LT_DESC_SET])((H)p->desc, LT_DESC_BIAS_POINTER, &bp, sizeof(bp));
		if (r != 0) return r;
	}
	return ((lt_matmul_t)fns[VLA_LT_MATMUL])((H)lt, (H)p->desc, &alpha, (const void *)(uintptr_t)a, (H)p->layout[0],
	                                         (const void *)(uintptr_t)b, (H)p->layout[1], &beta,
	                                         (const void *)(uintptr_t)c, (H)p->layout[2], (void *)(uintptr_t)d,
	                                         (H)p->layout[3], p->algo, (void *)(uintptr_t)ws, wsbytes, (H)stream);
}

// ---- libnvrtc ----

vla_status vla_nvrtcVersion(void *fn, int *major, int *minor) {
	return ((vla_status(*)(int *, int *))fn)(major, minor);
}
vla_status vla_nvrtcGetNumSupportedArchs(void *fn, int *n) { return ((vla_status(*)(int *))fn)(n); }
vla_status vla_nvrtcGetSupportedArchs(void *fn, int *archs) { return ((vla_status(*)(int *))fn)(archs); }
const char *vla_nvrtcGetErrorString(void *fn, vla_status s) { return ((const char *(*)(vla_status))fn)(s); }
vla_status vla_nvrtcCreateProgram(void *fn, uintptr_t *prog, const char *src, const char *name) {
	H p = NULL;
	vla_status r = ((vla_status(*)(H *, const char *, const char *, int, const char *const *,
	                               const char *const *))fn)(&p, src, name, 0, NULL, NULL);
	*prog = (uintptr_t)p;
	return r;
}
vla_status vla_nvrtcCompileProgram(void *fn, uintptr_t prog, int nopts, char **opts) {
	return ((vla_status(*)(H, int, const char *const *))fn)((H)prog, nopts, (const char *const *)opts);
}
vla_status vla_nvrtcGetProgramLogSize(void *fn, uintptr_t prog, size_t *n) {
	return ((vla_status(*)(H, size_t *))fn)((H)prog, n);
}
vla_status vla_nvrtcGetProgramLog(void *fn, uintptr_t prog, char *log) {
	return ((vla_status(*)(H, char *))fn)((H)prog, log);
}
vla_status vla_nvrtcGetCUBINSize(void *fn, uintptr_t prog, size_t *n) {
	return ((vla_status(*)(H, size_t *))fn)((H)prog, n);
}
vla_status vla_nvrtcGetCUBIN(void *fn, uintptr_t prog, char *cubin) {
	return ((vla_status(*)(H, char *))fn)((H)prog, cubin);
}
vla_status vla_nvrtcDestroyProgram(void *fn, uintptr_t *prog) {
	H p = (H)*prog;
	vla_status r = ((vla_status(*)(H *))fn)(&p);
	*prog = (uintptr_t)p;
	return r;
}
