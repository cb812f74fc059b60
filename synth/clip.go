package synth

import (
	"bufio"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
)

// ClipOptions describe a synthetic driving clip.
type ClipOptions struct {
	Cameras       []string // one folder each, in this order
	Seconds       float64  // length of the clip
	Rate          float64  // frames per second per camera
	Width, Height int      // frame size
	Speed         float64  // ego speed, m/s
	Curvature     float64  // ego path curvature, 1/m (positive: left)
	Quality       int      // JPEG quality
}

// DefaultClip is a 3 s clip of four cameras at 10 Hz, 480×270 JPEGs,
// driving a gentle left curve at 8 m/s.
func DefaultClip(cameras []string) ClipOptions {
	return ClipOptions{Cameras: cameras, Seconds: 3, Rate: 10, Width: 480, Height: 270, Speed: 8, Curvature: 0.01, Quality: 85}
}

// WriteClip writes a clip folder in the layout `vlanode replay` reads:
// <camera>/<stamp_ns>.jpg and ego.csv (stamp_ns, x, y, z, the row-major
// vehicle-to-world rotation). The frames are a rendered road whose lane
// marks move with the ego's speed and bend with its curvature; each camera
// looks in its own direction.
func WriteClip(ctx context.Context, dir string, o ClipOptions) (frames int, err error) {
	return WriteClipFrames(ctx, dir, o, func(camera string, stamp int64, img *image.RGBA) error {
		if err := os.MkdirAll(filepath.Join(dir, camera), 0o755); err != nil {
			return fmt.Errorf("synth: clip: %w", err)
		}
		return writeJPEG(filepath.Join(dir, camera, fmt.Sprintf("%d.jpg", stamp)), img, o.Quality)
	})
}

// FrameFunc receives a clip's frames: camera by camera in the order of
// ClipOptions.Cameras, each camera's oldest first, with its capture time
// in ns.
type FrameFunc func(camera string, stamp int64, img *image.RGBA) error

// WriteClipFrames writes ego.csv into dir, as WriteClip does, and hands
// each rendered frame to write instead of writing a JPEG file (vlanode clip
// --video encodes them as video). It returns the number of frames written.
func WriteClipFrames(ctx context.Context, dir string, o ClipOptions, write FrameFunc) (frames int, err error) {
	if o.Seconds <= 0 || o.Rate <= 0 || o.Width < 16 || o.Height < 16 || len(o.Cameras) == 0 {
		return 0, fmt.Errorf("synth: clip: bad options %+v", o)
	}
	n := int(math.Round(o.Seconds * o.Rate))
	period := 1 / o.Rate
	const t0 = int64(1_700_000_000_000_000_000) // a fixed start stamp (ns), so clips are reproducible
	if err := writeEgo(filepath.Join(dir, "ego.csv"), o, n, period, t0); err != nil {
		return 0, err
	}
	for ci, cam := range o.Cameras {
		for i := 0; i < n; i++ {
			if err := ctx.Err(); err != nil {
				return frames, err
			}
			t := float64(i) * period
			if err := write(cam, t0+int64(math.Round(t*1e9)), renderRoad(o, ci, t)); err != nil {
				return frames, err
			}
			frames++
		}
	}
	return frames, nil
}

// egoPose is the ego's pose at time t on a circle of curvature k.
func egoPose(o ClipOptions, t float64) (x, y, yaw float64) {
	s := o.Speed * t
	if o.Curvature == 0 {
		return s, 0, 0
	}
	yaw = o.Curvature * s
	return math.Sin(yaw) / o.Curvature, (1 - math.Cos(yaw)) / o.Curvature, yaw
}

func writeEgo(path string, o ClipOptions, n int, period float64, t0 int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("synth: clip: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("synth: clip: %w", err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "stamp_ns,x,y,z,r00,r01,r02,r10,r11,r12,r20,r21,r22")
	// Poses from 2 s before the first frame, so the first request has a full history.
	start := -int(math.Ceil(2 / period))
	for i := start; i < n; i++ {
		t := float64(i) * period
		x, y, yaw := egoPose(o, t)
		c, s := math.Cos(yaw), math.Sin(yaw)
		fmt.Fprintf(w, "%d,%.6f,%.6f,0,%.9f,%.9f,0,%.9f,%.9f,0,0,0,1\n", t0+int64(math.Round(t*1e9)), x, y, c, -s, s, c)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("synth: clip: %w", err)
	}
	return f.Close()
}

// renderRoad draws camera ci's view at time t: sky, grass, a road to the
// horizon with dashed lane marks that scroll with the distance driven.
func renderRoad(o ClipOptions, ci int, t float64) *image.RGBA {
	w, h := o.Width, o.Height
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	horizon := h * 2 / 5
	// Each camera looks another way: the road's vanishing point shifts.
	look := []float64{-0.6, 0, 0.6, 0}[ci%4]
	zoom := []float64{1, 1, 1, 2.5}[ci%4]
	bend := o.Curvature * 40 * zoom
	dist := o.Speed * t
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			var c color.RGBA
			if y < horizon {
				v := uint8(150 + 80*y/horizon)
				c = color.RGBA{v / 2, v * 3 / 4, v, 255}
			} else {
				depth := float64(y-horizon) / float64(h-horizon) // 0 at the horizon, 1 at the bottom
				z := 1 / (depth + 0.02)                          // distance ahead, arbitrary units
				center := float64(w)/2 - look*float64(w) - bend*z*z*float64(w)/400
				half := depth * float64(w) * 0.45 * zoom
				dx := float64(x) - center
				switch {
				case math.Abs(dx) < half:
					c = color.RGBA{90, 90, 95, 255}
					mark := math.Abs(math.Abs(dx)-half*0.5) < 1+depth*4*zoom
					if mark && math.Mod(z*4+dist, 6) < 3 {
						c = color.RGBA{235, 235, 220, 255}
					}
				default:
					g := uint8(100 + 60*depth)
					c = color.RGBA{g / 2, g, g / 3, 255}
				}
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

func writeJPEG(path string, img image.Image, quality int) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("synth: clip: %w", err)
	}
	if err := jpeg.Encode(f, img, &jpeg.Options{Quality: quality}); err != nil {
		f.Close()
		return fmt.Errorf("synth: clip: %s: %w", path, err)
	}
	return f.Close()
}

// ClipVariant is clip i of a set made from o (vlanode clip --count): the
// speed steps through o.Speed + 0, 2, 4, 6 m/s and the curvature through
// 1, ½, 0, −½, −1 times o.Curvature, so that no two neighbouring clips
// drive alike; everything else is o's.
func ClipVariant(o ClipOptions, i int) ClipOptions {
	o.Speed += float64(2 * (i % 4))
	o.Curvature *= 1 - float64(i%5)/2
	return o
}
