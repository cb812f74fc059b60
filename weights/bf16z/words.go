package bf16z

import (
	"encoding/binary"
	"unsafe"
)

// littleEndian says whether this machine stores integers as the format
// does: then 16-bit values are read and written in place (u16s, bytesOf).
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// u16s views b as 16-bit values where that reads them as the format means
// (a little-endian machine, b 2-byte aligned and of even length); nil
// otherwise.
func u16s(b []byte) []uint16 {
	p := unsafe.SliceData(b)
	if !littleEndian || len(b) == 0 || len(b)%2 != 0 || uintptr(unsafe.Pointer(p))%2 != 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(p)), len(b)/2)
}

// readU16s reads the little-endian 16-bit values of b into dst, as many
// as both hold, in place where the machine allows.
func readU16s(dst []uint16, b []byte) {
	if v := u16s(b); v != nil {
		copy(dst, v)
		return
	}
	for i := range min(len(dst), len(b)/2) {
		dst[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
}

// writeU16s writes v into b little-endian (2·len(v) bytes).
func writeU16s(b []byte, v []uint16) {
	if littleEndian && len(v) > 0 {
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 2*len(v)))
		return
	}
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
}
