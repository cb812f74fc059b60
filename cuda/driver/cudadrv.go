package driver

// #include "shim.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// Handles of the CUDA driver API, kept as integers.
type (
	Device    int       // CUdevice: an ordinal
	Context   uintptr   // CUcontext
	Stream    uintptr   // CUstream; 0 is the legacy default stream
	Event     uintptr   // CUevent
	Module    uintptr   // CUmodule
	Function  uintptr   // CUfunction
	DevicePtr uint64    // CUdeviceptr: a device address
	Attribute int       // CUdevice_attribute
	Dim3      [3]uint32 // grid or block size, x y z
)

// Device attributes (CUdevice_attribute values of cuda.h).
const (
	AttrMaxThreadsPerBlock      Attribute = 1
	AttrMaxSharedMemoryPerBlock Attribute = 8
	AttrMaxPitch                Attribute = 11 // the largest pitch of a 2D copy, in bytes
	AttrMultiprocessorCount     Attribute = 16
	AttrCanMapHostMemory        Attribute = 19 // HostAllocDeviceMap works
	AttrComputeCapabilityMajor  Attribute = 75
	AttrComputeCapabilityMinor  Attribute = 76
	// AttrCanUseStreamMemOpsV1 is CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
	// whether the legacy (V1) stream memory operations are enabled (the
	// NVreg_EnableStreamMemOPs module option). The V2 functions that
	// package driver resolves are "available by default on all platforms"
	// (the driver API's documentation of stream memory operations, CUDA
	// 11.8 on) and have no attribute of their own: this one is
	// informative.
	AttrCanUseStreamMemOpsV1 Attribute = 92
)

// Flags of stream and event creation and of pinned host memory.
const (
	StreamDefault        = 0 // synchronizes with the legacy default stream
	StreamNonBlocking    = 1 // does not
	EventDefault         = 0
	EventBlockingSync    = 1 // CU_EVENT_BLOCKING_SYNC: EventSynchronize sleeps instead of spinning
	EventDisableTiming   = 2
	HostAllocPortable    = 1 // CU_MEMHOSTALLOC_PORTABLE
	HostAllocDeviceMap   = 2 // CU_MEMHOSTALLOC_DEVICEMAP: kernels read it in place (HostDevicePtr)
	HostRegisterPortable = 1 // CU_MEMHOSTREGISTER_PORTABLE
)

// hintDriver says what a missing libcuda means.
const hintDriver = "no NVIDIA driver on this machine"

// Driver is libcuda, the CUDA driver API. Its methods are safe to call from
// any thread; most of them need a context current on the calling thread.
type Driver struct {
	lib *Library
	f   struct {
		init, driverGetVersion, deviceGetCount, deviceGet, deviceGetName,
		deviceGetAttribute, deviceTotalMem, primaryCtxRetain, primaryCtxRelease,
		ctxSetCurrent, getErrorName, getErrorString,
		memGetInfo, memAlloc, memFree, memHostAlloc, memFreeHost, memHostRegister,
		memHostUnregister, memHostGetDevicePointer, memcpyHtoDAsync, memcpyDtoHAsync, memcpyDtoDAsync, memsetD8Async,
		streamCreate, streamDestroy, streamSynchronize, streamWaitEvent, streamWaitValue32, streamWriteValue32, memcpy2DAsync,
		eventCreate, eventDestroy, eventRecord, eventSynchronize, eventQuery, eventElapsedTime,
		moduleLoadData, moduleUnload, moduleGetFunction, funcSetAttribute, launchKernel, launchKernelEx,
		streamBeginCapture, streamEndCapture, streamIsCapturing,
		graphInstantiate, graphLaunch, graphExecDestroy, graphDestroy, graphGetNodes,
		deviceGetUUID unsafe.Pointer
	}
}

