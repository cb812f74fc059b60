//go:build !nogocv

package replay

import (
	"context"
	"fmt"
	"image"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
	"vlanode/vision"
	"vlanode/vision/video"
)

// videoFrame is frame k of a test video: a gradient whose blue level and a
// bright bar move with k.
func videoFrame(k, w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			p := img.Pix[4*(y*w+x):]
			p[0], p[1], p[2], p[3] = uint8(50+150*x/w), uint8(40+150*y/h), uint8(40+30*k), 255
			if x/4 == k {
				p[0], p[1], p[2] = 235, 235, 235
			}
		}
	}
	return img
}

// writeVideo writes n frames of w×h at 10 fps (the test model's frame
// period) to path.
func writeVideo(t *testing.T, path string, n, w, h int) {
	t.Helper()
	vw, err := video.Create(path, 10, w, h)
	require.NoError(t, err)
	for k := range n {
		require.NoError(t, vw.Write(videoFrame(k, w, h)))
	}
	require.NoError(t, vw.Close())
}

// videoClip is writeClip(t, 5) with the rear camera's frames as one video,
// rear/1005000000.avi: the same stamps.
func videoClip(t *testing.T) string {
	t.Helper()
	dir := writeClip(t, 5)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "rear")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "rear"), 0o755))
	writeVideo(t, filepath.Join(dir, "rear", "1005000000.avi"), 5, 32, 24)
	return dir
}

// TestFolderVideo: a camera of a clip folder as a video plays the same
// events as its image files would, frame k stamped 1.005 s + k/10 s, each
// frame the one written at its place (within MJPG's loss and the JPEG it
// is sent as: a mean absolute error of at most 3 per RGB value, measured
// 2.1-2.3 here, against 35 or more to the neighbouring frames).
func TestFolderVideo(t *testing.T) {
	f, err := OpenFolder(videoClip(t), FolderConfig{Info: testInfo})
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, 14, f.Len())
	var kinds []string
	var reqs []*msgs.InferRequest
	k := 0
	for {
		e, err := f.Next(context.Background())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if e.Kind == KindRequest {
			kinds = append(kinds, "R")
			reqs = append(reqs, e.Request)
			continue
		}
		kinds = append(kinds, e.Frame.Camera[:1])
		if e.Frame.Camera != "rear" {
			continue
		}
		fr := e.Frame
		assert.Equal(t, int64(1.005e9)+int64(k)*1e8, fr.StampNs)
		assert.Equal(t, fr.StampNs, e.At)
		assert.Equal(t, uint64(k), fr.Seq)
		assert.Equal(t, msgs.EncodingJPEG, fr.Encoding)
		require.Equal(t, [2]int{32, 24}, [2]int{fr.Width, fr.Height})
		img, err := vision.Decode(fr)
		require.NoError(t, err)
		errs := make([]float64, 5)
		for j := range errs {
			want := videoFrame(j, 32, 24)
			var sum float64
			for p := range 32 * 24 {
				for c := range 3 {
					sum += math.Abs(float64(img.Pix[3*p+c]) - float64(want.Pix[4*p+c]))
				}
			}
			errs[j] = sum / (32 * 24 * 3)
		}
		t.Logf("rear frame %d: mean abs error against frames 0-4: %.2f", k, errs)
		assert.Less(t, errs[k], 3.0, "frame %d", k)
		for j, e := range errs {
			if j != k {
				assert.Less(t, errs[k], e, "frame %d is nearer to frame %d", k, j)
			}
		}
		k++
	}
	assert.Equal(t, 5, k, "rear frames")
	assert.Equal(t, "f r f r R f r R f r R f r R", strings.Join(kinds, " "))
	require.Len(t, reqs, 4)
	h := reqs[0].EgoHistory
	assert.Equal(t, []int64{0.9e9, 1.0e9, 1.1e9}, []int64{h[0].StampNs, h[1].StampNs, h[2].StampNs})
}

// TestPlayFolderVideo plays a clip folder with a video into a node.
func TestPlayFolderVideo(t *testing.T) {
	nc, _ := setup(t)
	info := discover(t, nc)
	src, err := OpenFolder(videoClip(t), FolderConfig{Info: info})
	require.NoError(t, err)
	var plans []string
	sum, err := Play(context.Background(), nc, src, Config{Node: "gpu-a", Info: info, Explicit: true, Fast: true, KeepStamps: true,
		OnPlan: func(p *msgs.Plan, _ time.Duration) { plans = append(plans, p.Reasoning) }})
	require.NoError(t, err)
	require.NoError(t, src.Close())
	assert.Equal(t, 10, sum.Frames)
	assert.Equal(t, 4, sum.Plans, "errors: %v", sum.Distinct)
	require.Len(t, plans, 4)
	// The last request: the latest two frames of each camera, the rear's
	// from the video.
	assert.Equal(t, "front@1300000000 front@1400000000 rear@1305000000 rear@1405000000 ", plans[3])
}

