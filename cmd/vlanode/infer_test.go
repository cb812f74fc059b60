package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/safetensors"
	"vlanode/synth"
)

// tinyAlpamayo writes the alpamayo-r1-tiny checkpoint into a test folder.
func tinyAlpamayo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	l, err := synth.NewLayout(synth.AlpamayoR1Tiny)
	require.NoError(t, err)
	_, err = synth.Write(context.Background(), dir, l, synth.Options{Seed: 3})
	require.NoError(t, err)
	return dir
}

// pngImages writes n small gradient PNGs and returns their paths.
func pngImages(t *testing.T, n int) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i := range n {
		img := image.NewRGBA(image.Rect(0, 0, 192, 108))
		for y := range 108 {
			for x := range 192 {
				img.Set(x, y, color.RGBA{uint8(x + i), uint8(y * 2), uint8(x ^ y), 255})
			}
		}
		p := filepath.Join(dir, fmt.Sprintf("%02d.png", i))
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, png.Encode(f, img))
		require.NoError(t, f.Close())
		paths = append(paths, p)
	}
	return paths
}

func TestInferJSON(t *testing.T) {
	model := tinyAlpamayo(t)
	images := pngImages(t, 16)
	args := append([]string{"infer", "--model", model, "--device", "cpu", "--greedy", "--max-reasoning-tokens", "6", "--json", "--images"}, images...)
	code, stdout, stderr := runCLI(args...)
	require.Equal(t, 0, code, stderr)
	var out struct {
		Reasoning    string       `json:"reasoning"`
		ReasoningIDs []int        `json:"reasoning_ids"`
		Actions      [][2]float64 `json:"actions"`
		Trajectory   struct {
			XYZ [][3]float64 `json:"xyz"`
			Rot [][9]float64 `json:"rot"`
		} `json:"trajectory"`
		TimingMs map[string]int64 `json:"timing_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	assert.Len(t, out.Actions, 64)
	assert.Len(t, out.Trajectory.XYZ, 64)
	assert.Len(t, out.Trajectory.Rot, 64)
	assert.NotEmpty(t, out.ReasoningIDs)
	assert.LessOrEqual(t, len(out.ReasoningIDs), 6)
	assert.Contains(t, out.TimingMs, "prefill")
	assert.Contains(t, stderr, "assuming 16 poses driving straight")

	// --noise fixes the flow's start: the same noise gives the same plan.
	noise := filepath.Join(t.TempDir(), "noise.safetensors")
	vals := make([]float32, 128)
	for i := range vals {
		vals[i] = float32(i%7) / 7
	}
	require.NoError(t, safetensors.WriteFile(noise, []safetensors.Tensor{safetensors.F32Tensor("noise", []int{1, 64, 2}, vals)}, nil))
	withNoise := append([]string{"infer", "--model", model, "--device", "cpu", "--greedy", "--max-reasoning-tokens", "2", "--json", "--noise", noise, "--images"}, images...)
	plan := func() map[string]any {
		code, stdout, stderr := runCLI(withNoise...)
		require.Equal(t, 0, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m))
		delete(m, "timing_ms")
		return m
	}
	assert.Equal(t, plan(), plan())
}

func TestInferBadInputs(t *testing.T) {
	model := tinyAlpamayo(t)
	images := pngImages(t, 16)
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.png")
	require.NoError(t, os.WriteFile(corrupt, []byte("\x89PNG\r\n\x1a\nnot really"), 0o644))
	shortEgo := filepath.Join(dir, "ego.json")
	require.NoError(t, os.WriteFile(shortEgo, []byte(`[{"xyz":[0,0,0],"rot":[1,0,0,0,1,0,0,0,1]}]`), 0o644))
	badNoise := filepath.Join(dir, "noise.safetensors")
	require.NoError(t, safetensors.WriteFile(badNoise, []safetensors.Tensor{safetensors.F32Tensor("noise", []int{1, 32, 2}, make([]float32, 64))}, nil))

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no images", []string{"--model", model}, 2, "--images needs at least one image"},
		{"corrupt image", []string{"--model", model, "--images", corrupt}, 1, "corrupt.png: not a JPEG or PNG image"},
		{"missing image", []string{"--model", model, "--images", filepath.Join(dir, "nope.png")}, 1, "nope.png"},
		{"short ego history", append([]string{"--model", model, "--ego", shortEgo, "--images"}, images...), 1, "want 16 poses"},
		{"noise of the wrong shape", append([]string{"--model", model, "--noise", badNoise, "--images"}, images...), 1, "shape [1 32 2]"},
		{"not an alpamayo checkpoint", append([]string{"--model", filepath.Join("..", "..", "testdata", "reference", "qwen3-mha-untied"), "--images"}, images...), 1, `model_type "qwen3"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI(append([]string{"infer", "--device", "cpu"}, c.args...)...)
			assert.Equal(t, c.code, code, stderr)
			assert.Contains(t, stderr, c.want)
		})
	}
}

