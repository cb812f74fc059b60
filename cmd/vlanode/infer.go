package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg" // image.DecodeConfig reads JPEG sizes
	_ "image/png"  // and PNG sizes
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"vlanode/engine"
	"vlanode/models/alpamayo"
	"vlanode/msgs"
	"vlanode/residency"
	"vlanode/safetensors"
	"vlanode/tensor"
)

// defaultSpeed is the ego speed (m/s) of the straight history infer assumes
// without --ego.
const defaultSpeed = 5.0

func runInfer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("infer", stderr)
	var mf modelFlags
	mf.register(fs)
	egoFile := fs.String("ego", "", `JSON file: 16 ego poses [{"xyz": [3], "rot": [9]}, …], oldest first, in the t0 frame (default: straight at 5 m/s)`)
	asJSON := fs.Bool("json", false, "print the plan as one JSON object")
	greedy := fs.Bool("greedy", false, "decode the reasoning by argmax instead of sampling")
	noiseFile := fs.String("noise", "", "safetensors file with the flow-matching initial noise (noise, float32 [1, 64, 2])")
	seed := fs.Uint64("seed", 1, "seed of the reasoning sampler and the flow-matching noise")
	maxTokens := fs.Int("max-reasoning-tokens", 0, "most reasoning tokens to decode (0: the model's tokens_per_future_traj)")
	vlm := fs.String("vlm", "", "the VLM's config folder, overriding the checkpoint's vlm_name_or_path")
	budgetFlag := fs.String("budget", "none", "VRAM budget: 8G = 8·10⁹ bytes, 8GiB = 8·2³⁰, or none; the planner keeps what fits resident and streams the rest")
	cameraOrder := fs.String("camera-order", "", "comma-separated cameras of --images, camera-major, 4 frames each (default: "+strings.Join(engine.Cameras, ",")+"; any of "+strings.Join(alpamayo.CameraNames(), ", ")+")")
	navText := fs.String("nav-text", "", `Alpamayo 1.5: a navigation instruction, e.g. "Turn left in 30m"`)
	question := fs.String("question", "", "Alpamayo 1.5: ask a question about the scene (VQA) instead of planning; prints the answer")
	guidance := fs.Float64("guidance", 0, "Alpamayo 1.5 with --nav-text: classifier-free guidance weight (1: none; 0: the config's)")
	noiseTemp := fs.Float64("noise-temperature", 0, "scale of the flow-matching initial noise (0: 1)")
	samples := fs.Int("samples", 1, "trajectory samples (num_traj_samples): one reasoning, the samples through the expert together; the plan holds them")
	var lf layerFlags
	lf.register(fs)
	var images []string
	args, images = splitList(args, "images")
	// --images takes several values, so splitList takes them out before
	// the flag package sees them; the flag is here for -h.
	fs.Func("images", "`FILE...`: the images (JPEG or PNG), camera-major, each camera's frames oldest first (16 for Alpamayo-R1: 4 cameras × 4 frames)", func(string) error { return nil })
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: vlanode infer --model DIR --images FILE... [flags]")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := mf.check(); err != nil {
		return err
	}
	if err := lf.check(); err != nil {
		return err
	}
	budget, err := residency.ParseBudget(*budgetFlag)
	if err != nil {
		return usagef("--budget: %v", err)
	}
	if len(images) == 0 {
		return usagef("--images needs at least one image file (camera-major, oldest first)")
	}
	if *maxTokens < 0 {
		return usagef("--max-reasoning-tokens must be ≥ 0")
	}
	var cameras []string
	if *cameraOrder != "" {
		cameras = strings.Split(*cameraOrder, ",")
		if _, _, err := alpamayo.CameraOrder(cameras); err != nil {
			return usagef("--camera-order: %v", err)
		}
	}
	if *question != "" && strings.TrimSpace(*question) == "" {
		return usagef("--question is blank")
	}
	if *guidance < 0 || *noiseTemp < 0 {
		return usagef("--guidance and --noise-temperature must be ≥ 0")
	}
	frames, err := readFrames(images, cameras)
	if err != nil {
		return err
	}
	if want := len(engine.Cameras) * engine.FramesPerCamera; cameras == nil && len(images) != want {
		return usagef("--images: got %d images, want %d: %d frames of each of the cameras %s, camera-major, oldest first (or name the cameras with --camera-order)",
			len(images), want, engine.FramesPerCamera, strings.Join(engine.Cameras, ", "))
	}
	if want := len(cameras) * engine.FramesPerCamera; cameras != nil && len(images) != want {
		return usagef("--images: got %d images for --camera-order %s, want %d: %d frames of each camera, camera-major, oldest first",
			len(images), *cameraOrder, want, engine.FramesPerCamera)
	}
	ego, err := readEgo(*egoFile, stderr)
	if err != nil {
		return err
	}
	if *samples < 1 || *samples > msgs.MaxTrajSamples {
		return usagef("--samples must be 1 to %d", msgs.MaxTrajSamples)
	}
	opt := engine.Options{Greedy: *greedy, Seed: *seed, Cameras: cameras, NavText: *navText, Question: *question,
		GuidanceWeight: *guidance, NoiseTemperature: *noiseTemp, Samples: *samples}
	if *noiseFile != "" {
		if opt.Noise, err = readNoise(*noiseFile); err != nil {
			return err
		}
	}
	bm, err := loadBudgeted(budgetSpec{dir: mf.dir, vlm: *vlm, device: mf.device, threads: mf.threads, budget: budget, layers: lf, samples: *samples}, stderr)
	if err != nil {
		return err
	}
	defer bm.Close()
	eng, err := engine.NewAlpamayo(bm.model, filepath.Base(mf.dir), uint64(budget),
		engine.PlanCapacity(engine.Capacity{Batch: 1, Samples: *samples, Unlimited: budget == 0}))
	if err != nil {
		return err
	}
	defer eng.Close()
	res, pre, err := eng.Run(ctx, frames, ego, *maxTokens, opt)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, res, pre)
	}
	printPlan(stdout, res, pre)
	return nil
}

