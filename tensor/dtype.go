// Package tensor holds the element types and host-side conversions shared by
// the checkpoint loader, the compute backends and the model code.
package tensor

import (
	"fmt"
	"math"
)

// DType is the element type of a tensor. The names are those of the
// safetensors format.
type DType int

// Element types understood by vlanode.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	F64
	I64
	I32
	I16
	I8
	U8
	Bool
)

var dtypeNames = [...]string{
	Invalid: "invalid",
	F32:     "F32",
	F16:     "F16",
	BF16:    "BF16",
	F64:     "F64",
	I64:     "I64",
	I32:     "I32",
	I16:     "I16",
	I8:      "I8",
	U8:      "U8",
	Bool:    "BOOL",
}

var dtypeSizes = [...]int{
	Invalid: 0, F32: 4, F16: 2, BF16: 2, F64: 8, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, Bool: 1,
}

// String returns the safetensors name of the type.
func (d DType) String() string {
	if d < 0 || int(d) >= len(dtypeNames) {
		return fmt.Sprintf("DType(%d)", int(d))
	}
	return dtypeNames[d]
}

// Size is the size of one element in bytes (0 for Invalid).
func (d DType) Size() int {
	if d < 0 || int(d) >= len(dtypeSizes) {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether the type is a floating-point type.
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 || d == F64 }

// ParseDType maps a safetensors dtype name to a DType.
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if i != int(Invalid) && n == s {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unsupported dtype %q", s)
}

// NumElements is the product of the dimensions of shape (1 for a scalar).
func NumElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// BF16ToF32 widens a bfloat16 bit pattern to float32 exactly.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds a float32 to the nearest bfloat16, ties to even, as
// PyTorch does. NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToF32 widens an IEEE half-precision bit pattern to float32 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

// F32ToF16 rounds a float32 to the nearest IEEE half, ties to even.
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	mant := u & 0x7fffff
	if exp == 0xff { // inf / NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is correct (up to inf)
	}
	return sign | uint16(r)
}

// ToF32 decodes little-endian elements of a floating-point type into dst,
// which must hold len(src)/dt.Size() values.
func ToF32(dst []float32, dt DType, src []byte) error {
	n := len(src) / max(dt.Size(), 1)
	if len(dst) < n {
		return fmt.Errorf("tensor: ToF32: destination holds %d values, source %d", len(dst), n)
	}
	switch dt {
	case F32:
		for i := 0; i < n; i++ {
			dst[i] = math.Float32frombits(le32(src[4*i:]))
		}
	case BF16:
		for i := 0; i < n; i++ {
			dst[i] = BF16ToF32(le16(src[2*i:]))
		}
	case F16:
		for i := 0; i < n; i++ {
			dst[i] = F16ToF32(le16(src[2*i:]))
		}
	case F64:
		for i := 0; i < n; i++ {
			dst[i] = float32(math.Float64frombits(uint64(le32(src[8*i:])) | uint64(le32(src[8*i+4:]))<<32))
		}
	default:
		return fmt.Errorf("tensor: ToF32: %v is not a floating-point type", dt)
	}
	return nil
}

// FromF32 encodes src as little-endian elements of dt (F32, BF16 or F16).
func FromF32(dt DType, src []float32) ([]byte, error) {
	out := make([]byte, len(src)*dt.Size())
	switch dt {
	case F32:
		for i, v := range src {
			put32(out[4*i:], math.Float32bits(v))
		}
	case BF16:
		for i, v := range src {
			put16(out[2*i:], F32ToBF16(v))
		}
	case F16:
		for i, v := range src {
			put16(out[2*i:], F32ToF16(v))
		}
	default:
		return nil, fmt.Errorf("tensor: FromF32: cannot encode %v", dt)
	}
	return out, nil
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func put16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }
func put32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
