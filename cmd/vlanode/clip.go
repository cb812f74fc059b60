package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"vlanode/engine"
	"vlanode/synth"
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
	asJSON := fs.Bool("json", false, "print what was written as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return usagef("--out is required")
	case *count < 0:
		return usagef("--count must not be negative")
	}
	start := time.Now()
	if *count > 0 {
		return writeClips(ctx, *out, *count, o, *asJSON, start, stdout)
	}
	n, err := synth.WriteClip(ctx, *out, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"dir": *out, "seconds": o.Seconds, "cameras": o.Cameras, "frames": n, "width": o.Width, "height": o.Height,
			"speed": o.Speed, "curvature": o.Curvature,
		})
	}
	fmt.Fprintf(stdout, "wrote a %.1f s clip of %d cameras (%d frames, %dx%d JPEG, %.0f m/s, curvature %g) to %s in %v\n",
		o.Seconds, len(o.Cameras), n, o.Width, o.Height, o.Speed, o.Curvature, *out, time.Since(start).Round(time.Millisecond))
	return nil
}

// writeClips writes count clips into out/clip-NNN, varied by
// synth.ClipVariant, on all cores.
func writeClips(ctx context.Context, out string, count int, o synth.ClipOptions, asJSON bool, start time.Time, stdout io.Writer) error {
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
			frames[i], errs[i] = synth.WriteClip(ctx, dirs[i], synth.ClipVariant(o, i))
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
	fmt.Fprintf(stdout, "wrote %d clips of %.1f s, %d cameras (%d frames, %dx%d JPEG) to %s/clip-000 … clip-%03d in %v\n",
		count, o.Seconds, len(o.Cameras), total, o.Width, o.Height, out, count-1, time.Since(start).Round(time.Millisecond))
	return nil
}
