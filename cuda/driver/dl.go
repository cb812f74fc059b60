package driver

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// dlErrLen is the room given to dlerror's message.
const dlErrLen = 512

// Library is a shared library opened with dlopen. It is reference counted:
// OpenLibrary once, Close when done; the CUDA libraries are opened with
// RTLD_NODELETE, so Close releases the handle but never unmaps code that
// the library's own threads may still run.
type Library struct {
	// Name is the soname that was found.
	Name string

	mu     sync.Mutex
	handle unsafe.Pointer
}

// OpenLibrary returns the first of names that dlopen can load. The error is a
// *LoadError listing what was tried; hint says what a missing library
// means for the user.
func OpenLibrary(hint string, names ...string) (*Library, error) {
	var reasons []string
	buf := (*C.char)(C.malloc(dlErrLen))
	defer C.free(unsafe.Pointer(buf))
	for _, name := range names {
		cname := C.CString(name)
		h := C.vla_dlopen(cname, buf, dlErrLen)
		C.free(unsafe.Pointer(cname))
		if h != nil {
			return &Library{Name: name, handle: h}, nil
		}
		reasons = append(reasons, C.GoString(buf))
	}
	return nil, &LoadError{Tried: names, Reasons: reasons, Hint: hint}
}

// Lookup returns the address of the first of names that the library
// exports, and that name. A missing symbol is a *SymbolError.
func (l *Library) Lookup(names ...string) (unsafe.Pointer, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return nil, "", fmt.Errorf("cuda: %s is closed", l.Name)
	}
	buf := (*C.char)(C.malloc(dlErrLen))
	defer C.free(unsafe.Pointer(buf))
	for _, name := range names {
		cname := C.CString(name)
		p := C.vla_dlsym(l.handle, cname, buf, dlErrLen)
		C.free(unsafe.Pointer(cname))
		if p != nil {
			return p, name, nil
		}
	}
	return nil, "", &SymbolError{Lib: l.Name, Tried: names}
}

// Close releases the handle. Closing twice is harmless.
func (l *Library) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return nil
	}
	h := l.handle
	l.handle = nil
	if C.vla_dlclose(h) != 0 {
		return fmt.Errorf("cuda: dlclose %s failed", l.Name)
	}
	return nil
}

// symbol is one function a library wrapper needs: where to store its
// address and the names to try, best first.
type symbol struct {
	fn    *unsafe.Pointer
	names []string
}

// sym builds a symbol entry.
func sym(fn *unsafe.Pointer, names ...string) symbol { return symbol{fn, names} }

// resolve looks up every symbol, failing on the first missing one.
func resolve(l *Library, syms []symbol) error {
	for _, s := range syms {
		p, _, err := l.Lookup(s.names...)
		if err != nil {
			return err
		}
		*s.fn = p
	}
	return nil
}

// LoadError says that none of the sonames of a library could be loaded.
// Its message names the first (the one expected) and dlerror's reason for
// it; Tried lists them all.
type LoadError struct {
	Tried   []string // sonames, best first
	Reasons []string // dlerror for each
	Hint    string   // what it means, e.g. "no NVIDIA driver on this machine"
}

func (e *LoadError) Error() string {
	reason := ""
	if len(e.Reasons) > 0 {
		reason = " (" + e.Reasons[0] + ")"
	}
	return fmt.Sprintf("cuda: %s not found: %s%s", e.Tried[0], e.Hint, reason)
}

// SymbolError says that a loaded library lacks a function vlanode needs.
type SymbolError struct {
	Lib   string
	Tried []string
}

func (e *SymbolError) Error() string {
	return fmt.Sprintf("cuda: %s has no %s: the library is too old or not NVIDIA's", e.Lib, strings.Join(e.Tried, " or "))
}