// splitList removes --name (or -name) and the values after it up to the
// next flag from args, returning the rest and the values.
func splitList(args []string, name string) (rest, values []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--"+name || a == "-"+name {
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				values = append(values, args[i+1])
				i++
			}
			continue
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			values = append(values, v)
			continue
		}
		rest = append(rest, a)
	}
	return rest, values
}

// readFrames reads image files as jpeg or png frames of the cameras
// (nil: engine.Cameras), FramesPerCamera each.
func readFrames(paths []string, cameras []string) ([]msgs.Frame, error) {
	if cameras == nil {
		cameras = engine.Cameras
	}
	frames := make([]msgs.Frame, len(paths))
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		cfg, format, err := image.DecodeConfig(strings.NewReader(string(data)))
		if err != nil {
			return nil, fmt.Errorf("%s: not a JPEG or PNG image: %w", p, err)
		}
		camera := filepath.Base(p)
		if len(paths) == len(cameras)*engine.FramesPerCamera {
			camera = cameras[i/engine.FramesPerCamera]
		}
		frames[i] = msgs.Frame{
			V: msgs.Version, Camera: camera, Seq: uint64(i), Encoding: msgs.Encoding(format),
			Width: cfg.Width, Height: cfg.Height, Data: data,
		}
	}
	return frames, nil
}

