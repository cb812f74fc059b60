//go:build !amd64

package ntstore

// Available reports whether Patch can use non-temporal stores: not on this
// architecture.
const Available = false

// patchNT is never called without non-temporal stores.
func patchNT(dst, src *float32, size, rowStride, planeStride, channels, times int) {
	panic("ntstore: patchNT without non-temporal stores")
}

// fence does nothing: Patch used plain stores.
func fence() {}
