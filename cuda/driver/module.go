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

// Launch queues kernel f on s with the parameters in a.
func (d *Driver) Launch(f Function, grid, block Dim3, sharedBytes uint32, s Stream, a *Args) error {
	if err := a.Err(); err != nil {
		return err
	}
	buf, offs := a.raw()
	var pbuf unsafe.Pointer
	var poffs *C.int
	if len(offs) > 0 {
		pbuf, poffs = unsafe.Pointer(&buf[0]), (*C.int)(unsafe.Pointer(&offs[0]))
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
