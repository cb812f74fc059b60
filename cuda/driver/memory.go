package driver

// #include "shim.h"
import "C"

import "unsafe"

// MemInfo returns the free and total memory of the current context's
// device, in bytes.
func (d *Driver) MemInfo() (free, total int64, err error) {
	var f, t C.size_t
	err = d.check("cuMemGetInfo_v2", C.vla_cuMemGetInfo(d.f.memGetInfo, &f, &t))
	return int64(f), int64(t), err
}

// MemAlloc allocates device memory (aligned to at least 256 bytes). It
// MUST be released with MemFree.
func (d *Driver) MemAlloc(bytes int64) (DevicePtr, error) {
	var p C.vla_dptr
	if err := d.check("cuMemAlloc_v2", C.vla_cuMemAlloc(d.f.memAlloc, &p, C.size_t(bytes))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// MemFree releases device memory from MemAlloc.
func (d *Driver) MemFree(p DevicePtr) error {
	return d.check("cuMemFree_v2", C.vla_cuMemFree(d.f.memFree, C.vla_dptr(p)))
}

// HostAlloc allocates page-locked host memory that the device reaches by
// DMA. It MUST be released with FreeHost.
func (d *Driver) HostAlloc(bytes int64, flags uint) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := d.check("cuMemHostAlloc", C.vla_cuMemHostAlloc(d.f.memHostAlloc, &p, C.size_t(bytes), C.unsigned(flags))); err != nil {
		return nil, err
	}
	return p, nil
}

// FreeHost releases memory from HostAlloc.
func (d *Driver) FreeHost(p unsafe.Pointer) error {
	return d.check("cuMemFreeHost", C.vla_cuMemFreeHost(d.f.memFreeHost, p))
}

// HostDevicePtr is the device address of host memory from HostAlloc with
// HostAllocDeviceMap: kernels read and write it there, over the bus.
func (d *Driver) HostDevicePtr(p unsafe.Pointer) (DevicePtr, error) {
	var dp C.vla_dptr
	if err := d.check("cuMemHostGetDevicePointer_v2", C.vla_cuMemHostGetDevicePointer(d.f.memHostGetDevicePointer, &dp, p)); err != nil {
		return 0, err
	}
	return DevicePtr(dp), nil
}

// HostRegister page-locks existing host memory. The memory must not be Go
// heap memory (use syscall.Mmap or C memory): the driver keeps using it
// after the call. Undo with HostUnregister before unmapping it.
func (d *Driver) HostRegister(p unsafe.Pointer, bytes int64, flags uint) error {
	return d.check("cuMemHostRegister_v2", C.vla_cuMemHostRegister(d.f.memHostRegister, p, C.size_t(bytes), C.unsigned(flags)))
}

// HostUnregister undoes HostRegister.
func (d *Driver) HostUnregister(p unsafe.Pointer) error {
	return d.check("cuMemHostUnregister", C.vla_cuMemHostUnregister(d.f.memHostUnregister, p))
}

// CopyHtoDAsync queues a copy of bytes from host memory src to dst on s.
// src must be page-locked (HostAlloc, HostRegister) and stay untouched
// until the copy has run (record an event after it).
func (d *Driver) CopyHtoDAsync(dst DevicePtr, src unsafe.Pointer, bytes int64, s Stream) error {
	return d.check("cuMemcpyHtoDAsync_v2", C.vla_cuMemcpyHtoDAsync(d.f.memcpyHtoDAsync, C.vla_dptr(dst), src, C.size_t(bytes), C.uintptr_t(s)))
}

// CopyDtoHAsync queues a copy of bytes from dst to page-locked host memory
// on s; the host memory is valid once s reaches that point.
func (d *Driver) CopyDtoHAsync(dst unsafe.Pointer, src DevicePtr, bytes int64, s Stream) error {
	return d.check("cuMemcpyDtoHAsync_v2", C.vla_cuMemcpyDtoHAsync(d.f.memcpyDtoHAsync, dst, C.vla_dptr(src), C.size_t(bytes), C.uintptr_t(s)))
}

// CopyDtoDAsync queues a device-to-device copy on s.
func (d *Driver) CopyDtoDAsync(dst, src DevicePtr, bytes int64, s Stream) error {
	return d.check("cuMemcpyDtoDAsync_v2", C.vla_cuMemcpyDtoDAsync(d.f.memcpyDtoDAsync, C.vla_dptr(dst), C.vla_dptr(src), C.size_t(bytes), C.uintptr_t(s)))
}

// MemsetD8Async queues setting n bytes at dst to v on s.
func (d *Driver) MemsetD8Async(dst DevicePtr, v byte, n int64, s Stream) error {
	return d.check("cuMemsetD8Async", C.vla_cuMemsetD8Async(d.f.memsetD8Async, C.vla_dptr(dst), C.uchar(v), C.size_t(n), C.uintptr_t(s)))
}

// CopyHtoD copies Go memory to the device in order on s and waits until s
// has finished, so src may be reused at once. It is for setup (weights);
// the hot path uses page-locked staging and CopyHtoDAsync.
func (d *Driver) CopyHtoD(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	var which C.int
	st := C.vla_copyHtoDWait(d.f.memcpyHtoDAsync, d.f.streamSynchronize, C.vla_dptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), C.uintptr_t(s), &which)
	return d.check(copyCall("cuMemcpyHtoDAsync_v2", which), st)
}

// CopyDtoH copies device memory into Go memory in order on s and waits
// until s has finished.
func (d *Driver) CopyDtoH(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	var which C.int
	st := C.vla_copyDtoHWait(d.f.memcpyDtoHAsync, d.f.streamSynchronize, unsafe.Pointer(&dst[0]), C.vla_dptr(src), C.size_t(len(dst)), C.uintptr_t(s), &which)
	return d.check(copyCall("cuMemcpyDtoHAsync_v2", which), st)
}

// copyCall names the call that failed in a copy-and-wait helper.
func copyCall(copy string, which C.int) string {
	if which == 0 {
		return copy
	}
	return "cuStreamSynchronize"
}

// CopyHtoD2DAsync queues a rectangle copy from page-locked host memory to
// the device on s (cuMemcpy2DAsync_v2): height rows of width bytes, row r
// read at src + r·srcPitch and written at dst + r·dstPitch. Both pitches
// must be at least width and at most the device's AttrMaxPitch. src must
// stay untouched until the copy has run.
func (d *Driver) CopyHtoD2DAsync(dst DevicePtr, dstPitch int64, src unsafe.Pointer, srcPitch, width, height int64, s Stream) error {
	return d.check("cuMemcpy2DAsync_v2", C.vla_cuMemcpy2DHtoDAsync(d.f.memcpy2DAsync, C.vla_dptr(dst), C.size_t(dstPitch), src, C.size_t(srcPitch), C.size_t(width), C.size_t(height), C.uintptr_t(s)))
}
