package ntstore

// Available reports whether Patch can use non-temporal stores.
const Available = true

// patchNT is Patch with MOVNTPS, for size a multiple of 4 and dst 16-byte
// aligned; Patch has checked the lengths. The strides are in values.
//
//go:noescape
func patchNT(dst, src *float32, size, rowStride, planeStride, channels, times int)

// fence is SFENCE.
func fence()
