//go:build !nogocv

package vision

// The default build links the libjpeg that OpenCV links (one copy of the
// library in the process).

// #cgo pkg-config: libjpeg
import "C"
