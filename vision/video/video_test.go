//go:build !nogocv

package video

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
	"vlanode/vision"
)

// testFrame is frame i of a test video: smooth gradients and a bright
// square that moves 3 pixels a frame, so that each frame differs from its
// neighbours by much more than a codec's error.
func testFrame(i, w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			p := img.Pix[4*(y*w+x):]
			p[0] = uint8(40 + 150*x/w)
			p[1] = uint8(30 + 160*y/h)
			p[2] = uint8(60 + 8*i)
			p[3] = 255
			if x >= 3*i%w && x < 3*i%w+12 && y >= h/4 && y < h/4+12 {
				p[0], p[1], p[2] = 240, 240, 230
			}
		}
	}
	return img
}

// meanAbsDiff is the mean absolute difference of a and b's RGB values.
func meanAbsDiff(a, b *image.RGBA) float64 {
	var sum float64
	for i := range a.Pix {
		if i%4 == 3 {
			continue
		}
		sum += math.Abs(float64(a.Pix[i]) - float64(b.Pix[i]))
	}
	return sum / float64(len(a.Pix)/4*3)
}

// writeVideo writes n test frames of w×h at fps to path.
func writeVideo(t *testing.T, path string, n, w, h int, fps float64) []*image.RGBA {
	t.Helper()
	vw, err := Create(path, fps, w, h)
	require.NoError(t, err)
	var frames []*image.RGBA
	for i := range n {
		img := testFrame(i, w, h)
		require.NoError(t, vw.Write(img))
		frames = append(frames, img)
	}
	require.NoError(t, vw.Close())
	return frames
}

// Codec tolerances, as the mean absolute error per RGB value (0-255) of a
// decoded frame against the frame written: MJPG is a JPEG a frame, mp4v an
// MPEG-4 Part 2 stream, both at the encoders' default quality. Measured on the test frames (OpenCV 4.6,
// FFmpeg 5.1): MJPG 1.27-1.39, mp4v 2.23-2.72 (the first frame, an
// I-frame, the best).
var tolerance = map[string]float64{".avi": 2, ".mkv": 2, ".mp4": 4}

// TestRoundTrip writes a video with Writer and reads it back with Reader:
// the header, every frame's index and time, and its pixels within the
// codec's tolerance, each frame nearer the one written at its place than
// to its neighbours (a dropped or repeated frame fails).
func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		ext   string
		fps   float64
		codec string
	}{{".avi", 10, "MJPG"}, {".mkv", 30, "mjpe"}, {".mp4", 30, "mp4v"}} {
		t.Run(c.ext, func(t *testing.T) {
			const n, w, h = 12, 96, 64
			path := filepath.Join(t.TempDir(), "front"+c.ext)
			written := writeVideo(t, path, n, w, h, c.fps)

			info, err := Probe(path)
			require.NoError(t, err)
			assert.Equal(t, Info{Width: w, Height: h, FPS: c.fps, Frames: n, Codec: c.codec}, info)

			r, err := Open(path)
			require.NoError(t, err)
			defer r.Close()
			for i := range n {
				f, err := r.Next()
				require.NoError(t, err, "frame %d", i)
				assert.Equal(t, i, f.Index)
				assert.Equal(t, time.Duration(math.Round(float64(i)*1e9/c.fps)), f.Time)
				got, err := r.RGBA()
				require.NoError(t, err)
				d := meanAbsDiff(got, written[i])
				t.Logf("frame %d: mean abs error %.2f", i, d)
				assert.Less(t, d, tolerance[c.ext], "frame %d", i)
				for _, k := range []int{i - 1, i + 1} {
					if k >= 0 && k < n {
						assert.Less(t, d, meanAbsDiff(got, written[k]), "frame %d is nearer to frame %d", i, k)
					}
				}

				// JPEG: the same frame, through the node's decoder.
				data, err := r.JPEG(95)
				require.NoError(t, err)
				img, err := vision.Decode(&msgs.Frame{Encoding: msgs.EncodingJPEG, Width: w, Height: h, Data: data})
				require.NoError(t, err)
				var sum float64
				for p := range w * h {
					for ch := range 3 {
						sum += math.Abs(float64(img.Pix[3*p+ch]) - float64(got.Pix[4*p+ch]))
					}
				}
				assert.Less(t, sum/float64(3*w*h), 2.0, "frame %d as JPEG (quality 95)", i)
			}
			_, err = r.Next()
			assert.ErrorIs(t, err, io.EOF)
		})
	}
}

