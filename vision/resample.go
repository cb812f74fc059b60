package vision

import (
	"fmt"
	"math"

	"vlanode/backend"
)

// This file reproduces torchvision's resize of a uint8 image with
// InterpolationMode.BICUBIC and antialias=True on the CPU, which is PyTorch's
// _upsample_bicubic2d_aa uint8 kernel (aten/src/ATen/native/cpu/
// UpSampleKernel.cpp and UpSampleKernelAVXAntialias.h, itself a port of
// Pillow-SIMD): for each axis the Keys cubic (a = -0.5), stretched by the
// downscale factor, is sampled in float64 at every input pixel under its
// support and normalized; the weights are then rounded to int16 at the
// largest precision that keeps the biggest one below 2^15. Each pass is an
// integer dot product plus half an LSB, shifted down and clamped to 0..255.
// The horizontal pass runs first and the vertical one reads its uint8 output.

// cubicA is the Keys cubic's parameter for the antialiased bicubic filter
// (Pillow's, and PyTorch's when antialias=True).
const cubicA = -0.5

// cubicHalfWidth is the cubic's support radius in input pixels at scale 1
// (PyTorch: interp_size × 0.5 with interp_size 4).
const cubicHalfWidth = 2.0

// maxPrecision bounds the fixed-point bits of the weights (PyTorch tries 0..21).
const maxPrecision = 22

// keysCubic is the Keys cubic convolution kernel with a = -0.5, evaluated as
// PyTorch's cubic_convolution1/2 do. The float64 conversions stop the
// compiler from fusing a multiply and an add, which would round differently.
func keysCubic(x float64) float64 {
	x = math.Abs(x)
	const a = cubicA
	switch {
	case x < 1:
		// ((a + 2) * x - (a + 3)) * x * x + 1
		t := float64((a+2)*x) - (a + 3)
		return float64(float64(t*x)*x) + 1
	case x < 2:
		// ((a * x - 5a) * x + 8a) * x - 4a
		t := float64(a*x) - 5*a
		t = float64(t*x) + 8*a
		return float64(t*x) - 4*a
	}
	return 0
}

// axisFilter is the fixed-point filter of one axis of a resize from in to
// out samples: output sample i is
// clamp((2^(precision-1) + Σ_j weights[i·taps+j] · input[start[i]+j]) >> precision).
type axisFilter struct {
	in, out   int
	taps      int     // weights stored for each output sample; count[i] ≤ taps are used
	start     []int32 // [out] first input sample
	count     []int32 // [out] number of input samples
	weights   []int32 // [out × taps] int16 values, zero past count[i]
	precision uint    // fixed-point bits of the weights
}

// newAxisFilter computes the filter of an antialiased bicubic resize from in
// to out samples (PyTorch's _compute_index_ranges_int16_weights with
// align_corners=False and no explicit scale factor).
func newAxisFilter(in, out int) (*axisFilter, error) {
	if in < 1 || out < 1 {
		return nil, fmt.Errorf("vision: resize from %d to %d samples: sizes must be positive", in, out)
	}
	scale := float64(in) / float64(out)
	support, invScale := cubicHalfWidth, 1.0
	if scale >= 1 {
		support, invScale = cubicHalfWidth*scale, 1/scale
	}
	taps := int(math.Ceil(support))*2 + 1
	f := &axisFilter{
		in: in, out: out, taps: taps,
		start:   make([]int32, out),
		count:   make([]int32, out),
		weights: make([]int32, out*taps),
	}
	wf := make([]float64, out*taps)
	wtMax := 0.0
	for i := range out {
		center := scale * (float64(i) + 0.5)
		// Conversions truncate toward zero, as C++'s static_cast<int64_t>.
		lo := max(int(center-support+0.5), 0)
		n := min(int(center+support+0.5), in) - lo
		n = min(max(n, 0), taps)
		w := wf[i*taps : i*taps+n]
		total := 0.0
		for j := range w {
			w[j] = keysCubic((float64(j+lo) - center + 0.5) * invScale)
			total += w[j]
		}
		if total != 0 {
			for j := range w {
				w[j] /= total
				wtMax = max(wtMax, w[j])
			}
		}
		f.start[i], f.count[i] = int32(lo), int32(n)
	}
	var p uint
	for p = 0; p < maxPrecision; p++ {
		if int(0.5+float64(wtMax*float64(int(1)<<(p+1)))) >= 1<<15 {
			break
		}
	}
	if p == 0 {
		return nil, fmt.Errorf("vision: resize from %d to %d samples: no weight precision (largest weight %g)", in, out, wtMax)
	}
	f.precision = p
	for k, w := range wf {
		v := float64(w * float64(int(1)<<p))
		if v < 0 {
			f.weights[k] = int32(-0.5 + v)
		} else {
			f.weights[k] = int32(0.5 + v)
		}
	}
	return f, nil
}

