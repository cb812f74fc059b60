package video

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"time"
)

// ErrNoOpenCV is returned by Open, Probe and Create in a build without
// OpenCV (tag nogocv).
var ErrNoOpenCV = errors.New("this vlanode was built without OpenCV (build tag nogocv), which video files need (make build builds with it)")

// exts are the file name extensions taken for video files.
var exts = []string{".avi", ".mkv", ".mp4", ".mov", ".m4v", ".webm", ".ts", ".h264", ".h265"}

// IsVideo reports whether path names a video file by its extension
// (case-insensitive): .avi, .mkv, .mp4, .mov, .m4v, .webm, .ts, .h264,
// .h265.
func IsVideo(path string) bool {
	ext := strings.ToLower(filepath.Ext(path))
	for _, e := range exts {
		if ext == e {
			return true
		}
	}
	return false
}

// maxFrames bounds the frame count a header may claim (155 hours at
// 30 fps): replay plans every frame before it decodes any, and a corrupt
// header must not make it allocate without limit.
const maxFrames = 1 << 24

// codecs are the fourcc codes Create writes each extension with.
var codecs = map[string]string{".avi": "MJPG", ".mkv": "MJPG", ".mp4": "mp4v"}

// Info is what a video file's header says.
type Info struct {
	Width, Height int
	FPS           float64 // frames per second
	Frames        int     // number of frames
	Codec         string  // fourcc, e.g. MJPG
}

// FrameTime returns frame i's time from the first frame, i / FPS, to the
// nearest nanosecond.
func (in Info) FrameTime(i int) time.Duration {
	return time.Duration(math.Round(float64(i) * 1e9 / in.FPS))
}

// Duration returns the time the frames cover: Frames / FPS.
func (in Info) Duration() time.Duration { return in.FrameTime(in.Frames) }

// Frame is a decoded frame's place in its video.
type Frame struct {
	Index int           // 0 for the first frame
	Time  time.Duration // Index / FPS
}
