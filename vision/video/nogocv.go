//go:build nogocv

package video

import (
	"fmt"
	"image"
)

// Reader decodes a video file's frames; a build without OpenCV has none
// (Open returns ErrNoOpenCV).
type Reader struct{ path string }

// Probe returns ErrNoOpenCV: this build has no OpenCV.
func Probe(path string) (Info, error) { return Info{}, fmt.Errorf("video: %s: %w", path, ErrNoOpenCV) }

// Open returns ErrNoOpenCV: this build has no OpenCV.
func Open(path string) (*Reader, error) { return nil, fmt.Errorf("video: %s: %w", path, ErrNoOpenCV) }

// Path returns the file's path.
func (r *Reader) Path() string { return r.path }

// Info returns nothing: no Reader is ever opened without OpenCV.
func (r *Reader) Info() Info { return Info{} }

// Next returns ErrNoOpenCV.
func (r *Reader) Next() (Frame, error) { return Frame{}, ErrNoOpenCV }

// RGBA returns ErrNoOpenCV.
func (r *Reader) RGBA() (*image.RGBA, error) { return nil, ErrNoOpenCV }

// JPEG returns ErrNoOpenCV.
func (r *Reader) JPEG(int) ([]byte, error) { return nil, ErrNoOpenCV }

// Close does nothing.
func (r *Reader) Close() error { return nil }

// Writer encodes frames into a video file; a build without OpenCV has none
// (Create returns ErrNoOpenCV).
type Writer struct{}

// Create returns ErrNoOpenCV: this build has no OpenCV.
func Create(path string, _ float64, _, _ int) (*Writer, error) {
	return nil, fmt.Errorf("video: %s: %w", path, ErrNoOpenCV)
}

// Write returns ErrNoOpenCV.
func (w *Writer) Write(image.Image) error { return ErrNoOpenCV }

// Close does nothing.
func (w *Writer) Close() error { return nil }

// Available returns ErrNoOpenCV: this build has no OpenCV.
func Available() error { return ErrNoOpenCV }