// readEgo reads --ego, or makes a straight constant-speed history.
func readEgo(path string, log io.Writer) ([]msgs.EgoPose, error) {
	if path == "" {
		fmt.Fprintf(log, "vlanode: no --ego: assuming 16 poses driving straight at %g m/s\n", defaultSpeed)
		ego := make([]msgs.EgoPose, 16)
		for i := range ego {
			ego[i] = msgs.EgoPose{
				XYZ: [3]float64{float64(i-15) * defaultSpeed * 0.1, 0, 0},
				Rot: [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1},
			}
		}
		return ego, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var poses []struct {
		XYZ []float64 `json:"xyz"`
		Rot []float64 `json:"rot"`
	}
	if err := json.Unmarshal(raw, &poses); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ego := make([]msgs.EgoPose, len(poses))
	for i, p := range poses {
		if len(p.XYZ) != 3 || len(p.Rot) != 9 {
			return nil, fmt.Errorf("%s: pose %d has %d xyz and %d rot values, want 3 and 9", path, i, len(p.XYZ), len(p.Rot))
		}
		copy(ego[i].XYZ[:], p.XYZ)
		copy(ego[i].Rot[:], p.Rot)
	}
	return ego, nil
}

// readNoise reads the flow-matching initial noise.
func readNoise(path string) ([]float32, error) {
	f, err := safetensors.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Expect("noise", tensor.F32, -1, 64, 2)
	if err != nil {
		return nil, err
	}
	if info.Shape[0] != 1 {
		return nil, fmt.Errorf("%s: noise has %d samples; infer draws one", path, info.Shape[0])
	}
	return info.F32()
}

// inferJSON is infer's --json output.
type inferJSON struct {
	Reasoning    string           `json:"reasoning"`
	ReasoningIDs []int32          `json:"reasoning_ids"`
	Answer       string           `json:"answer,omitempty"`
	AnswerIDs    []int32          `json:"answer_ids,omitempty"`
	Guidance     float64          `json:"guidance_weight,omitempty"`
	VRAMPeak     int64            `json:"vram_peak_bytes"`
	Actions      [][2]float32     `json:"actions"`
	Trajectory   trajectoryJSON   `json:"trajectory"`
	TimingMs     map[string]int64 `json:"timing_ms"`
	PromptTokens int              `json:"prompt_tokens"`
	// Samples are trajectory samples 1 to K−1 (--samples K).
	Samples []sampleJSON `json:"samples,omitempty"`
}

type sampleJSON struct {
	Actions    [][2]float32   `json:"actions"`
	Trajectory trajectoryJSON `json:"trajectory"`
}

type trajectoryJSON struct {
	XYZ [][3]float32 `json:"xyz"`
	Rot [][9]float32 `json:"rot"`
}

func printJSON(w io.Writer, res *alpamayo.Result, pre time.Duration) error {
	out := inferJSON{
		Reasoning: res.Reasoning, ReasoningIDs: res.ReasoningIDs, Actions: res.Actions,
		Answer: res.Answer, AnswerIDs: res.AnswerIDs, Guidance: res.GuidanceWeight, VRAMPeak: res.VRAMPeakBytes,
		Trajectory:   trajectoryJSON{XYZ: res.XYZ, Rot: res.Rot},
		PromptTokens: res.PromptTokens,
		TimingMs: map[string]int64{
			"preprocess": pre.Milliseconds(), "vision": res.Timing.Vision.Milliseconds(),
			"prefill": res.Timing.Prefill.Milliseconds(), "decode": res.Timing.Decode.Milliseconds(),
			"diffusion": res.Timing.Diffusion.Milliseconds(), "total": res.Timing.Total.Milliseconds() + pre.Milliseconds(),
		},
	}
	for _, s := range res.Samples {
		out.Samples = append(out.Samples, sampleJSON{Actions: s.Actions, Trajectory: trajectoryJSON{XYZ: s.XYZ, Rot: s.Rot}})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}

func printPlan(w io.Writer, res *alpamayo.Result, pre time.Duration) {
	if res.AnswerIDs != nil {
		fmt.Fprintf(w, "answer (%d tokens): %q\n", len(res.AnswerIDs), res.Answer)
		fmt.Fprintf(w, "timing: preprocess %d ms, vision %d ms, prefill %d ms (%d tokens), decode %d ms, total %d ms\n",
			pre.Milliseconds(), res.Timing.Vision.Milliseconds(), res.Timing.Prefill.Milliseconds(), res.PromptTokens,
			res.Timing.Decode.Milliseconds(), res.Timing.Total.Milliseconds()+pre.Milliseconds())
		return
	}
	fmt.Fprintf(w, "reasoning (%d tokens): %q\n", len(res.ReasoningIDs), res.Reasoning)
	fmt.Fprintln(w, "trajectory (t0 frame, metres; every 0.5 s):")
	for i := 4; i < len(res.XYZ); i += 5 {
		a := res.Actions[i]
		fmt.Fprintf(w, "  t=%.1fs  x=%7.2f  y=%7.2f  z=%5.2f   accel=%6.2f m/s²  curvature=%7.4f 1/m\n",
			float64(i+1)*0.1, res.XYZ[i][0], res.XYZ[i][1], res.XYZ[i][2], a[0], a[1])
	}
	for i, s := range res.Samples {
		end := s.XYZ[len(s.XYZ)-1]
		fmt.Fprintf(w, "sample %d: at t=%.1fs x=%7.2f y=%7.2f\n", i+1, float64(len(s.XYZ))*0.1, end[0], end[1])
	}
	fmt.Fprintf(w, "timing: preprocess %d ms, vision %d ms, prefill %d ms (%d tokens), decode %d ms, diffusion %d ms, total %d ms\n",
		pre.Milliseconds(), res.Timing.Vision.Milliseconds(), res.Timing.Prefill.Milliseconds(), res.PromptTokens,
		res.Timing.Decode.Milliseconds(), res.Timing.Diffusion.Milliseconds(), res.Timing.Total.Milliseconds()+pre.Milliseconds())
}
