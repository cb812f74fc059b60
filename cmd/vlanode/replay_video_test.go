//go:build !nogocv

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
	"vlanode/node"
	"vlanode/vision"
	"vlanode/vision/video"
)

// keptFrames is what a recordingEngine saw: every frame of every
// observation, in order.
type keptFrames struct {
	mu     sync.Mutex
	frames []msgs.Frame
}

// recordingEngine is cliEngine keeping a copy of the frames it is given.
type recordingEngine struct {
	cliEngine
	kept *keptFrames
}

func (e recordingEngine) Infer(ctx context.Context, obs *node.Observation) (*msgs.Plan, error) {
	e.kept.mu.Lock()
	defer e.kept.mu.Unlock()
	for _, f := range obs.Frames {
		f.Data = slices.Clone(f.Data) // the node's: not ours to keep
		e.kept.frames = append(e.kept.frames, f)
	}
	return e.cliEngine.Infer(ctx, obs)
}

// drawnFrame is frame k of a test video: gradients, a blue level and a
// bright bar that move with k.
func drawnFrame(k, w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			p := img.Pix[4*(y*w+x):]
			p[0], p[1], p[2], p[3] = uint8(50+150*x/w), uint8(40+150*y/h), uint8(40+25*k), 255
			if x/6 == k {
				p[0], p[1], p[2] = 235, 235, 235
			}
		}
	}
	return img
}

// frameError is the mean absolute difference of a decoded frame and an
// RGBA image, per RGB value.
func frameError(got *vision.Image, want *image.RGBA) float64 {
	var sum float64
	for p := range got.Width * got.Height {
		for c := range 3 {
			sum += math.Abs(float64(got.Pix[3*p+c]) - float64(want.Pix[4*p+c]))
		}
	}
	return sum / float64(3*got.Width*got.Height)
}

// TestReplayVideoClip replays a clip folder of two videos, the front camera
// MJPG in .avi and the rear mp4v in .mp4 (front/1000000000.avi,
// rear/1005000000.mp4: 6 frames each at 10 fps), into a node whose engine
// keeps the frames it is given: every frame arrives with the stamp of its
// place in its video, as the frame written there, within the codecs' loss
// and the JPEG (quality 95) replay sends (a mean absolute error per RGB
// value of at most 3 after MJPG, 5 after mp4v; measured 1.8-2.1 and
// 2.7-3.4, against 31 or more to the other frames).
func TestReplayVideoClip(t *testing.T) {
	const n, w, h = 6, 48, 32
	dir := t.TempDir()
	starts := map[string]int64{"front": 1_000_000_000, "rear": 1_005_000_000}
	exts := map[string]string{"front": ".avi", "rear": ".mp4"}
	tolerance := map[string]float64{"front": 3, "rear": 5}
	for _, cam := range []string{"front", "rear"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, cam), 0o755))
		vw, err := video.Create(filepath.Join(dir, cam, fmt.Sprint(starts[cam], exts[cam])), 10, w, h)
		require.NoError(t, err)
		for k := range n {
			require.NoError(t, vw.Write(drawnFrame(k, w, h)))
		}
		require.NoError(t, vw.Close())
	}

	kept := &keptFrames{}
	spec := engineSpec{build: func(context.Context, engineEnv) (node.Engine, error) { return recordingEngine{kept: kept}, nil }}
	url, _, _ := serving(t, spec, "--name", "video")
	code, stdout, stderr := runCLI("replay", "--nats-url", url, "--node", "video", "--fast", "--explicit", "--keep-stamps", "--no-progress", dir)
	require.Equal(t, 0, code, stderr)
	// Requests from the first full window (the second frame of each
	// camera, 1.105 s) to the last frame, every 100 ms: 5.
	assert.Contains(t, stdout, "replayed 12 frames and 5 requests")
	assert.Contains(t, stdout, "plans: 5")
	assert.Contains(t, stdout, "errors: 0")

	kept.mu.Lock()
	frames := slices.Clone(kept.frames)
	kept.mu.Unlock()
	require.Len(t, frames, 5*2*2, "5 requests of 2 cameras × 2 frames")
	seen := map[string]int{}
	for _, f := range frames {
		k := int((f.StampNs - starts[f.Camera]) / 100_000_000)
		require.Equal(t, starts[f.Camera]+int64(k)*100_000_000, f.StampNs, "%s frame stamped %d", f.Camera, f.StampNs)
		require.Equal(t, uint64(k), f.Seq)
		require.Equal(t, msgs.EncodingJPEG, f.Encoding)
		require.Equal(t, [2]int{w, h}, [2]int{f.Width, f.Height})
		img, err := vision.Decode(&f)
		require.NoError(t, err)
		errs := make([]float64, n)
		for j := range n {
			errs[j] = frameError(img, drawnFrame(j, w, h))
		}
		assert.Less(t, errs[k], tolerance[f.Camera], "%s frame %d: errors against frames 0-%d: %.2f", f.Camera, k, n-1, errs)
		assert.Equal(t, k, slices.Index(errs, slices.Min(errs)), "%s frame %d is nearest to another frame: %.2f", f.Camera, k, errs)
		if seen[fmt.Sprint(f.Camera, k)] == 0 {
			t.Logf("%s frame %d: mean abs error %.2f (to the next nearest frame %.2f)", f.Camera, k, errs[k], secondMin(errs))
		}
		seen[fmt.Sprint(f.Camera, k)]++
	}
	// Each request holds the two latest frames of each camera, so a frame
	// is in two requests, the first and the last in one.
	for _, cam := range []string{"front", "rear"} {
		assert.Equal(t, []int{1, 2, 2, 2, 2, 1}, []int{seen[cam+"0"], seen[cam+"1"], seen[cam+"2"], seen[cam+"3"], seen[cam+"4"], seen[cam+"5"]}, cam)
	}

	// Offline evaluation of a folder of two video clips, one of them with a
	// truncated video (cut at its last frame's chunk, so that the index
	// after it goes too): the good one plays all its requests, the other
	// fails by name at the frame that does not decode.
	root := t.TempDir()
	for _, c := range []string{"clip-a", "clip-b"} {
		require.NoError(t, os.CopyFS(filepath.Join(root, c), os.DirFS(dir)))
	}
	cut := filepath.Join(root, "clip-b", "front", "1000000000.avi")
	data, err := os.ReadFile(cut)
	require.NoError(t, err)
	last := bytes.LastIndex(data[:bytes.LastIndex(data, []byte("idx1"))], []byte("00dc"))
	require.Positive(t, last)
	require.NoError(t, os.WriteFile(cut, data[:last], 0o644))
	code, stdout, stderr = runCLI("replay", "--nats-url", url, "--node", "video", "--concurrency", "2", "--no-progress", root)
	assert.Equal(t, 1, code)
	assert.Contains(t, stdout, "replaying 2 clips into node video, 2 at a time")
	assert.Contains(t, stdout, "clips: 2, failed: 1")
	assert.Contains(t, stderr, "clip "+filepath.Join(root, "clip-b")+" failed: replay: camera front: video: "+cut+": could not decode frame 6 of the 6 its header announces")

	// A video that cannot be read stops replay before the node is asked,
	// naming the file.
	bad := filepath.Join(t.TempDir(), "drive.mp4")
	require.NoError(t, os.WriteFile(bad, []byte("not really"), 0o644))
	code, _, stderr = runCLI("replay", "--nats-url", url, "--node", "video", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "video: "+bad+": not a video file FFmpeg can read")

	// A single video file is refused for a model of two cameras.
	code, _, stderr = runCLI("replay", "--nats-url", url, "--node", "video", filepath.Join(dir, "front", "1000000000.avi"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "a video file holds one camera, and model cli-test takes 2 (front, rear)")
}

