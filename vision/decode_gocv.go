//go:build !nogocv

package vision

import (
	"errors"

	"gocv.io/x/gocv"

	"vlanode/msgs"
)

// decodeCompressed decodes a JPEG or PNG frame. A JPEG goes straight into
// scratch as RGB through libjpeg (decodeJPEG); a PNG, and the rare JPEG
// decodeJPEG leaves to OpenCV, stays in OpenCV's BGR buffer, valid until
// release.
func decodeCompressed(f *msgs.Frame, scratch *Image) (frameView, error) {
	if f.Encoding == msgs.EncodingJPEG {
		err := decodeJPEG(scratch, f)
		if err == nil {
			return frameView{img: *scratch, release: noRelease}, nil
		}
		if !errors.As(err, new(errJPEGUnsupported)) {
			return frameView{release: noRelease}, err
		}
	}
	return decodeOpenCV(f)
}

// decodeOpenCV decodes a JPEG or PNG frame with OpenCV's imdecode. The
// view's pixels are OpenCV's BGR buffer, valid until release.
func decodeOpenCV(f *msgs.Frame) (frameView, error) {
	fail := frameView{release: noRelease}
	m, err := gocv.IMDecode(f.Data, gocv.IMReadColor|gocv.IMReadIgnoreOrientation)
	if err != nil {
		return fail, frameError(f, ErrInvalidFrame, "OpenCV: %v", err)
	}
	release := func() { m.Close() }
	if m.Empty() {
		release()
		return fail, frameError(f, ErrInvalidFrame, "corrupt or truncated image (OpenCV could not decode %d bytes)", len(f.Data))
	}
	if w, h := m.Cols(), m.Rows(); w != f.Width || h != f.Height {
		release()
		return fail, frameError(f, ErrInvalidFrame, "decoded size %d×%d differs from the declared %d×%d", w, h, f.Width, f.Height)
	}
	if typ, cont := m.Type(), m.IsContinuous(); typ != gocv.MatTypeCV8UC3 || !cont {
		release()
		return fail, frameError(f, ErrInvalidFrame, "OpenCV decoded Mat type %v (continuous %v), want continuous 8UC3", typ, cont)
	}
	pix, err := m.DataPtrUint8()
	if err != nil || len(pix) != 3*f.Width*f.Height {
		release()
		return fail, frameError(f, ErrInvalidFrame, "OpenCV returned %d bytes for %d×%d BGR (%v)", len(pix), f.Width, f.Height, err)
	}
	return frameView{img: Image{Width: f.Width, Height: f.Height, Pix: pix}, bgr: true, release: release}, nil
}
