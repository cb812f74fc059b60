package alpamayo

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/cuda/cudatest"
	"vlanode/diffusion"
	"vlanode/models/qwen3vl"
	"vlanode/safetensors"
	"vlanode/tensor"
)

// ref15Dir holds a tiny random Alpamayo 1.5 checkpoint in the release's
// layout and what NVIDIA's own alpamayo1_5 code computed on it in float32:
// scripts/reference/alpamayo15_reference.py (the prompt of each case, the
// greedy reasoning or answer ids, the expert prefix, and the velocity at
// every Euler state).
const ref15Dir = "../../testdata/reference/alpamayo15-tiny"

// ref15Cases are the script's cases: R1's prompt, camera names and frame
// numbers, navigation text, two cameras, a question, and classifier-free
// guidance with a noise temperature.
var ref15Cases = []string{"plain", "cameras", "nav", "two-cams", "vqa", "cfg"}

// The image grid of every reference image (1×2×4 patches: 2 visual tokens).
var ref15Grid = qwen3vl.Grid{T: 1, H: 2, W: 4}

// Tolerances of the teacher-forced velocity. Both sides compute in float32
// from the same bf16 weights; here the KV cache the expert reads is each
// side's own VLM prefill, so the velocity differs by the prefill's rounding
// as well as the expert's (the expert alone: ≤ 2e-6, see
// diffusion/reference_test.go). A wrong mask, position or cache row moves
// it by more than 1e-2.
const (
	ref15VelAtol, ref15VelRtol = 1e-4, 1e-4
	// ref15CUDAScale is the cuda backend's bound as a share of max |v|:
	// TestCUDAExpertMatchesTransformers's 2%, which bf16 activations take.
	ref15CUDAScale = 0.02
)

// ref15 returns the reference folder, or skips the test loudly while the
// reference outputs have not been generated: once the folder exists,
// every file the tests read must be there.
func ref15(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(ref15Dir); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("SKIPPED: %s is missing: generate it on the GPU machine with "+
			"`python3 scripts/reference/alpamayo15_reference.py --nv .nv/alpamayo1_5 --out $OUT` "+
			"(NVIDIA's alpamayo1_5 source in .nv/alpamayo1_5) and copy $OUT/alpamayo15-tiny there", ref15Dir)
	}
	return ref15Dir
}

// ref15Case is one case's files.
type ref15Case struct {
	name    string
	in, exp *safetensors.File
}

func openRef15(t *testing.T, dir, name string) *ref15Case {
	t.Helper()
	c := &ref15Case{name: name}
	var err error
	c.in, err = safetensors.OpenFile(filepath.Join(dir, "inputs-"+name+".safetensors"))
	require.NoError(t, err)
	t.Cleanup(func() { c.in.Close() })
	c.exp, err = safetensors.OpenFile(filepath.Join(dir, "expected-"+name+".safetensors"))
	require.NoError(t, err)
	t.Cleanup(func() { c.exp.Close() })
	return c
}

func ref15F32(t *testing.T, f *safetensors.File, name string, shape ...int) []float32 {
	t.Helper()
	info, err := f.Expect(name, tensor.Invalid, shape...)
	require.NoError(t, err)
	v, err := info.F32()
	require.NoError(t, err)
	return v
}

func ref15I64(t *testing.T, f *safetensors.File, name string) []int64 {
	t.Helper()
	info, err := f.Tensor(name)
	require.NoError(t, err)
	v, err := info.I64()
	require.NoError(t, err)
	return v
}

