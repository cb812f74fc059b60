//go:build !nogocv

package video

import (
	"errors"
	"fmt"
	"image"
	"image/draw"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gocv.io/x/gocv"
)

// Reader decodes a video file's frames in order. It holds OpenCV memory:
// it MUST be released by calling Close.
type Reader struct {
	path string
	info Info
	cap  *gocv.VideoCapture
	bgr  gocv.Mat // the last frame decoded
	next int      // index of the next frame
}

// Probe reads a video file's header and closes it.
func Probe(path string) (Info, error) {
	r, err := Open(path)
	if err != nil {
		return Info{}, err
	}
	defer r.Close()
	return r.info, nil
}

// Open opens a video file with FFmpeg and reads its header. A file FFmpeg
// cannot open, or whose header gives no frame rate, frame count or size,
// is an error naming the file.
func Open(path string) (*Reader, error) {
	// Stat first: OpenCV's own message for a missing file says less.
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("video: %w", err)
	} else if st.IsDir() {
		return nil, fmt.Errorf("video: %s is a folder, not a video file", path)
	}
	c, err := gocv.VideoCaptureFileWithAPI(path, gocv.VideoCaptureFFmpeg)
	if err != nil {
		return nil, fmt.Errorf("video: %s: not a video file FFmpeg can read (truncated, corrupt or an unknown container)", path)
	}
	r := &Reader{path: path, cap: c, bgr: gocv.NewMat()}
	r.info = Info{
		Width:  int(c.Get(gocv.VideoCaptureFrameWidth)),
		Height: int(c.Get(gocv.VideoCaptureFrameHeight)),
		FPS:    c.Get(gocv.VideoCaptureFPS),
		Frames: int(c.Get(gocv.VideoCaptureFrameCount)),
		Codec:  c.CodecString(),
	}
	in := r.info
	switch {
	case in.Width <= 0 || in.Height <= 0:
		err = fmt.Errorf("video: %s: the header gives no frame size (%dx%d)", path, in.Width, in.Height)
	case !(in.FPS > 0) || in.FPS > 1000:
		err = fmt.Errorf("video: %s: the header gives no usable frame rate (%g fps)", path, in.FPS)
	case in.Frames <= 0:
		err = fmt.Errorf("video: %s: the header does not say how many frames the file holds (a raw stream? remux it into .mp4 or .mkv, e.g. ffmpeg -i IN -c copy OUT.mkv)", path)
	case in.Frames > maxFrames:
		err = fmt.Errorf("video: %s: the header claims %d frames, more than the %d a file may hold here (a corrupt header?)", path, in.Frames, maxFrames)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Path returns the file's path.
func (r *Reader) Path() string { return r.path }

// Info returns what the file's header says.
func (r *Reader) Info() Info { return r.info }

// Next decodes the next frame, which RGBA and JPEG then return. After the
// header's number of frames it returns io.EOF; when the file ends or
// cannot be decoded before that, an error naming the file and the frame.
func (r *Reader) Next() (Frame, error) {
	if r.next >= r.info.Frames {
		return Frame{}, io.EOF
	}
	if !r.cap.Read(&r.bgr) || r.bgr.Empty() {
		return Frame{}, fmt.Errorf("video: %s: could not decode frame %d of the %d its header announces (the file is truncated or corrupt)", r.path, r.next+1, r.info.Frames)
	}
	if r.bgr.Cols() != r.info.Width || r.bgr.Rows() != r.info.Height || r.bgr.Type() != gocv.MatTypeCV8UC3 {
		return Frame{}, fmt.Errorf("video: %s: frame %d is %dx%d (type %v), the header says %dx%d colour", r.path, r.next+1, r.bgr.Cols(), r.bgr.Rows(), r.bgr.Type(), r.info.Width, r.info.Height)
	}
	f := Frame{Index: r.next, Time: r.info.FrameTime(r.next)}
	r.next++
	return f, nil
}

// RGBA returns the last frame Next decoded as a new image.
func (r *Reader) RGBA() (*image.RGBA, error) {
	if r.bgr.Empty() {
		return nil, fmt.Errorf("video: %s: no frame decoded yet", r.path)
	}
	rgba := gocv.NewMat()
	defer rgba.Close()
	gocv.CvtColor(r.bgr, &rgba, gocv.ColorBGRToRGBA)
	pix, err := rgba.DataPtrUint8()
	if err != nil {
		return nil, fmt.Errorf("video: %s: %w", r.path, err)
	}
	img := image.NewRGBA(image.Rect(0, 0, rgba.Cols(), rgba.Rows()))
	copy(img.Pix, pix)
	return img, nil
}

// JPEG returns the last frame Next decoded, encoded as a JPEG of the given
// quality (1 to 100) by OpenCV (libjpeg-turbo).
func (r *Reader) JPEG(quality int) ([]byte, error) {
	if r.bgr.Empty() {
		return nil, fmt.Errorf("video: %s: no frame decoded yet", r.path)
	}
	if quality < 1 || quality > 100 {
		return nil, fmt.Errorf("video: JPEG quality %d, want 1 to 100", quality)
	}
	buf, err := gocv.IMEncodeWithParams(gocv.JPEGFileExt, r.bgr, []int{gocv.IMWriteJpegQuality, quality})
	if err != nil {
		return nil, fmt.Errorf("video: %s: encoding frame %d as JPEG: %w", r.path, r.next, err)
	}
	defer buf.Close()
	return append([]byte(nil), buf.GetBytes()...), nil
}

// Close releases the decoder.
func (r *Reader) Close() error {
	r.bgr.Close()
	return r.cap.Close()
}

// Writer encodes frames into a video file. It holds OpenCV memory and the
// file is complete only once closed: it MUST be released by calling Close.
type Writer struct {
	path          string
	width, height int
	w             *gocv.VideoWriter
	bgr           gocv.Mat // the frame being written, BGR
	frames        int
}

// Create creates a video file of width×height frames at fps frames per
// second, MJPG for .avi and .mkv, mp4v for .mp4. The folder must exist.
func Create(path string, fps float64, width, height int) (*Writer, error) {
	ext := strings.ToLower(filepath.Ext(path))
	codec, ok := codecs[ext]
	switch {
	case !ok:
		return nil, fmt.Errorf("video: %s: can write .avi, .mkv (MJPG) and .mp4 (mp4v), not %q", path, ext)
	case !(fps > 0) || width < 1 || height < 1:
		return nil, fmt.Errorf("video: %s: %g fps and %dx%d frames, want a positive rate and size", path, fps, width, height)
	}
	// Check the folder first: OpenCV's message for a missing one is about
	// image sequences.
	if st, err := os.Stat(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("video: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("video: %s: %s is not a folder", path, filepath.Dir(path))
	}
	vw, err := gocv.VideoWriterFile(path, codec, fps, width, height, true)
	if err != nil {
		return nil, fmt.Errorf("video: %s: %w", path, err)
	}
	if !vw.IsOpened() {
		vw.Close()
		return nil, fmt.Errorf("video: %s: OpenCV could not open a %s writer for it", path, codec)
	}
	return &Writer{path: path, width: width, height: height, w: vw, bgr: gocv.NewMat()}, nil
}

// Write appends one frame, which must be the writer's size.
func (w *Writer) Write(img image.Image) error {
	b := img.Bounds()
	if b.Dx() != w.width || b.Dy() != w.height {
		return fmt.Errorf("video: %s: frame %d is %dx%d, the video is %dx%d", w.path, w.frames+1, b.Dx(), b.Dy(), w.width, w.height)
	}
	rgba, ok := img.(*image.RGBA)
	if !ok || rgba.Stride != 4*b.Dx() || b.Min != (image.Point{}) {
		rgba = image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
		draw.Draw(rgba, rgba.Bounds(), img, b.Min, draw.Src)
	}
	m, err := gocv.NewMatFromBytes(w.height, w.width, gocv.MatTypeCV8UC4, rgba.Pix)
	if err != nil {
		return fmt.Errorf("video: %s: %w", w.path, err)
	}
	defer m.Close()
	gocv.CvtColor(m, &w.bgr, gocv.ColorRGBAToBGR)
	if err := w.w.Write(w.bgr); err != nil {
		return fmt.Errorf("video: %s: writing frame %d: %w", w.path, w.frames+1, err)
	}
	w.frames++
	return nil
}

// Close finishes the file and releases the encoder.
func (w *Writer) Close() error {
	err := w.w.Close()
	w.bgr.Close()
	if err != nil {
		return fmt.Errorf("video: %s: %w", w.path, err)
	}
	if st, err := os.Stat(w.path); err != nil {
		return fmt.Errorf("video: %w", err)
	} else if st.Size() == 0 && w.frames > 0 {
		return errors.New("video: " + w.path + ": OpenCV wrote an empty file")
	}
	return nil
}

// Available returns nil: this build has OpenCV. (A build with the tag
// nogocv returns ErrNoOpenCV.)
func Available() error { return nil }
