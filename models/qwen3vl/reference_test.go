package qwen3vl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/models/qwen3vl"
	"vlanode/safetensors"
	"vlanode/sample"
)

// referenceDir holds tiny Qwen3-VL checkpoints and what Hugging Face
// transformers 5.17 computed for them (scripts/reference/qwen3vl_reference.py).
const referenceDir = "../../testdata/reference"

// Tolerances. transformers computed in float32 (IEEE matmuls and convs, no
// TF32; eager attention) from the same bf16 weights vlanode loads, so the
// two differ only by summation order and float32 roundings of cos, sin,
// tanh and erf. Measured over all five cases (go test -v prints them):
// vision hidden states ≤ 1.7e-5 on values up to 17 (≤ 1.1e-5 relative to
// max(|ref|, 1)), visual tokens and DeepStack features ≤ 5e-6, logits
// ≤ 4.6e-5 on values up to 32 (prefill and each decode step). The
// tolerances leave ≥ 4x headroom and still catch real mistakes: with the
// height and width mrope frequencies swapped every case fails (its first
// failing logit off by 0.01 to 0.14), and so with the DeepStack features
// added one layer late (off by 0.16 to 2.9).
const (
	visionAtol = 1e-4
	visionRtol = 1e-5
	logitAtol  = 2e-4
	logitRtol  = 1e-4
)

// refCase is one input case of one reference checkpoint.
type refCase struct {
	dir, name string // checkpoint dir, input case name ("main", "one-image", ...)
	prompt    qwen3vl.Prompt
	exp       *safetensors.File
}

func (c refCase) String() string { return filepath.Base(c.dir) + "/" + c.name }

// referenceCases lists every input case of every qwen3_vl checkpoint.
func referenceCases(t *testing.T) []refCase {
	t.Helper()
	entries, err := os.ReadDir(referenceDir)
	require.NoError(t, err, "reference outputs missing: run scripts/reference/qwen3vl_reference.py on the GPU machine")
	var cases []refCase
	for _, e := range entries {
		dir := filepath.Join(referenceDir, e.Name())
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if !e.IsDir() || err != nil {
			continue
		}
		var head struct {
			ModelType string `json:"model_type"`
		}
		require.NoError(t, json.Unmarshal(raw, &head))
		if head.ModelType != "qwen3_vl" {
			continue
		}
		inputs, err := filepath.Glob(filepath.Join(dir, "inputs*.safetensors"))
		require.NoError(t, err)
		sort.Strings(inputs)
		for _, in := range inputs {
			suffix := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(in), "inputs"), ".safetensors")
			name := strings.TrimPrefix(suffix, "-")
			if name == "" {
				name = "main"
			}
			p, err := qwen3vl.ReadPrompt(in)
			require.NoError(t, err)
			exp, err := safetensors.OpenFile(filepath.Join(dir, "expected"+suffix+".safetensors"))
			require.NoError(t, err)
			t.Cleanup(func() { exp.Close() })
			cases = append(cases, refCase{dir: dir, name: name, prompt: p, exp: exp})
		}
	}
	require.GreaterOrEqual(t, len(cases), 4, "expected the qwen3vl reference cases (two checkpoints, one and several images)")
	return cases
}

// loadModel loads a case's checkpoint on the cpu backend.
func loadModel(t *testing.T, dir string) (*qwen3vl.Model, backend.Backend) {
	t.Helper()
	be, err := cpu.New()
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	ck, err := safetensors.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	m, err := qwen3vl.Load(be, dir, ck)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m, be
}

func expectedF32(t *testing.T, c refCase, name string) ([]float32, []int) {
	t.Helper()
	info, err := c.exp.Tensor(name)
	require.NoError(t, err)
	v, err := info.F32()
	require.NoError(t, err)
	return v, info.Shape
}

// assertClose fails at the first element outside atol + rtol·|want| and
// returns the largest absolute difference.
func assertClose(t *testing.T, what string, got, want []float32, atol, rtol float64) float64 {
	t.Helper()
	require.Len(t, got, len(want), what)
	maxAbs, maxRel, maxWant := 0.0, 0.0, 0.0
	for i := range want {
		w := math.Abs(float64(want[i]))
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if !(d <= atol+rtol*w) {
			require.Failf(t, "mismatch", "%s[%d]: got %g, transformers %g", what, i, got[i], want[i])
		}
		maxAbs, maxWant = math.Max(maxAbs, d), math.Max(maxWant, w)
		maxRel = math.Max(maxRel, d/math.Max(w, 1))
	}
	if testing.Verbose() {
		t.Logf("  %s: max |diff| %.3g, max |diff|/max(|ref|,1) %.3g, max |ref| %.3g", what, maxAbs, maxRel, maxWant)
	}
	return maxAbs
}

func download(t *testing.T, be backend.Backend, x backend.Tensor) []float32 {
	t.Helper()
	v, err := be.Download(x)
	require.NoError(t, err)
	return v
}

func TestRopeIndexMatchesTransformers(t *testing.T) {
	for _, c := range referenceCases(t) {
		t.Run(c.String(), func(t *testing.T) {
			info, err := c.exp.Tensor("position_ids")
			require.NoError(t, err)
			want, err := info.I64()
			require.NoError(t, err)
			dinfo, err := c.exp.Tensor("rope_deltas")
			require.NoError(t, err)
			delta, err := dinfo.I64()
			require.NoError(t, err)
			pos, d, err := qwen3vl.RopeIndex(c.prompt.TokenTypes, c.prompt.Images.Grids, 2)
			require.NoError(t, err)
			T := len(c.prompt.IDs)
			for a := range 3 {
				got := make([]int64, T)
				for i, p := range pos[a] {
					got[i] = int64(p)
				}
				assert.Equal(t, want[a*T:(a+1)*T], got, "axis %d", a)
			}
			assert.Equal(t, delta[0], int64(d), "rope_deltas")
		})
	}
}