// TestOpenVideo: a single video file is the clip of a one-camera model,
// stamped from its name when it is a number.
func TestOpenVideo(t *testing.T) {
	dir := writeClip(t, 5)
	one := testInfo
	one.Cameras = []string{"front"}
	named := filepath.Join(dir, "1000000000.mkv")
	writeVideo(t, named, 5, 32, 24)
	f, err := OpenVideo(named, FolderConfig{Info: one})
	require.NoError(t, err)
	var stamps []int64
	requests := 0
	for {
		e, err := f.Next(context.Background())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		if e.Kind == KindFrame {
			assert.Equal(t, "front", e.Frame.Camera)
			stamps = append(stamps, e.Frame.StampNs)
		} else {
			requests++
			assert.Len(t, e.Request.EgoHistory, 3, "ego.csv beside the video")
		}
	}
	require.NoError(t, f.Close())
	assert.Equal(t, []int64{1.0e9, 1.1e9, 1.2e9, 1.3e9, 1.4e9}, stamps)
	assert.Equal(t, 4, requests)

	// Not named by a stamp: the video's own time, from 0, before every
	// pose of ego.csv: no request has its ego history.
	plain := filepath.Join(dir, "drive.avi")
	writeVideo(t, plain, 5, 32, 24)
	f, err = OpenVideo(plain, FolderConfig{Info: one})
	require.NoError(t, err)
	for {
		e, err := f.Next(context.Background())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Equal(t, KindFrame, e.Kind)
		if e.Frame.Seq == 0 {
			assert.Equal(t, int64(0), e.Frame.StampNs)
		}
	}
	assert.Equal(t, 4, f.Skipped)

	_, err = OpenVideo(plain, FolderConfig{Info: testInfo})
	assert.EqualError(t, err, fmt.Sprintf("replay: %s: a video file holds one camera, and model replay-test takes 2 (front, rear): put each camera's video in a clip folder as <camera>/<start_ns>.avi beside ego.csv (docs/node.md)", plain))
}

// TestFolderVideoErrors: a badly named, unreadable or truncated video, or
// one whose frames collide with image files, is an error naming the file.
func TestFolderVideoErrors(t *testing.T) {
	dir := videoClip(t)
	require.NoError(t, os.Rename(filepath.Join(dir, "rear", "1005000000.avi"), filepath.Join(dir, "rear", "drive.avi")))
	_, err := OpenFolder(dir, FolderConfig{Info: testInfo})
	assert.EqualError(t, err, "replay: rear/drive.avi: a video file is named by its first frame's capture time, <stamp_ns>.avi")

	dir = videoClip(t)
	junk := filepath.Join(dir, "rear", "1005000000.avi")
	require.NoError(t, os.WriteFile(junk, []byte("RIFF and nothing else"), 0o644))
	_, err = OpenFolder(dir, FolderConfig{Info: testInfo})
	assert.EqualError(t, err, "replay: camera rear: video: "+junk+": not a video file FFmpeg can read (truncated, corrupt or an unknown container)")

	// Truncated after its header: the frames its header announces are
	// planned, and playing stops at the first that does not decode.
	dir = videoClip(t)
	path := filepath.Join(dir, "rear", "1005000000.avi")
	writeVideo(t, path, 5, 320, 240) // frames larger than the header
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data[:len(data)/2], 0o644))
	f, err := OpenFolder(dir, FolderConfig{Info: testInfo})
	require.NoError(t, err)
	defer f.Close()
	for {
		_, err = f.Next(context.Background())
		if err != nil {
			break
		}
	}
	assert.ErrorContains(t, err, "replay: camera rear: video: "+path+": could not decode frame ")
	assert.ErrorContains(t, err, "of the 5 its header announces (the file is truncated or corrupt)")

	dir = videoClip(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rear", "1105000000.png"), nil, 0o644))
	_, err = OpenFolder(dir, FolderConfig{Info: testInfo})
	assert.ErrorContains(t, err, "replay: camera rear has two frames stamped 1105000000 (")
	assert.ErrorContains(t, err, "frame 2 of "+filepath.Join(dir, "rear", "1005000000.avi"))
}