func TestSplitList(t *testing.T) {
	rest, vals := splitList([]string{"--model", "m", "--images", "a", "b", "--json", "--images=c"}, "images")
	assert.Equal(t, []string{"--model", "m", "--json"}, rest)
	assert.Equal(t, []string{"a", "b", "c"}, vals)
}

// TestInferBudget runs infer within budgets that stream every unit
// (pipelined and sequential) and checks the plan is the one of the
// unlimited run, bit for bit; a budget below the plan's minimum and
// preload within it are refused with the reason.
func TestInferBudget(t *testing.T) {
	model := tinyAlpamayo(t)
	images := pngImages(t, 16)
	base := append([]string{"infer", "--model", model, "--device", "cpu", "--max-reasoning-tokens", "4", "--seed", "9", "--json", "--images"}, images...)
	plan := func(extra ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := runCLI(append(append([]string{}, base...), extra...)...)
		require.Equal(t, 0, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m))
		delete(m, "timing_ms")
		return m
	}
	minBudget := tinyMinBudget(t, model)
	min := fmt.Sprint(minBudget)

	want := plan()
	assert.Equal(t, want, plan("--budget", min), "pipelined, every unit streamed")
	assert.Equal(t, want, plan("--budget", min, "--mode", "sequential"))

	code, _, stderr := runCLI(append(append([]string{}, base...), "--budget", fmt.Sprint(minBudget-1))...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "minimum")
	code, _, stderr = runCLI(append(append([]string{}, base...), "--budget", min, "--mode", "preload")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--mode preload: the budget")
}