// OpenDriver loads libcuda and resolves the functions vlanode uses. It does
// not initialize the driver (see Init).
func OpenDriver() (*Driver, error) {
	lib, err := OpenLibrary(hintDriver, "libcuda.so.1", "libcuda.so")
	if err != nil {
		return nil, err
	}
	d := &Driver{lib: lib}
	f := &d.f
	// Versioned names: with CUDA 13 the plain name of a function that has
	// a _v2 is the legacy ABI. Where a function gained a _v2 late
	// (cuEventElapsedTime, CUDA 12.8), the plain name is the fallback.
	err = resolve(lib, []symbol{
		sym(&f.init, "cuInit"),
		sym(&f.driverGetVersion, "cuDriverGetVersion"),
		sym(&f.deviceGetCount, "cuDeviceGetCount"),
		sym(&f.deviceGet, "cuDeviceGet"),
		sym(&f.deviceGetName, "cuDeviceGetName"),
		sym(&f.deviceGetAttribute, "cuDeviceGetAttribute"),
		sym(&f.deviceTotalMem, "cuDeviceTotalMem_v2"),
		sym(&f.primaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		sym(&f.primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
		sym(&f.ctxSetCurrent, "cuCtxSetCurrent"),
		sym(&f.getErrorName, "cuGetErrorName"),
		sym(&f.getErrorString, "cuGetErrorString"),
		sym(&f.memGetInfo, "cuMemGetInfo_v2"),
		sym(&f.memAlloc, "cuMemAlloc_v2"),
		sym(&f.memFree, "cuMemFree_v2"),
		sym(&f.memHostAlloc, "cuMemHostAlloc"),
		sym(&f.memFreeHost, "cuMemFreeHost"),
		sym(&f.memHostRegister, "cuMemHostRegister_v2"),
		sym(&f.memHostUnregister, "cuMemHostUnregister"),
		sym(&f.memHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
		sym(&f.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
		sym(&f.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
		sym(&f.memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
		sym(&f.memsetD8Async, "cuMemsetD8Async"),
		sym(&f.memcpy2DAsync, "cuMemcpy2DAsync_v2"),
		sym(&f.streamCreate, "cuStreamCreate"),
		sym(&f.streamDestroy, "cuStreamDestroy_v2"),
		sym(&f.streamSynchronize, "cuStreamSynchronize"),
		sym(&f.streamWaitEvent, "cuStreamWaitEvent"),
		sym(&f.eventCreate, "cuEventCreate"),
		sym(&f.eventDestroy, "cuEventDestroy_v2"),
		sym(&f.eventRecord, "cuEventRecord"),
		sym(&f.eventSynchronize, "cuEventSynchronize"),
		sym(&f.eventQuery, "cuEventQuery"),
		sym(&f.eventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
		sym(&f.moduleLoadData, "cuModuleLoadData"),
		sym(&f.moduleUnload, "cuModuleUnload"),
		sym(&f.moduleGetFunction, "cuModuleGetFunction"),
		sym(&f.funcSetAttribute, "cuFuncSetAttribute"),
		sym(&f.launchKernel, "cuLaunchKernel"),
		sym(&f.streamBeginCapture, "cuStreamBeginCapture_v2"),
		sym(&f.streamEndCapture, "cuStreamEndCapture"),
		sym(&f.streamIsCapturing, "cuStreamIsCapturing"),
		sym(&f.graphInstantiate, "cuGraphInstantiateWithFlags"),
		sym(&f.graphLaunch, "cuGraphLaunch"),
		sym(&f.graphExecDestroy, "cuGraphExecDestroy"),
		sym(&f.graphDestroy, "cuGraphDestroy"),
	})
	if err != nil {
		lib.Close()
		return nil, err
	}
	f.graphGetNodes, _, _ = lib.Lookup("cuGraphGetNodes")                       // optional: diagnostics only
	f.deviceGetUUID, _, _ = lib.Lookup("cuDeviceGetUuid_v2", "cuDeviceGetUuid") // optional: GPU selection by UUID
	f.launchKernelEx, _, _ = lib.Lookup("cuLaunchKernelEx")                     // optional: CUDA 12.0+ (LaunchPDL)
	// Optional (CanWaitValue). Never the plain names: they are the V1
	// API, disabled unless the kernel module enables it.
	f.streamWaitValue32, _, _ = lib.Lookup("cuStreamWaitValue32_v2")
	f.streamWriteValue32, _, _ = lib.Lookup("cuStreamWriteValue32_v2")
	return d, nil
}

// Close releases the library handle. Resources made through d must be
// released first.
func (d *Driver) Close() error { return d.lib.Close() }

// LibraryName is the soname that was loaded.
func (d *Driver) LibraryName() string { return d.lib.Name }

// check turns a CUresult into an *Error naming call, or nil.
func (d *Driver) check(call string, s C.vla_status) error {
	if s == 0 {
		return nil
	}
	code := int(s)
	e := &Error{Lib: LibCUDA, Call: call, Code: code, Name: StatusName(LibCUDA, code)}
	if p := C.vla_cuGetErrorText(d.f.getErrorName, s); p != nil {
		e.Name = C.GoString(p)
	}
	if p := C.vla_cuGetErrorText(d.f.getErrorString, s); p != nil {
		e.Text = C.GoString(p)
	}
	return e
}

// Init initializes the driver (cuInit). It is cheap to call again.
func (d *Driver) Init() error { return d.check("cuInit", C.vla_cuInit(d.f.init, 0)) }

// Version is the CUDA version the driver supports, e.g. 13000.
func (d *Driver) Version() (int, error) {
	var v C.int
	err := d.check("cuDriverGetVersion", C.vla_cuDriverGetVersion(d.f.driverGetVersion, &v))
	return int(v), err
}

// DeviceCount is the number of CUDA devices.
func (d *Driver) DeviceCount() (int, error) {
	var n C.int
	err := d.check("cuDeviceGetCount", C.vla_cuDeviceGetCount(d.f.deviceGetCount, &n))
	return int(n), err
}

// Device returns the device of an ordinal.
func (d *Driver) Device(ordinal int) (Device, error) {
	var dev C.int
	err := d.check("cuDeviceGet", C.vla_cuDeviceGet(d.f.deviceGet, &dev, C.int(ordinal)))
	return Device(dev), err
}

// DeviceName is the marketing name of dev.
func (d *Driver) DeviceName(dev Device) (string, error) {
	var buf [256]C.char
	if err := d.check("cuDeviceGetName", C.vla_cuDeviceGetName(d.f.deviceGetName, &buf[0], C.int(len(buf)), C.int(dev))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// DeviceUUID returns dev's UUID as NVML and nvidia-smi print it:
// "GPU-" and 32 hex digits in groups of 8-4-4-4-12. It is how a CUDA
// ordinal, which CUDA_VISIBLE_DEVICES renumbers, is matched with an NVML
// device, which it does not.
func (d *Driver) DeviceUUID(dev Device) (string, error) {
	if d.f.deviceGetUUID == nil {
		return "", fmt.Errorf("cuDeviceGetUuid: not in %s", d.lib.Name)
	}
	var b [16]C.uchar
	if err := d.check("cuDeviceGetUuid", C.vla_cuDeviceGetUuid(d.f.deviceGetUUID, &b[0], C.int(dev))); err != nil {
		return "", err
	}
	var raw [16]byte
	for i := range b {
		raw[i] = byte(b[i])
	}
	return FormatUUID(raw), nil
}

// FormatUUID writes a 16-byte device UUID as NVML does.
func FormatUUID(b [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Attribute returns one attribute of dev.
func (d *Driver) Attribute(dev Device, a Attribute) (int, error) {
	var v C.int
	err := d.check("cuDeviceGetAttribute", C.vla_cuDeviceGetAttribute(d.f.deviceGetAttribute, &v, C.int(a), C.int(dev)))
	return int(v), err
}

// TotalMem is the device's memory in bytes.
func (d *Driver) TotalMem(dev Device) (int64, error) {
	var n C.size_t
	err := d.check("cuDeviceTotalMem_v2", C.vla_cuDeviceTotalMem(d.f.deviceTotalMem, &n, C.int(dev)))
	return int64(n), err
}

// ComputeCapability returns the device's major and minor version.
func (d *Driver) ComputeCapability(dev Device) (major, minor int, err error) {
	if major, err = d.Attribute(dev, AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = d.Attribute(dev, AttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// PrimaryContextRetain retains the device's primary context; release it
// with PrimaryContextRelease.
func (d *Driver) PrimaryContextRetain(dev Device) (Context, error) {
	var c C.uintptr_t
	err := d.check("cuDevicePrimaryCtxRetain", C.vla_cuDevicePrimaryCtxRetain(d.f.primaryCtxRetain, &c, C.int(dev)))
	return Context(c), err
}

// PrimaryContextRelease releases a PrimaryContextRetain.
func (d *Driver) PrimaryContextRelease(dev Device) error {
	return d.check("cuDevicePrimaryCtxRelease_v2", C.vla_cuDevicePrimaryCtxRelease(d.f.primaryCtxRelease, C.int(dev)))
}

// SetCurrent binds ctx to the calling OS thread (0 unbinds).
func (d *Driver) SetCurrent(ctx Context) error {
	return d.check("cuCtxSetCurrent", C.vla_cuCtxSetCurrent(d.f.ctxSetCurrent, C.uintptr_t(ctx)))
}

// String describes the driver for logs.
func (d *Driver) String() string {
	v, err := d.Version()
	if err != nil {
		return d.lib.Name
	}
	return fmt.Sprintf("%s (CUDA %d.%d)", d.lib.Name, v/1000, v%1000/10)
}
