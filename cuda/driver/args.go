package driver

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// Limits of one kernel launch's parameters. maxKernelArgs matches
// VLA_MAX_KERNEL_ARGS in shim.h; MaxArgBytes is the classic 4 KiB limit of
// cuLaunchKernel's parameter space.
const (
	maxKernelArgs = 64
	MaxArgBytes   = 4096
)

// Args holds the parameter values of one kernel launch, in plain memory
// without Go pointers (cgo may not pass arrays of Go pointers to C); the C
// side builds the void*[] that cuLaunchKernel wants. Add parameters in the
// kernel's order. Reset reuses it.
//
// Allocate an Args on its own (NewArgs), never inside a struct that holds
// Go pointers: cgo checks the whole Go object behind the pointer that
// Launch passes, and finding a Go pointer there it panics.
type Args struct {
	words    [MaxArgBytes / 8]uint64 // values, 8-byte aligned storage
	used     int                     // bytes used in words
	offs     [maxKernelArgs]int32    // offset of each value
	n        int                     // parameter count
	overflow bool                    // a value did not fit
}

// NewArgs returns an empty Args of its own.
func NewArgs() *Args { return new(Args) }

// Reset empties a for another launch.
func (a *Args) Reset() { a.used, a.n, a.overflow = 0, 0, false }

// Len is the number of parameters added.
func (a *Args) Len() int { return a.n }

// Err reports an overflow of the parameter space.
func (a *Args) Err() error {
	if a.overflow {
		return fmt.Errorf("cuda: kernel parameters exceed %d values or %d bytes", maxKernelArgs, MaxArgBytes)
	}
	return nil
}

// bytes is the value storage as bytes.
func (a *Args) bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&a.words[0])), MaxArgBytes)
}

// slot reserves size bytes aligned to align and returns them.
func (a *Args) slot(size, align int) []byte {
	if a.overflow {
		return nil
	}
	off := (a.used + align - 1) &^ (align - 1)
	if a.n == maxKernelArgs || off+size > MaxArgBytes {
		a.overflow = true
		return nil
	}
	a.offs[a.n] = int32(off)
	a.n++
	a.used = off + size
	return a.bytes()[off : off+size]
}

// Ptr adds a device pointer (a T* parameter).
func (a *Args) Ptr(p DevicePtr) *Args { return a.U64(uint64(p)) }

// U64 adds an unsigned long long.
func (a *Args) U64(v uint64) *Args {
	if b := a.slot(8, 8); b != nil {
		binary.NativeEndian.PutUint64(b, v)
	}
	return a
}

// I32 adds an int.
func (a *Args) I32(v int32) *Args {
	if b := a.slot(4, 4); b != nil {
		binary.NativeEndian.PutUint32(b, uint32(v))
	}
	return a
}

// U32 adds an unsigned int.
func (a *Args) U32(v uint32) *Args {
	if b := a.slot(4, 4); b != nil {
		binary.NativeEndian.PutUint32(b, v)
	}
	return a
}

// F32 adds a float.
func (a *Args) F32(v float32) *Args {
	if b := a.slot(4, 4); b != nil {
		binary.NativeEndian.PutUint32(b, math.Float32bits(v))
	}
	return a
}

// Struct adds a struct passed by value, given as its bytes in the C
// layout, aligned to align.
func (a *Args) Struct(v []byte, align int) *Args {
	if b := a.slot(len(v), align); b != nil {
		copy(b, v)
	}
	return a
}

// raw returns the value storage and the offsets of the parameters.
func (a *Args) raw() ([]byte, []int32) { return a.bytes(), a.offs[:a.n] }
