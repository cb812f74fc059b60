package driver

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestErrorMessage(t *testing.T) {
	e := &Error{Lib: LibCUDA, Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Text: "out of memory"}
	if got, want := e.Error(), "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	wrapped := errors.Join(errors.New("context"), e)
	if !errors.Is(wrapped, &Error{Lib: LibCUDA, Code: ErrOutOfMemory}) {
		t.Error("errors.Is does not match the status")
	}
	if errors.Is(wrapped, &Error{Lib: LibCUBLAS, Code: ErrOutOfMemory}) {
		t.Error("errors.Is matches another library's status")
	}
	var de *Error
	if !errors.As(wrapped, &de) || de.Call != "cuMemAlloc_v2" {
		t.Error("errors.As does not find the *Error")
	}
}

func TestStatusName(t *testing.T) {
	for _, c := range []struct {
		lib  Lib
		code int
		want string
	}{
		{LibCUDA, 2, "CUDA_ERROR_OUT_OF_MEMORY"},
		{LibCUDA, 100, "CUDA_ERROR_NO_DEVICE"},
		{LibCUBLAS, 13, "CUBLAS_STATUS_EXECUTION_FAILED"},
		{LibNVRTC, 6, "NVRTC_ERROR_COMPILATION"},
		{LibCUDA, 12345, "cuda status 12345"},
	} {
		if got := StatusName(c.lib, c.code); got != c.want {
			t.Errorf("StatusName(%s, %d) = %q, want %q", c.lib, c.code, got, c.want)
		}
	}
}

func TestLoadErrorMessage(t *testing.T) {
	_, err := OpenLibrary("no such thing on this machine", "libvlanode-missing.so.1", "libvlanode-missing.so.0")
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("OpenLibrary of a missing library: %v, want a *LoadError", err)
	}
	msg := err.Error()
	if len(le.Tried) != 2 || len(le.Reasons) != 2 {
		t.Errorf("LoadError %+v does not list both names", le)
	}
	for _, want := range []string{"cuda: libvlanode-missing.so.1 not found: no such thing on this machine (", "libvlanode-missing.so.1: cannot open shared object file"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("message %q is not one line", msg)
	}
}

// TestLibraryLookup exercises dlopen/dlsym on the C library, which every
// machine has.
func TestLibraryLookup(t *testing.T) {
	lib, err := OpenLibrary("", "libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	if p, name, err := lib.Lookup("strlen_vlanode_missing", "strlen"); err != nil || p == nil || name != "strlen" {
		t.Errorf("Lookup falls back to strlen: %v %v %q", p, err, name)
	}
	_, _, err = lib.Lookup("vlanode_missing_symbol")
	var se *SymbolError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "libc.so.6 has no vlanode_missing_symbol") {
		t.Errorf("missing symbol: %v", err)
	}
	if err := lib.Close(); err != nil {
		t.Error(err)
	}
	if err := lib.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, _, err := lib.Lookup("strlen"); err == nil {
		t.Error("Lookup after Close succeeded")
	}
}

// TestOpenDriverWithoutGPU checks the message a machine without a driver
// gets. On a GPU machine the driver loads and there is nothing to check.
func TestOpenDriverWithoutGPU(t *testing.T) {
	d, err := OpenDriver()
	missingLibrary(t, d, err, "OpenDriver", "libcuda.so.1", hintDriver)
}

// missingLibrary checks the error of opening a library that this machine
// lacks (its message names soname and carries hint); where the library
// loaded (lib, err nil), it closes it and skips.
func missingLibrary[L interface{ Close() error }](t *testing.T, lib L, err error, open, soname, hint string) {
	t.Helper()
	if err == nil {
		lib.Close()
		t.Skipf("%s is present: the missing-library message cannot be checked here", soname)
	}
	if !strings.HasPrefix(err.Error(), "cuda: "+soname+" not found") || !strings.Contains(err.Error(), hint) {
		t.Errorf("%s without %s: %q", open, soname, err)
	}
}

func TestArgsLayout(t *testing.T) {
	a := NewArgs()
	a.I32(7).Ptr(0x1000).F32(1.5).Struct([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4).U64(9)
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	buf, offs := a.raw()
	wantOffs := []int32{0, 8, 16, 20, 32}
	if len(offs) != len(wantOffs) {
		t.Fatalf("offsets %v, want %v", offs, wantOffs)
	}
	for i := range offs {
		if offs[i] != wantOffs[i] {
			t.Fatalf("offsets %v, want %v", offs, wantOffs)
		}
	}
	ne := binary.NativeEndian
	if ne.Uint32(buf[0:]) != 7 || ne.Uint64(buf[8:]) != 0x1000 || math.Float32frombits(ne.Uint32(buf[16:])) != 1.5 ||
		buf[20] != 1 || buf[31] != 12 || ne.Uint64(buf[32:]) != 9 {
		t.Errorf("values laid out wrong: % x", buf[:40])
	}
	a.Reset()
	if a.Len() != 0 || a.Err() != nil {
		t.Error("Reset does not empty")
	}
	a.Struct(make([]byte, MaxArgBytes-4), 4).U64(1)
	if a.Err() == nil {
		t.Error("overflowing the parameter space is not an error")
	}
	a.Reset()
	for i := 0; i <= maxKernelArgs; i++ {
		a.I32(int32(i))
	}
	if a.Err() == nil {
		t.Error("too many parameters is not an error")
	}
}

func TestOpenBLASLtWithoutLibrary(t *testing.T) {
	b, err := OpenBLASLt()
	missingLibrary(t, b, err, "OpenBLASLt", "libcublasLt.so.13", hintBLASLt)
}

// TestLtFunctionNames checks that every slot of the C function table has
// its library name (a slot left empty would be called as nil).
func TestLtFunctionNames(t *testing.T) {
	for i, n := range ltNames {
		if !strings.HasPrefix(n, "cublasLt") {
			t.Errorf("slot %d of the cuBLASLt table is %q", i, n)
		}
	}
}

func TestFormatUUID(t *testing.T) {
	b := [16]byte{0x5a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7, 0xe8, 0xf9}
	if got, want := FormatUUID(b), "GPU-5a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"; got != want {
		t.Fatalf("FormatUUID = %q, want %q", got, want)
	}
}
