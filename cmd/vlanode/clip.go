package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"vlanode/engine"
	"vlanode/synth"
)

func runClip(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("clip", stderr)
	o := synth.DefaultClip(engine.Cameras)
	out := fs.String("out", "", "folder to write the clip to (<camera>/<stamp_ns>.jpg, ego.csv)")
	fs.Float64Var(&o.Seconds, "seconds", o.Seconds, "length of the clip")
	fs.IntVar(&o.Width, "width", o.Width, "frame width")
	fs.IntVar(&o.Height, "height", o.Height, "frame height")
	fs.Float64Var(&o.Speed, "speed", o.Speed, "ego speed, m/s")
	fs.Float64Var(&o.Curvature, "curvature", o.Curvature, "ego path curvature, 1/m (positive: left)")
	asJSON := fs.Bool("json", false, "print what was written as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("--out is required")
	}
	start := time.Now()
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