// device is f as a backend's filter, sharing f's tables: a device
// computes the same sums (backend.ResizeFilter).
func (f *axisFilter) device() *backend.ResizeFilter {
	return &backend.ResizeFilter{In: f.in, Out: f.out, Taps: f.taps, Start: f.start, Count: f.count, Weights: f.weights, Precision: f.precision}
}

// clip8 clamps a fixed-point result to a byte.
func clip8(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// horizontal filters rows [y0, y1) of src, an RGB image f.in pixels wide,
// into the same rows of dst, f.out pixels wide. packed (3·f.in values) is
// scratch: two rows are filtered at once, row y in the low 32 bits of an
// int64 and row y+1 in the high ones, so that one multiplication serves
// both. Each lane's sum fits in an int32, so the lanes separate exactly.
func (f *axisFilter) horizontal(dst, src []uint8, packed []int64, y0, y1 int) {
	inRow, outRow := 3*f.in, 3*f.out
	half := int64(1) << (f.precision - 1)
	half2 := half | half<<32
	y := y0
	for ; y+1 < y1; y += 2 {
		a := src[y*inRow : (y+1)*inRow]
		b := src[(y+1)*inRow : (y+2)*inRow]
		b = b[:len(a)]
		pk := packed[:len(a)]
		for i, v := range a {
			pk[i] = int64(v) | int64(b[i])<<32
		}
		out0 := dst[y*outRow : (y+1)*outRow]
		out1 := dst[(y+1)*outRow : (y+2)*outRow]
		for x := range f.out {
			lo, n := int(f.start[x]), int(f.count[x])
			w := f.weights[x*f.taps:][:n]
			px := pk[3*lo:][:3*n]
			r, g, bl := dot3(w, px, half2)
			o0, o1 := out0[3*x:][:3], out1[3*x:][:3]
			o0[0], o1[0] = f.unpack(r)
			o0[1], o1[1] = f.unpack(g)
			o0[2], o1[2] = f.unpack(bl)
		}
	}
	if y < y1 {
		f.horizontalRow(dst[y*outRow:(y+1)*outRow], src[y*inRow:(y+1)*inRow])
	}
}

// dot3 returns init + Σ_j w[j]·px[3j+c] for the three channels c. A
// function of its own keeps the sums in registers.
//
//go:noinline
func dot3(w []int32, px []int64, init int64) (r, g, b int64) {
	r, g, b = init, init, init
	for _, k := range w {
		if len(px) < 3 {
			break // never: len(px) = 3·len(w); this lets the compiler drop bounds checks
		}
		k := int64(k)
		r += px[0] * k
		g += px[1] * k
		b += px[2] * k
		px = px[3:]
	}
	return r, g, b
}

// unpack splits a two-lane sum and turns each lane into a byte.
func (f *axisFilter) unpack(v int64) (lo, hi uint8) {
	low := int64(int32(v))
	return clip8(int32(low >> f.precision)), clip8(int32((v - low) >> 32 >> f.precision))
}

// horizontalRow filters one row: in is f.in RGB pixels, out f.out.
func (f *axisFilter) horizontalRow(out, in []uint8) {
	half := int32(1) << (f.precision - 1)
	for x := range f.out {
		lo, n := int(f.start[x]), int(f.count[x])
		w := f.weights[x*f.taps:][:n]
		px := in[3*lo:][:3*n]
		r, g, b := half, half, half
		for _, k := range w {
			if len(px) < 3 {
				break // never, as in horizontal
			}
			r += int32(px[0]) * k
			g += int32(px[1]) * k
			b += int32(px[2]) * k
			px = px[3:]
		}
		o := out[3*x:][:3]
		o[0], o[1], o[2] = clip8(r>>f.precision), clip8(g>>f.precision), clip8(b>>f.precision)
	}
}

// vertical filters src, an image of f.in rows of rowLen bytes, into rows
// [y0, y1) of dst (f.out rows), using acc (rowLen values) as scratch.
func (f *axisFilter) vertical(dst, src []uint8, rowLen int, acc []int32, y0, y1 int) {
	half := int32(1) << (f.precision - 1)
	acc = acc[:rowLen]
	row := func(i int) []uint8 { return src[i*rowLen : (i+1)*rowLen] }
	for y := y0; y < y1; y++ {
		lo, n := int(f.start[y]), int(f.count[y])
		w := f.weights[y*f.taps:][:n]
		for i := range acc {
			acc[i] = half
		}
		j := 0
		for ; j+1 < n; j += 2 {
			axpy2(acc, row(lo+j), row(lo+j+1), w[j], w[j+1])
		}
		if j < n {
			axpy2(acc, row(lo+j), row(lo+j), w[j], 0)
		}
		out := dst[y*rowLen : (y+1)*rowLen]
		out = out[:len(acc)]
		for i, v := range acc {
			out[i] = clip8(v >> f.precision)
		}
	}
}

// axpy2 adds k0·a + k1·b to acc, element by element.
func axpy2(acc []int32, a, b []uint8, k0, k1 int32) {
	a, b = a[:len(acc)], b[:len(acc)]
	for i := range acc {
		acc[i] += int32(a[i])*k0 + int32(b[i])*k1
	}
}