// tinyMinBudget asks the planner for the smallest budget the checkpoint in
// model plans within (every unit streamed).
func tinyMinBudget(t *testing.T, model string) int64 {
	t.Helper()
	code, stdout, stderr := runCLI("plan", "--model", model, "--budget", "none", "--json")
	require.Equal(t, 0, code, stderr)
	var p struct {
		Min int64 `json:"min_budget_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &p))
	return p.Min
}

// TestInferTargetSpellings runs infer on the tiny checkpoint with its
// config.json's _target_ values written as NVIDIA's code writes them in
// other places: the full module paths of training and converted configs,
// and Alpamayo 1.5's alpamayo1_5.* names. Each loads, and the plan is the
// one of the published spellings.
func TestInferTargetSpellings(t *testing.T) {
	model := tinyAlpamayo(t)
	images := pngImages(t, 16)
	args := append([]string{"infer", "--model", model, "--device", "cpu", "--greedy", "--max-reasoning-tokens", "2", "--seed", "5", "--json", "--images"}, images...)
	plan := func() map[string]any {
		t.Helper()
		code, stdout, stderr := runCLI(args...)
		require.Equal(t, 0, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m))
		delete(m, "timing_ms")
		return m
	}
	want := plan()
	path := filepath.Join(model, "config.json")
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, spelling := range []map[string]string{
		{
			"action_space_cfg":        "alpamayo_r1.action_space.unicycle_accel_curvature.UnicycleAccelCurvatureActionSpace",
			"action_in_proj_cfg":      "alpamayo_r1.models.action_in_proj.PerWaypointActionInProjV2",
			"action_out_proj_cfg":     "torch.nn.modules.linear.Linear",
			"diffusion_cfg":           "alpamayo_r1.diffusion.flow_matching.FlowMatching",
			"traj_tokenizer_cfg":      "alpamayo_r1.action_space.DiscreteTrajectoryTokenizer",
			"hist_traj_tokenizer_cfg": "alpamayo_r1.models.delta_tokenizer.DeltaTrajectoryTokenizer",
		},
		{
			"action_space_cfg":        "alpamayo1_5.action_space.UnicycleAccelCurvatureActionSpace",
			"action_in_proj_cfg":      "alpamayo1_5.models.action_in_proj.PerWaypointActionInProjV2",
			"action_out_proj_cfg":     "torch.nn.Linear",
			"diffusion_cfg":           "alpamayo1_5.diffusion.flow_matching.FlowMatching",
			"traj_tokenizer_cfg":      "alpamayo1_5.action_space.discrete_action_space.DiscreteTrajectoryTokenizer",
			"hist_traj_tokenizer_cfg": "alpamayo1_5.models.delta_tokenizer.DeltaTrajectoryTokenizer",
		},
	} {
		var cfg map[string]any
		require.NoError(t, json.Unmarshal(orig, &cfg))
		for key, target := range spelling {
			cfg[key].(map[string]any)["_target_"] = target
		}
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
		assert.Equal(t, want, plan(), "%v", spelling)
	}

	// another class is refused, naming the key, the value and the names
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(orig, &cfg))
	cfg["action_space_cfg"].(map[string]any)["_target_"] = "alpamayo_r1.action_space.BicycleActionSpace"
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	code, _, stderr := runCLI(args...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `action_space_cfg._target_ "alpamayo_r1.action_space.BicycleActionSpace" is not supported`)
	assert.Contains(t, stderr, "alpamayo_r1.action_space.unicycle_accel_curvature.UnicycleAccelCurvatureActionSpace")
}

// tinyAlpamayo15 writes the alpamayo-1.5-tiny checkpoint into a test folder.
func tinyAlpamayo15(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	l, err := synth.NewLayout(synth.Alpamayo15Tiny)
	require.NoError(t, err)
	_, err = synth.Write(context.Background(), dir, l, synth.Options{Seed: 3})
	require.NoError(t, err)
	return dir
}

// TestInfer15 runs infer's Alpamayo 1.5 flags on the tiny 1.5 checkpoint:
// two cameras with navigation text plan, a question answers, and a wrong
// number of images is refused with what was expected.
func TestInfer15(t *testing.T) {
	model := tinyAlpamayo15(t)
	images := pngImages(t, 16)
	base := []string{"infer", "--model", model, "--device", "cpu", "--greedy", "--max-reasoning-tokens", "3", "--json"}
	run := func(extra ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := runCLI(append(append([]string{}, base...), extra...)...)
		require.Equal(t, 0, code, stderr)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m), stdout)
		return m
	}
	nav := run(append([]string{"--camera-order", "front_tele_30fov,front_wide_120fov", "--nav-text", "Turn right in 30m", "--guidance", "1.5", "--images"}, images[:8]...)...)
	assert.Len(t, nav["actions"], 64)
	assert.Equal(t, 1.5, nav["guidance_weight"])
	assert.Equal(t, 0.0, nav["vram_peak_bytes"], "the cpu backend has no device memory")

	vqa := run(append([]string{"--question", "What is ahead?", "--images"}, images...)...)
	assert.NotEmpty(t, vqa["answer_ids"])
	assert.Contains(t, vqa, "answer")
	assert.Empty(t, vqa["actions"])

	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"--images"}, images[:3]...), "got 3 images, want 16: 4 frames of each of the cameras cross_left_120fov, front_wide_120fov, cross_right_120fov, front_tele_30fov"},
		{append([]string{"--camera-order", "front_wide_120fov,front_tele_30fov", "--images"}, images[:4]...), "got 4 images for --camera-order front_wide_120fov,front_tele_30fov, want 8"},
		{append([]string{"--camera-order", "front_wide_120fov,roof", "--images"}, images[:8]...), `--camera-order: alpamayo: bad model input: unknown camera "roof"`},
	} {
		code, _, stderr := runCLI(append(append([]string{}, base...), c.args...)...)
		assert.Equal(t, 2, code, stderr)
		assert.Contains(t, stderr, c.want)
	}

	// Alpamayo-R1 has no navigation input
	code, _, stderr := runCLI(append([]string{"infer", "--model", tinyAlpamayo(t), "--device", "cpu", "--nav-text", "Turn left", "--images"}, images...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "navigation text is Alpamayo 1.5's input")
}

// TestInfer15Budget runs guidance (a second prefill, the generation fed to
// it, two expert passes per Euler step) and a question (no diffusion)
// through the executor with every unit streamed: the schedule has their
// passes, and the results are the unlimited run's bit for bit.
func TestInfer15Budget(t *testing.T) {
	model := tinyAlpamayo15(t)
	images := pngImages(t, 16)
	min := fmt.Sprint(tinyMinBudget(t, model))
	for _, extra := range [][]string{
		{"--nav-text", "Turn left in 30m", "--guidance", "1.5"},
		{"--question", "Is the road clear?"},
	} {
		base := append(append([]string{"infer", "--model", model, "--device", "cpu", "--max-reasoning-tokens", "3", "--seed", "4", "--json"}, extra...), "--images")
		base = append(base, images...)
		plan := func(more ...string) map[string]any {
			t.Helper()
			code, stdout, stderr := runCLI(append(append([]string{}, base...), more...)...)
			require.Equal(t, 0, code, stderr)
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(stdout), &m))
			delete(m, "timing_ms")
			return m
		}
		want := plan()
		assert.Equal(t, want, plan("--budget", min), "%v: pipelined, every unit streamed", extra)
		assert.Equal(t, want, plan("--budget", min, "--mode", "sequential"), "%v: sequential", extra)
	}
}
