package driver

// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// hintNVRTC says what a missing libnvrtc means.
const hintNVRTC = "NVRTC of the CUDA 13 (or 12) toolkit is not installed or not on the loader path (ldconfig, LD_LIBRARY_PATH); it compiles vlanode's kernels"

// NVRTC is libnvrtc, the run-time CUDA C++ compiler.
type NVRTC struct {
	lib *Library
	f   struct {
		version, errorString, create, compile, logSize, log, cubinSize, cubin, destroy,
		numArchs, archs unsafe.Pointer // optional
	}
}

// OpenNVRTC loads libnvrtc and resolves the functions vlanode uses.
func OpenNVRTC() (*NVRTC, error) {
	lib, err := OpenLibrary(hintNVRTC, "libnvrtc.so.13", "libnvrtc.so.12")
	if err != nil {
		return nil, err
	}
	n := &NVRTC{lib: lib}
	f := &n.f
	err = resolve(lib, []symbol{
		sym(&f.version, "nvrtcVersion"),
		sym(&f.errorString, "nvrtcGetErrorString"),
		sym(&f.create, "nvrtcCreateProgram"),
		sym(&f.compile, "nvrtcCompileProgram"),
		sym(&f.logSize, "nvrtcGetProgramLogSize"),
		sym(&f.log, "nvrtcGetProgramLog"),
		sym(&f.cubinSize, "nvrtcGetCUBINSize"),
		sym(&f.cubin, "nvrtcGetCUBIN"),
		sym(&f.destroy, "nvrtcDestroyProgram"),
	})
	if err != nil {
		lib.Close()
		return nil, err
	}
	f.numArchs, _, _ = lib.Lookup("nvrtcGetNumSupportedArchs")
	f.archs, _, _ = lib.Lookup("nvrtcGetSupportedArchs")
	return n, nil
}

// Close releases the library handle.
func (n *NVRTC) Close() error { return n.lib.Close() }

// LibraryName is the soname that was loaded.
func (n *NVRTC) LibraryName() string { return n.lib.Name }

// check turns an nvrtcResult into an *Error naming call, or nil.
func (n *NVRTC) check(call string, s C.vla_status) error {
	if s == 0 {
		return nil
	}
	e := &Error{Lib: LibNVRTC, Call: call, Code: int(s), Name: StatusName(LibNVRTC, int(s))}
	if p := C.vla_nvrtcGetErrorString(n.f.errorString, s); p != nil {
		e.Name = C.GoString(p)
	}
	return e
}

// Version is NVRTC's major and minor version.
func (n *NVRTC) Version() (major, minor int, err error) {
	var ma, mi C.int
	err = n.check("nvrtcVersion", C.vla_nvrtcVersion(n.f.version, &ma, &mi))
	return int(ma), int(mi), err
}

// SupportedArchs lists the compute capabilities NVRTC compiles for, as
// major*10+minor (90 for sm_90); nil when this NVRTC cannot say.
func (n *NVRTC) SupportedArchs() ([]int, error) {
	if n.f.numArchs == nil || n.f.archs == nil {
		return nil, nil
	}
	var cnt C.int
	if err := n.check("nvrtcGetNumSupportedArchs", C.vla_nvrtcGetNumSupportedArchs(n.f.numArchs, &cnt)); err != nil {
		return nil, err
	}
	if cnt <= 0 {
		return nil, nil
	}
	archs := make([]C.int, cnt)
	if err := n.check("nvrtcGetSupportedArchs", C.vla_nvrtcGetSupportedArchs(n.f.archs, &archs[0])); err != nil {
		return nil, err
	}
	out := make([]int, cnt)
	for i, a := range archs {
		out[i] = int(a)
	}
	return out, nil
}

// CompileError is a failed compilation, with NVRTC's log.
type CompileError struct {
	Name    string   // the program name
	Options []string // the options given
	Log     string   // the compiler's messages
	Err     error    // the failed call
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("nvrtc: compiling %s (%s): %v\n%s", e.Name, strings.Join(e.Options, " "), e.Err, strings.TrimSpace(e.Log))
}

func (e *CompileError) Unwrap() error { return e.Err }

// CompileCUBIN compiles CUDA C++ source to a CUBIN for the architecture
// that opts name (--gpu-architecture=sm_XY). log holds the compiler's
// warnings, if any; a failure is a *CompileError.
func (n *NVRTC) CompileCUBIN(src, name string, opts []string) (cubin []byte, log string, err error) {
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog C.uintptr_t
	if err := n.check("nvrtcCreateProgram", C.vla_nvrtcCreateProgram(n.f.create, &prog, csrc, cname)); err != nil {
		return nil, "", err
	}
	defer C.vla_nvrtcDestroyProgram(n.f.destroy, &prog)

	copts := cStrings(opts)
	defer freeCStrings(copts)
	var optv **C.char
	if len(copts) > 0 {
		optv = &copts[0]
	}
	cerr := n.check("nvrtcCompileProgram", C.vla_nvrtcCompileProgram(n.f.compile, prog, C.int(len(opts)), optv))
	log, lerr := n.programLog(prog)
	if cerr != nil {
		return nil, log, &CompileError{Name: name, Options: opts, Log: log, Err: cerr}
	}
	if lerr != nil {
		return nil, "", lerr
	}
	var size C.size_t
	if err := n.check("nvrtcGetCUBINSize", C.vla_nvrtcGetCUBINSize(n.f.cubinSize, prog, &size)); err != nil {
		return nil, log, err
	}
	if size == 0 {
		return nil, log, fmt.Errorf("nvrtc: %s produced no CUBIN (is --gpu-architecture a real sm_XY?)", name)
	}
	cubin = make([]byte, size)
	if err := n.check("nvrtcGetCUBIN", C.vla_nvrtcGetCUBIN(n.f.cubin, prog, (*C.char)(unsafe.Pointer(&cubin[0])))); err != nil {
		return nil, log, err
	}
	return cubin, log, nil
}

// programLog returns the compiler's messages for prog.
func (n *NVRTC) programLog(prog C.uintptr_t) (string, error) {
	var size C.size_t
	if err := n.check("nvrtcGetProgramLogSize", C.vla_nvrtcGetProgramLogSize(n.f.logSize, prog, &size)); err != nil {
		return "", err
	}
	if size <= 1 {
		return "", nil
	}
	buf := make([]byte, size)
	if err := n.check("nvrtcGetProgramLog", C.vla_nvrtcGetProgramLog(n.f.log, prog, (*C.char)(unsafe.Pointer(&buf[0])))); err != nil {
		return "", err
	}
	return strings.TrimRight(string(buf), "\x00"), nil
}

// cStrings copies ss into a C array of C strings; free with freeCStrings.
func cStrings(ss []string) []*C.char {
	if len(ss) == 0 {
		return nil
	}
	arr := unsafe.Slice((**C.char)(C.malloc(C.size_t(len(ss))*C.size_t(unsafe.Sizeof((*C.char)(nil))))), len(ss))
	for i, s := range ss {
		arr[i] = C.CString(s)
	}
	return arr
}

// freeCStrings releases an array from cStrings.
func freeCStrings(arr []*C.char) {
	if len(arr) == 0 {
		return
	}
	for _, p := range arr {
		C.free(unsafe.Pointer(p))
	}
	C.free(unsafe.Pointer(&arr[0]))
}