// TestBadFiles: a missing, truncated or corrupt video is an error naming
// the file and what is wrong with it.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.avi")
	writeVideo(t, good, 20, 160, 120, 10)
	data, err := os.ReadFile(good)
	require.NoError(t, err)

	missing := filepath.Join(dir, "missing.avi")
	_, err = Open(missing)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, missing)

	_, err = Open(dir)
	assert.ErrorContains(t, err, dir+" is a folder, not a video file")

	junk := filepath.Join(dir, "junk.mp4")
	require.NoError(t, os.WriteFile(junk, []byte("not a video at all"), 0o644))
	_, err = Open(junk)
	assert.ErrorContains(t, err, junk+": not a video file FFmpeg can read")

	// Cut in the header: FFmpeg cannot open it.
	short := filepath.Join(dir, "short.avi")
	require.NoError(t, os.WriteFile(short, data[:300], 0o644))
	_, err = Probe(short)
	assert.ErrorContains(t, err, short+": not a video file FFmpeg can read")

	// Cut in the middle: the header promises 20 frames, fewer decode.
	half := filepath.Join(dir, "half.avi")
	require.NoError(t, os.WriteFile(half, data[:len(data)/2], 0o644))
	n, err := readAll(half)
	assert.ErrorContains(t, err, half+": could not decode frame ")
	assert.ErrorContains(t, err, "of the 20 its header announces (the file is truncated or corrupt)")
	assert.Greater(t, n, 0)
	assert.Less(t, n, 20)

	// Garbage over a third of the frames.
	corrupt := filepath.Join(dir, "corrupt.avi")
	bad := append([]byte(nil), data...)
	for i := len(bad) / 3; i < len(bad)*2/3; i++ {
		bad[i] = byte(i * 7)
	}
	require.NoError(t, os.WriteFile(corrupt, bad, 0o644))
	n, err = readAll(corrupt)
	assert.ErrorContains(t, err, corrupt+": could not decode frame ")
	assert.Less(t, n, 20)

	// A header claiming 2³⁰ frames (the AVI stream header's dwLength, 32
	// bytes into strh) is refused before anything is planned for them.
	huge := filepath.Join(dir, "huge.avi")
	claim := append([]byte(nil), data...)
	strh := bytes.Index(claim, []byte("strh"))
	require.Positive(t, strh)
	require.Equal(t, uint32(20), binary.LittleEndian.Uint32(claim[strh+8+32:]))
	binary.LittleEndian.PutUint32(claim[strh+8+32:], 1<<30)
	require.NoError(t, os.WriteFile(huge, claim, 0o644))
	_, err = Probe(huge)
	assert.EqualError(t, err, "video: "+huge+": the header claims 1073741824 frames, more than the 16777216 a file may hold here (a corrupt header?)")

	n, err = readAll(good)
	assert.NoError(t, err)
	assert.Equal(t, 20, n)
}

// readAll decodes every frame of path and returns how many decoded.
func readAll(path string) (int, error) {
	r, err := Open(path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	for n := 0; ; n++ {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
	}
}

func TestCreateErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Create(filepath.Join(dir, "clip.webm"), 10, 64, 48)
	assert.ErrorContains(t, err, `can write .avi, .mkv (MJPG) and .mp4 (mp4v), not ".webm"`)
	_, err = Create(filepath.Join(dir, "nowhere", "clip.avi"), 10, 64, 48)
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = Create(filepath.Join(dir, "clip.avi"), 0, 64, 48)
	assert.ErrorContains(t, err, "want a positive rate and size")

	path := filepath.Join(dir, "clip.avi")
	w, err := Create(path, 10, 64, 48)
	require.NoError(t, err)
	assert.EqualError(t, w.Write(testFrame(0, 32, 48)), fmt.Sprintf("video: %s: frame 1 is 32x48, the video is 64x48", path))
	require.NoError(t, w.Write(testFrame(0, 64, 48)))
	require.NoError(t, w.Close())
	info, err := Probe(path)
	require.NoError(t, err)
	assert.Equal(t, 1, info.Frames)
}

func TestIsVideo(t *testing.T) {
	for path, want := range map[string]bool{"a/front.mp4": true, "CLIP.AVI": true, "x.mkv": true, "1700.jpg": false, "ego.csv": false, "dir": false} {
		assert.Equal(t, want, IsVideo(path), path)
	}
}