func ref15I32(t *testing.T, f *safetensors.File, name string) []int32 {
	t.Helper()
	v := ref15I64(t, f, name)
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func (c *ref15Case) meta(key string) string { return c.in.Metadata()[key] }

func (c *ref15Case) metaFloat(t *testing.T, key string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(c.meta(key), 64)
	require.NoError(t, err, "%s: metadata %s", c.name, key)
	return v
}

// request is the case's inference as vlanode takes it: the same pixel rows
// and grids, cameras, history, text, noise and sampling.
func (c *ref15Case) request(t *testing.T, pixels []float32) *Request {
	t.Helper()
	n := int(ref15I64(t, c.in, "images")[0])
	rows := ref15Grid.Patches()
	dim := len(pixels) / (16 * rows)
	req := &Request{
		Images:   qwen3vl.Images{Pixels: pixels[:n*rows*dim]},
		NavText:  c.meta("nav_text"),
		Question: c.meta("question"),
		Greedy:   true,
		Noise:    ref15F32(t, c.in, "noise", 64, 2),
	}
	for range n {
		req.Images.Grids = append(req.Images.Grids, ref15Grid)
	}
	if c.in.Has("cameras") {
		for _, v := range ref15I64(t, c.in, "cameras") {
			req.Cameras = append(req.Cameras, int(v))
		}
	}
	xyz := ref15F32(t, c.in, "history_xyz", 16, 3)
	rot := ref15F32(t, c.in, "history_rot", 16, 9)
	if req.Question == "" {
		for i := range 16 {
			req.HistXYZ = append(req.HistXYZ, [3]float32(xyz[3*i:3*i+3]))
			req.HistRot = append(req.HistRot, [9]float32(rot[9*i:9*i+9]))
		}
	}
	var err error
	req.MaxReasoningTokens, err = strconv.Atoi(c.meta("max_new_tokens"))
	require.NoError(t, err)
	req.NoiseTemperature = c.metaFloat(t, "noise_temperature")
	req.GuidanceWeight = c.metaFloat(t, "guidance_weight")
	return req
}

// loadRef15 loads the reference checkpoint and its pixel rows on be.
func loadRef15(t *testing.T, be backend.Backend) (*Model, []float32) {
	t.Helper()
	dir := ref15(t)
	m, err := Load(be, dir, LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.True(t, m.Config.Is15(), "the reference checkpoint's model_type is alpamayo1_5")
	px, err := safetensors.OpenFile(filepath.Join(dir, "pixels.safetensors"))
	require.NoError(t, err)
	defer px.Close()
	info, err := px.Tensor("pixel_values")
	require.NoError(t, err)
	pixels, err := info.F32()
	require.NoError(t, err)
	return m, pixels
}

// TestAlpamayo15MatchesNVIDIA runs every reference case through Infer on
// the cpu backend: the prompt and the greedy reasoning (or answer) ids are
// NVIDIA's exactly; then, with the reference's tokens in the cache, the
// expert's velocity at each of NVIDIA's Euler states is NVIDIA's within
// the tolerances (guided, unguided and mixed with guidance).
func TestAlpamayo15MatchesNVIDIA(t *testing.T) {
	be, err := cpu.New()
	require.NoError(t, err)
	defer be.Close()
	m, pixels := loadRef15(t, be)
	for _, name := range ref15Cases {
		t.Run(name, func(t *testing.T) {
			c := openRef15(t, ref15Dir, name)
			req := c.request(t, pixels)
			res, err := m.Infer(context.Background(), req)
			require.NoError(t, err)
			assert.Equal(t, ref15I32(t, c.in, "input_ids"), res.PromptIDs, "prompt ids")
			want := ref15I32(t, c.exp, "reasoning_ids")
			if req.Question != "" {
				// vlanode stops at <|answer_end|>, where NVIDIA's answer ends
				got := res.AnswerIDs
				if i := slices.Index(want, int32(m.Tokens.AnswerEnd)); i >= 0 {
					want = want[:i+1]
					assert.Equal(t, c.exp.Metadata()["answer"], res.Answer)
				}
				assert.Equal(t, want, got, "answer ids")
				return
			}
			assert.Equal(t, want, res.ReasoningIDs, "greedy reasoning ids")
			c.checkVelocity(t, m, req, false)
		})
	}
}

// checkVelocity compares the expert's velocity at the reference's Euler
// states, on the cache of the reference's tokens (prompt and generation
// fed as they are): exactly within the tolerances on the cpu backend, as a
// share of max |v| on cuda.
func (c *ref15Case) checkVelocity(t *testing.T, m *Model, req *Request, cuda bool) {
	t.Helper()
	ctx := context.Background()
	prompt := ref15I32(t, c.in, "input_ids")
	gen := ref15I32(t, c.exp, "reasoning_ids")
	wantPrefix := ref15I64(t, c.exp, "prefix")
	guided, gsess := c.forcedPrefix(t, m, req, prompt, gen, int(wantPrefix[0]))
	defer gsess.Close()
	assert.Equal(t, wantPrefix, []int64{int64(guided.Len), int64(guided.Offset), int64(guided.RopeDelta)}, "guided prefix: L, offset, rope delta")

	xs := ref15F32(t, c.exp, "x_steps", -1, 64, 2)
	ts := ref15F32(t, c.exp, "time_steps", -1)
	steps := len(ts)
	require.Len(t, xs, steps*128)
	compare := func(what string, want, got []float32) {
		t.Helper()
		if cuda {
			var diff, scale float64
			for i := range want {
				diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
				scale = math.Max(scale, math.Abs(float64(want[i])))
			}
			t.Logf("%s: max |cuda - NVIDIA| = %.3g = %.2f%% of max %.3g", what, diff, 100*diff/scale, scale)
			assert.LessOrEqual(t, diff, ref15CUDAScale*scale, what)
			return
		}
		worst := 0.0
		for i := range want {
			d := math.Abs(float64(got[i] - want[i]))
			worst = math.Max(worst, d)
			if !(d <= ref15VelAtol+ref15VelRtol*math.Abs(float64(want[i]))) {
				t.Errorf("%s[%d] = %g, NVIDIA %g (|diff| %.3g)", what, i, got[i], want[i], d)
				return
			}
		}
		t.Logf("%s: max |diff| %.3g", what, worst)
	}
	velocities := func(p diffusion.Prefix, what string, want []float32) {
		for i := range steps {
			v, err := m.Expert.Velocity(ctx, p, xs[i*128:(i+1)*128], ts[i])
			require.NoError(t, err)
			compare(what+" step "+strconv.Itoa(i), want[i*128:(i+1)*128], v)
		}
	}
	velocities(guided, "velocity", ref15F32(t, c.exp, "v_steps", steps, 64, 2))
	if !c.exp.Has("unguided_prefix") {
		return
	}
	up, err := m.withoutRoute(prompt)
	require.NoError(t, err)
	wantU := ref15I64(t, c.exp, "unguided_prefix")
	// NVIDIA's unguided cache: the prompt without the route, then every
	// generated token (as Infer feeds it)
	unguided, usess := c.forcedPrefix(t, m, req, up, gen, len(up)+len(gen))
	defer usess.Close()
	assert.Equal(t, wantU, []int64{int64(unguided.Len), int64(unguided.Offset), int64(unguided.RopeDelta)}, "unguided prefix")
	velocities(unguided, "unguided velocity", ref15F32(t, c.exp, "unguided_v_steps", steps, 64, 2))
	w := float32(req.GuidanceWeight)
	field := m.Expert.GuidedField(guided, unguided, w)
	mixed := ref15F32(t, c.exp, "mixed_v_steps", steps, 64, 2)
	for i := range steps {
		v, err := field(ctx, xs[i*128:(i+1)*128], ts[i])
		require.NoError(t, err)
		compare("guided mix step "+strconv.Itoa(i), mixed[i*128:(i+1)*128], v)
	}
}

// forcedPrefix runs prompt through the VLM and feeds gen's tokens until
// the cache holds cacheLen, as the reference's cache did; the expert's
// prefix over it, with the offset vlanode computes.
func (c *ref15Case) forcedPrefix(t *testing.T, m *Model, req *Request, prompt, gen []int32, cacheLen int) (diffusion.Prefix, *qwen3vl.Session) {
	t.Helper()
	ctx := context.Background()
	feat, err := m.VLM.Vision.Encode(ctx, &req.Images)
	require.NoError(t, err)
	defer feat.Free(m.be)
	sess, err := m.VLM.NewSession(len(prompt) + len(gen) + m.Expert.Waypoints())
	require.NoError(t, err)
	_, err = sess.Prefill(ctx, qwen3vl.Prompt{IDs: prompt, Features: feat}, false)
	require.NoError(t, err)
	fed := cacheLen - len(prompt)
	require.True(t, fed >= 0 && fed <= len(gen), "%s: a cache of %d for a prompt of %d and %d generated tokens", c.name, cacheLen, len(prompt), len(gen))
	if fed > 0 {
		_, err = sess.Decode(ctx, gen[:fed], false)
		require.NoError(t, err)
	}
	offset := len(gen)
	if i := slices.Index(gen, int32(m.Tokens.FutureStart)); i >= 0 {
		offset = i + 1
	}
	return m.prefixOf(sess, len(prompt)+offset), sess
}

// TestCUDAAlpamayo15MatchesNVIDIA checks the velocities on the cuda
// backend, with the reference's tokens in the cache (its bf16 activations
// may pick other greedy tokens than float32 does: the ids are logged, not
// required).
func TestCUDAAlpamayo15MatchesNVIDIA(t *testing.T) {
	ref15(t)
	gpu := cudatest.Open(t)
	m, pixels := loadRef15(t, gpu)
	for _, name := range ref15Cases {
		t.Run(name, func(t *testing.T) {
			c := openRef15(t, ref15Dir, name)
			req := c.request(t, pixels)
			res, err := m.Infer(context.Background(), req)
			require.NoError(t, err)
			assert.Equal(t, ref15I32(t, c.in, "input_ids"), res.PromptIDs, "prompt ids")
			want := ref15I32(t, c.exp, "reasoning_ids")
			got := res.ReasoningIDs
			if req.Question != "" {
				got = res.AnswerIDs
			}
			t.Logf("greedy ids on cuda equal NVIDIA's float32 ones: %v (%d of %d)", slices.Equal(want, got), len(got), len(want))
			if req.Question == "" {
				c.checkVelocity(t, m, req, true)
			}
		})
	}
}
