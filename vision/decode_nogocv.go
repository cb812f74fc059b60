//go:build nogocv

package vision

import "vlanode/msgs"

// decodeCompressed refuses JPEG and PNG: this binary has no OpenCV.
func decodeCompressed(f *msgs.Frame, _ *Image) (frameView, error) {
	return frameView{release: noRelease}, frameError(f, ErrNoOpenCV, "cannot decode %s", f.Encoding)
}
