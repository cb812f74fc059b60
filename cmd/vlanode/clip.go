package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"vlanode/engine"
	"vlanode/synth"
	"vlanode/vision/video"
)

func runClip(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("clip", stderr)
	o := synth.DefaultClip(engine.Cameras)
	out := fs.String("out", "", "folder to write the clip to (<camera>/<stamp_ns>.jpg, ego.csv); with --count, the folder of the clips")
	count := fs.Int("count", 0, "write this many clips, OUT/clip-000 …, each driving another speed and curvature (for replay's offline evaluation); 0: one clip in OUT")
	fs.Float64Var(&o.Seconds, "seconds", o.Seconds, "length of the clip")
	fs.IntVar(&o.Width, "width", o.Width, "frame width")
	fs.IntVar(&o.Height, "height", o.Height, "frame height")
	fs.Float64Var(&o.Speed, "speed", o.Speed, "ego speed, m/s")
	fs.Float64Var(&o.Curvature, "curvature", o.Curvature, "ego path curvature, 1/m (positive: left)")
	asVideo := fs.Bool("video", false, "write each camera as one video, <camera>/<stamp_ns>.avi (MJPG), instead of JPEG files")
	format := fs.String("video-format", "avi", "with --video: avi or mkv (MJPG), or mp4 (mp4v)")
	asJSON := fs.Bool("json", false, "print what was written as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return usagef("--out is required")
	case *count < 0:
		return usagef("--count must not be negative")
	case *format != "avi" && *format != "mkv" && *format != "mp4":
		return usagef("--video-format must be avi, mkv or mp4")
	}
	w := clipWriter{}
	if *asVideo {
		if err := video.Available(); err != nil {
			return fmt.Errorf("clip --video: %w", err)
		}
		w.videoExt = "." + *format
	}
	start := time.Now()
	if *count > 0 {
		return writeClips(ctx, w, *out, *count, o, *asJSON, start, stdout)
	}
	n, videos, err := w.write(ctx, *out, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"dir": *out, "seconds": o.Seconds, "cameras": o.Cameras, "frames": n, "width": o.Width, "height": o.Height,
			"speed": o.Speed, "curvature": o.Curvature, "videos": videos,
		})
	}
	fmt.Fprintf(stdout, "wrote a %.1f s clip of %d cameras (%d frames, %dx%d %s, %.0f m/s, curvature %g) to %s in %v\n",
		o.Seconds, len(o.Cameras), n, o.Width, o.Height, w.what(), o.Speed, o.Curvature, *out, time.Since(start).Round(time.Millisecond))
	return nil
}

// clipWriter writes a synthetic clip as JPEG files, or with videoExt set
// as one video a camera.
type clipWriter struct {
	videoExt string // .avi, .mkv or .mp4; empty for JPEG files
}

// write writes one clip into dir and returns its number of frames and the
// videos written.
func (w clipWriter) write(ctx context.Context, dir string, o synth.ClipOptions) (int, []string, error) {
	if w.videoExt == "" {
		n, err := synth.WriteClip(ctx, dir, o)
		return n, nil, err
	}
	sink := &videoSink{dir: dir, ext: w.videoExt, fps: o.Rate}
	n, err := synth.WriteClipFrames(ctx, dir, o, sink.write)
	if cerr := sink.close(); err == nil {
		err = cerr
	}
	return n, sink.paths, err
}

// what names the frames' format for messages.
func (w clipWriter) what() string {
	switch w.videoExt {
	case "":
		return "JPEG"
	case ".mp4":
		return "mp4v .mp4 video, one a camera"
	default:
		return "MJPG " + w.videoExt + " video, one a camera"
	}
}

// videoSink writes each camera's frames into one video,
// <camera>/<stamp_ns><ext>, named by its first frame's capture time as
// replay wants.
type videoSink struct {
	dir, ext string
	fps      float64
	camera   string        // the camera being written
	w        *video.Writer // its video
	paths    []string      // the videos written
}

// write is a synth.FrameFunc: frames come camera by camera.
func (s *videoSink) write(camera string, stamp int64, img *image.RGBA) error {
	if camera != s.camera || s.w == nil {
		if err := s.close(); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(s.dir, camera), 0o755); err != nil {
			return fmt.Errorf("clip: %w", err)
		}
		path := filepath.Join(s.dir, camera, fmt.Sprintf("%d%s", stamp, s.ext))
		b := img.Bounds()
		w, err := video.Create(path, s.fps, b.Dx(), b.Dy())
		if err != nil {
			return fmt.Errorf("clip: %w", err)
		}
		s.camera, s.w = camera, w
		s.paths = append(s.paths, path)
	}
	if err := s.w.Write(img); err != nil {
		return fmt.Errorf("clip: %w", err)
	}
	return nil
}

// close finishes the video being written.
func (s *videoSink) close() error {
	if s.w == nil {
		return nil
	}
	err := s.w.Close()
	s.w = nil
	if err != nil {
		return fmt.Errorf("clip: %w", err)
	}
	return nil
}

// writeClips writes count clips into out/clip-NNN, varied by
// synth.ClipVariant, on all cores.
func writeClips(ctx context.Context, w clipWriter, out string, count int, o synth.ClipOptions, asJSON bool, start time.Time, stdout io.Writer) error {
	frames := make([]int, count)
	dirs := make([]string, count)
	errs := make([]error, count)
	sem := make(chan struct{}, runtime.NumCPU())
	var wg sync.WaitGroup
	for i := range count {
		dirs[i] = filepath.Join(out, fmt.Sprintf("clip-%03d", i))
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			frames[i], _, errs[i] = w.write(ctx, dirs[i], synth.ClipVariant(o, i))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	total := 0
	for _, n := range frames {
		total += n
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"dir": out, "clips": dirs, "seconds": o.Seconds, "cameras": o.Cameras, "frames": total, "width": o.Width, "height": o.Height,
		})
	}
	fmt.Fprintf(stdout, "wrote %d clips of %.1f s, %d cameras (%d frames, %dx%d %s) to %s/clip-000 … clip-%03d in %v\n",
		count, o.Seconds, len(o.Cameras), total, o.Width, o.Height, w.what(), out, count-1, time.Since(start).Round(time.Millisecond))
	return nil
}
