package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"

	"vlanode/synth"
)

// runSynth writes a synthetic checkpoint: random bf16 weights in a real
// model's layout, its config.json files and a tokenizer.json.
func runSynth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("synth", stderr)
	archs := make([]string, 0, len(synth.Archs()))
	for _, a := range synth.Archs() {
		archs = append(archs, string(a))
	}
	archName := fs.String("arch", "", "architecture: "+strings.Join(archs, ", "))
	out := fs.String("out", "", "output folder, created if needed; it must be empty unless --force")
	seed := fs.Uint64("seed", 1, "random seed: the same seed writes the same files")
	configOnly := fs.Bool("config-only", false, "write only the config.json files and tokenizer.json")
	force := fs.Bool("force", false, "write into a non-empty folder, replacing files of the same names")
	asJSON := fs.Bool("json", false, "print what was written as one JSON object instead of the tables")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *archName == "" || *out == "" {
		return usagef("--arch and --out are required")
	}
	arch, err := synth.ParseArch(*archName)
	if err != nil {
		return usageError{err.Error()}
	}
	layout, err := synth.NewLayout(arch)
	if err != nil {
		return err
	}
	if !*configOnly && !*asJSON {
		printBreakdown(stdout, layout)
	}

	opts := synth.Options{Seed: *seed, ConfigOnly: *configOnly, Overwrite: *force}
	var bar *progressbar.ProgressBar
	if !*configOnly {
		bar = newByteBar(stderr, layout.Bytes(), "synth "+string(arch))
		opts.Progress = func(n int64) { _ = bar.Add64(n) }
	}
	start := time.Now()
	res, err := synth.Write(ctx, *out, layout, opts)
	if bar != nil {
		if err == nil {
			_ = bar.Finish()
		} else {
			_ = bar.Exit()
			fmt.Fprintln(stderr)
		}
	}
	if errors.Is(err, synth.ErrNotEmpty) {
		return fmt.Errorf("%s is not empty; use --force to write into it anyway", *out)
	}
	if err != nil {
		return err
	}
	took := time.Since(start)
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"arch": arch, "dir": filepath.Clean(*out), "files": res.Files,
			"tensors": res.Tensors, "tensor_bytes": res.TensorBytes, "seconds": took.Seconds(),
		})
	}
	fmt.Fprintf(stdout, "wrote %s to %s: %s\n", strings.Join(res.Files, ", "), filepath.Clean(*out), summary(res, took))
	return nil
}

// summary says how much was written and how fast.
func summary(res *synth.Result, took time.Duration) string {
	if res.Tensors == 0 {
		return fmt.Sprintf("configs only, in %.1f s", took.Seconds())
	}
	return fmt.Sprintf("%d tensors, %.2f GB (%.2f GiB) in %.1f s, %.0f MB/s",
		res.Tensors, float64(res.TensorBytes)/1e9, float64(res.TensorBytes)/(1<<30),
		took.Seconds(), float64(res.TensorBytes)/1e6/took.Seconds())
}

// printBreakdown prints the size of each module of the layout.
func printBreakdown(w io.Writer, l *synth.Layout) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\ttensors\tGB\t\n", l.Arch)
	for _, m := range l.Breakdown() {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t\n", m.Module, m.Tensors, float64(m.Bytes)/1e9)
	}
	fmt.Fprintf(tw, "total\t%d\t%.3f\t\n", len(l.Tensors), float64(l.Bytes())/1e9)
	tw.Flush()
}

// newByteBar is a progress bar of bytes written (with rate and time left)
// on w.
func newByteBar(w io.Writer, total int64, desc string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
}