func TestVisionMatchesTransformers(t *testing.T) {
	for _, c := range referenceCases(t) {
		t.Run(c.String(), func(t *testing.T) {
			m, be := loadModel(t, c.dir)
			ctx := context.Background()
			p, err := m.Vision.Begin(c.prompt.Images)
			require.NoError(t, err)
			defer p.Close()
			want, _ := expectedF32(t, c, "vision_input")
			worst := assertClose(t, "vision_input", download(t, be, p.Hidden()), want, visionAtol, visionRtol)
			blocks, shape := expectedF32(t, c, "vision_blocks")
			n := shape[1] * shape[2]
			for i := range m.Config.Vision.Depth {
				require.NoError(t, p.RunBlock(ctx))
				d := assertClose(t, fmt.Sprintf("vision block %d", i), download(t, be, p.Hidden()), blocks[i*n:(i+1)*n], visionAtol, visionRtol)
				worst = math.Max(worst, d)
			}
			f, err := p.Finish()
			require.NoError(t, err)
			defer f.Free(be)
			want, _ = expectedF32(t, c, "image_embeds")
			tok := assertClose(t, "image_embeds", download(t, be, f.Embeds), want, visionAtol, visionRtol)
			ds, shape := expectedF32(t, c, "deepstack_embeds")
			n = shape[1] * shape[2]
			blocksOf, mergers := m.Config.Vision.DeepstackOrder()
			require.Len(t, f.Deepstack, len(blocksOf))
			for k, j := range mergers {
				d := assertClose(t, fmt.Sprintf("deepstack %d", k), download(t, be, f.Deepstack[k]), ds[j*n:(j+1)*n], visionAtol, visionRtol)
				tok = math.Max(tok, d)
			}
			t.Logf("%s: max |diff| vision hidden states %.3g, visual tokens %.3g", c, worst, tok)
		})
	}
}

// TestVisionRepeatedGrids embeds images whose grids repeat (the first
// image again after the others): a repeated grid's position rows are copied
// on the device from its first image's, and every image's rows must still
// be transformers' embedding of that image.
func TestVisionRepeatedGrids(t *testing.T) {
	var c refCase
	for _, rc := range referenceCases(t) {
		if len(rc.prompt.Images.Grids) > 1 {
			c = rc
			break
		}
	}
	require.NotNil(t, c.prompt.Images, "no reference case with several images")
	m, be := loadModel(t, c.dir)
	im := c.prompt.Images
	dim := len(im.Pixels) / im.Patches()
	first := im.Grids[0].Patches()
	rep := qwen3vl.Images{
		Pixels: append(append([]float32(nil), im.Pixels...), im.Pixels[:first*dim]...),
		Grids:  append(append([]qwen3vl.Grid(nil), im.Grids...), im.Grids[0]),
	}
	p, err := m.Vision.Begin(&rep)
	require.NoError(t, err)
	defer p.Close()
	want, _ := expectedF32(t, c, "vision_input")
	hidden := len(want) / im.Patches()
	want = append(want, want[:first*hidden]...)
	assertClose(t, "vision_input with the first image repeated", download(t, be, p.Hidden()), want, visionAtol, visionRtol)
}

func TestLogitsMatchTransformers(t *testing.T) {
	for _, c := range referenceCases(t) {
		t.Run(c.String(), func(t *testing.T) {
			m, _ := loadModel(t, c.dir)
			sess, err := m.NewSession(len(c.prompt.IDs))
			require.NoError(t, err)
			defer sess.Close()
			got, err := sess.Prefill(context.Background(), c.prompt, true)
			require.NoError(t, err)
			want, shape := expectedF32(t, c, "logits")
			require.Equal(t, []int{len(c.prompt.IDs), m.Config.Text.VocabSize}, shape)
			d := assertClose(t, "logits", got, want, logitAtol, logitRtol)
			t.Logf("%s: max |logit - transformers| = %.3g over %d logits", c, d, len(want))
		})
	}
}

// TestDecodeMatchesTransformers prefills the prompt, then decodes greedily
// through the KV cache with positions continuing at rope_deltas: the step
// logits and ids must match transformers' full forward over prompt +
// greedy ids (and its generate(), which the script checked agrees).
func TestDecodeMatchesTransformers(t *testing.T) {
	for _, c := range referenceCases(t) {
		t.Run(c.String(), func(t *testing.T) {
			m, _ := loadModel(t, c.dir)
			info, err := c.exp.Tensor("greedy_ids")
			require.NoError(t, err)
			want, err := info.I64()
			require.NoError(t, err)
			steps, _ := expectedF32(t, c, "step_logits")
			sess, err := m.NewSession(len(c.prompt.IDs) + len(want))
			require.NoError(t, err)
			defer sess.Close()
			ctx := context.Background()
			logits, err := sess.Prefill(ctx, c.prompt, false)
			require.NoError(t, err)
			v := m.Config.Text.VocabSize
			var got []int64
			worst := 0.0
			for len(got) < len(want) {
				d := assertClose(t, fmt.Sprintf("step %d logits", len(got)), logits, steps[len(got)*v:(len(got)+1)*v], logitAtol, logitRtol)
				worst = math.Max(worst, d)
				next := sample.Greedy(logits)
				got = append(got, int64(next))
				logits, err = sess.Decode(ctx, []int32{int32(next)}, false)
				require.NoError(t, err)
			}
			assert.Equal(t, want, got)
			assert.Equal(t, len(c.prompt.IDs)+len(want), sess.Len())
			t.Logf("%s: decode steps max |diff| %.3g; rope delta %d", c, worst, sess.RopeDelta())
		})
	}
}
