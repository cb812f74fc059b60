package driver

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"unsafe"
)

// ModuleLoad loads a CUBIN (or PTX, or fatbin) image. The module MUST be
// released with ModuleUnload.
func (d *Driver) ModuleLoad(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, errors.New("cuda: cuModuleLoadData: empty image")
	}
	var m C.uintptr_t
	if err := d.check("cuModuleLoadData", C.vla_cuModuleLoadData(d.f.moduleLoadData, &m, unsafe.Pointer(&image[0]))); err != nil {
		return 0, err
	}
	return Module(m), nil
}

// ModuleUnload releases a module.
func (d *Driver) ModuleUnload(m Module) error {
	return d.check("cuModuleUnload", C.vla_cuModuleUnload(d.f.moduleUnload, C.uintptr_t(m)))
}

// Function returns the kernel called name (extern "C") in m.
func (d *Driver) Function(m Module, name string) (Function, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	if err := d.check("cuModuleGetFunction", C.vla_cuModuleGetFunction(d.f.moduleGetFunction, &f, C.uintptr_t(m), cname)); err != nil {
		return 0, &namedError{name, err}
	}
	return Function(f), nil
}

// FuncAttribute is a CUfunction_attribute that SetFuncAttribute sets.
type FuncAttribute int32

// FuncMaxDynamicSharedBytes (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
// is the most dynamic shared memory a launch of the kernel may ask for:
// above 48 KB, a kernel must be allowed it first.
const FuncMaxDynamicSharedBytes FuncAttribute = 8

// SetFuncAttribute sets attribute attr of kernel f to v (cuFuncSetAttribute).
func (d *Driver) SetFuncAttribute(f Function, attr FuncAttribute, v int) error {
	return d.check("cuFuncSetAttribute", C.vla_cuFuncSetAttribute(d.f.funcSetAttribute, C.uintptr_t(f), C.int(attr), C.int(v)))
}

// Launch queues kernel f on s with the parameters in a.
func (d *Driver) Launch(f Function, grid, block Dim3, sharedBytes uint32, s Stream, a *Args) error {
	return d.launch(f, grid, block, sharedBytes, s, a, false)
}

// CanLaunchPDL says whether the driver has cuLaunchKernelEx (CUDA 12.0+),
// which LaunchPDL needs.
func (d *Driver) CanLaunchPDL() bool { return d.f.launchKernelEx != nil }

// LaunchPDL queues kernel f on s with programmatic dependent launch
// (programmatic stream serialization): f's blocks may start once every
// block of the kernel ahead of it in s has executed
// griddepcontrol.launch_dependents, so that launch and block start-up
// overlap that kernel's work. f MUST execute griddepcontrol.wait in every
// thread before it reads or writes memory that earlier work in s touches,
// and before it exits: that wait is what orders it after the earlier
// kernels. Without cuLaunchKernelEx (CanLaunchPDL), it is Launch.
func (d *Driver) LaunchPDL(f Function, grid, block Dim3, sharedBytes uint32, s Stream, a *Args) error {
	return d.launch(f, grid, block, sharedBytes, s, a, d.CanLaunchPDL())
}

func (d *Driver) launch(f Function, grid, block Dim3, sharedBytes uint32, s Stream, a *Args, pdl bool) error {
	if err := a.Err(); err != nil {
		return err
	}
	buf, offs := a.raw()
	var pbuf unsafe.Pointer
	var poffs *C.int
	if len(offs) > 0 {
		pbuf, poffs = unsafe.Pointer(&buf[0]), (*C.int)(unsafe.Pointer(&offs[0]))
	}
	if pdl {
		st := C.vla_cuLaunchKernelPDL(d.f.launchKernelEx, C.uintptr_t(f),
			C.unsigned(grid[0]), C.unsigned(grid[1]), C.unsigned(grid[2]),
			C.unsigned(block[0]), C.unsigned(block[1]), C.unsigned(block[2]),
			C.unsigned(sharedBytes), C.uintptr_t(s), pbuf, poffs, C.int(len(offs)))
		return d.check("cuLaunchKernelEx", st)
	}
	st := C.vla_cuLaunchKernel(d.f.launchKernel, C.uintptr_t(f),
		C.unsigned(grid[0]), C.unsigned(grid[1]), C.unsigned(grid[2]),
		C.unsigned(block[0]), C.unsigned(block[1]), C.unsigned(block[2]),
		C.unsigned(sharedBytes), C.uintptr_t(s), pbuf, poffs, C.int(len(offs)))
	return d.check("cuLaunchKernel", st)
}

// namedError adds the kernel name to an error.
type namedError struct {
	name string
	err  error
}

func (e *namedError) Error() string { return e.name + ": " + e.err.Error() }
func (e *namedError) Unwrap() error { return e.err }

// The Go and C limits on kernel parameters must agree.
var (
	_ [maxKernelArgs - C.VLA_MAX_KERNEL_ARGS]struct{}
	_ [C.VLA_MAX_KERNEL_ARGS - maxKernelArgs]struct{}
)
