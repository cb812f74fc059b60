// Package ntstore writes patches of float32 values that are written once
// and not read back soon with non-temporal stores where the CPU has them
// (amd64: SSE's MOVNTPS, part of the baseline). Such stores write whole
// cache lines to memory without first reading them into the cache, and
// leave the cache to the data that is read.
//
// The assembly lives in its own package because a package that uses cgo,
// as vision does for OpenCV and libjpeg, may not have Go assembly files.
package ntstore

import "unsafe"

// Patch writes one row of pixel values, a size × size patch of each of
// channels planes, each patch repeated times, from a planar image:
//
//	dst[((c·times + t)·size + y)·size:][:size] = src[c·planeStride + y·rowStride:][:size]
//
// for c in [0, channels), t in [0, times), y in [0, size). It uses
// non-temporal stores when size is a multiple of 4 and dst 16-byte aligned
// (amd64 only), plain copies otherwise. Call Fence once the rows are
// written, before another goroutine may read them. Patch panics if dst or
// src is too short.
func Patch(dst, src []float32, size, rowStride, planeStride, channels, times int) {
	if size <= 0 || channels <= 0 || times <= 0 {
		return
	}
	dst = dst[:channels*times*size*size]
	_ = src[(channels-1)*planeStride+(size-1)*rowStride:][:size] // bounds of the last span read
	if Available && size%4 == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(dst)))%16 == 0 {
		patchNT(unsafe.SliceData(dst), unsafe.SliceData(src), size, rowStride, planeStride, channels, times)
		return
	}
	o := 0
	for c := range channels {
		for range times {
			for y := range size {
				copy(dst[o:][:size], src[c*planeStride+y*rowStride:][:size])
				o += size
			}
		}
	}
}

// Fence orders the non-temporal stores made before it before the stores
// that follow it (SFENCE on amd64, nothing elsewhere).
func Fence() { fence() }