// secondMin returns the second smallest of xs.
func secondMin(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[1]
}

// TestClipVideoReplaysIntoTiny writes the synthetic clip as videos (vlanode
// clip --video) and replays it into a node serving the tiny Alpamayo-R1:
// every frame played, every request answered with a plan.
func TestClipVideoReplaysIntoTiny(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "clip")
	code, stdout, stderr := runCLI("clip", "--out", dir, "--video", "--seconds", "0.6", "--width", "192", "--height", "108", "--json")
	require.Equal(t, 0, code, stderr)
	var wrote struct {
		Frames int      `json:"frames"`
		Videos []string `json:"videos"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &wrote))
	assert.Equal(t, 24, wrote.Frames)
	require.Len(t, wrote.Videos, 4)
	for _, p := range wrote.Videos {
		assert.Equal(t, "1700000000000000000.avi", filepath.Base(p))
		info, err := video.Probe(p)
		require.NoError(t, err)
		assert.Equal(t, video.Info{Width: 192, Height: 108, FPS: 10, Frames: 6, Codec: "MJPG"}, info, p)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "front_wide_120fov"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "the video alone, no JPEG files")

	// --count with --video: each clip of videos.
	many := filepath.Join(t.TempDir(), "many")
	code, stdout, stderr = runCLI("clip", "--out", many, "--count", "2", "--video", "--video-format", "mp4", "--seconds", "0.3", "--width", "64", "--height", "48")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "wrote 2 clips of 0.3 s, 4 cameras (24 frames, 64x48 mp4v .mp4 video, one a camera)")
	for _, c := range []string{"clip-000", "clip-001"} {
		info, err := video.Probe(filepath.Join(many, c, "front_tele_30fov", "1700000000000000000.mp4"))
		require.NoError(t, err)
		assert.Equal(t, 3, info.Frames)
	}

	url, _, stop := serving(t, alpamayoSpec(), "--model", tinyAlpamayo(t), "--device", "cpu", "--name", "tiny")
	start := time.Now()
	code, stdout, stderr = runCLI("replay", "--nats-url", url, "--node", "tiny", "--fast", "--no-progress", "--max-reasoning-tokens", "4", dir)
	require.Equal(t, 0, code, stderr)
	t.Logf("replay took %v:\n%s", time.Since(start), stdout)
	// Four frames a camera make the first window (0.3 s); requests at 0.3,
	// 0.4 and 0.5 s.
	assert.Contains(t, stdout, "replayed 24 frames and 3 requests")
	assert.Contains(t, stdout, "plans: 3")
	assert.Contains(t, stdout, "errors: 0")
	require.NoError(t, stop())
}
