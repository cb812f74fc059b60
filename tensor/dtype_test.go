package tensor

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDType(t *testing.T) {
	for _, d := range []DType{F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool} {
		got, err := ParseDType(d.String())
		require.NoError(t, err)
		assert.Equal(t, d, got)
	}
	_, err := ParseDType("F8_E4M3")
	assert.ErrorContains(t, err, `"F8_E4M3"`)
	assert.Equal(t, 2, BF16.Size())
	assert.Equal(t, 8, I64.Size())
}

func TestBF16Rounding(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81}, // above tie
		{float32(math.Inf(1)), 0x7f80},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, F32ToBF16(c.in), "%v", c.in)
	}
	assert.True(t, math.IsNaN(float64(BF16ToF32(F32ToBF16(float32(math.NaN()))))))
	for _, v := range []float32{0, 1, -3.5, 1e-20, 6e4} {
		b := F32ToBF16(v)
		assert.Equal(t, b, F32ToBF16(BF16ToF32(b)), "round trip of %v", v)
	}
}

func TestF16(t *testing.T) {
	cases := []struct {
		bits uint16
		f    float32
	}{
		{0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0001, 5.960464477539063e-08},
		{0x0400, 6.103515625e-05}, {0x7c00, float32(math.Inf(1))}, {0x8000, float32(math.Copysign(0, -1))},
	}
	for _, c := range cases {
		assert.Equal(t, c.f, F16ToF32(c.bits), "%#04x", c.bits)
		assert.Equal(t, c.bits, F32ToF16(c.f), "%v", c.f)
	}
	// Every finite half survives a round trip through float32.
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		require.Equal(t, uint16(h), F32ToF16(f), "%#04x", h)
	}
	assert.Equal(t, uint16(0x7c00), F32ToF16(70000), "overflow goes to inf")
	assert.Equal(t, uint16(0x3c00), F32ToF16(1+1.0/4096), "tie rounds to even")
}

func TestToFromF32(t *testing.T) {
	vals := []float32{0, 1.5, -2.25, 1024}
	for _, dt := range []DType{F32, F16, BF16} {
		raw, err := FromF32(dt, vals)
		require.NoError(t, err)
		back := make([]float32, len(vals))
		require.NoError(t, ToF32(back, dt, raw))
		assert.Equal(t, vals, back, dt.String())
	}
	_, err := FromF32(I64, vals)
	assert.Error(t, err)
	assert.Error(t, ToF32(make([]float32, 1), I32, make([]byte, 4)))
	assert.Error(t, ToF32(make([]float32, 1), F32, make([]byte, 8)))
}
