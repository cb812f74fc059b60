//go:build nogocv

package vision

// A build without OpenCV links libjpeg-turbo statically, so that its
// binary (the GPU machine's) needs no libjpeg there.

// #cgo LDFLAGS: -l:libjpeg.a
import "C"
