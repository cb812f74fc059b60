package qwen3_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/cpu"
	"vlanode/models/qwen3"
	"vlanode/safetensors"
	"vlanode/sample"
)

// referenceDir holds tiny Qwen3 checkpoints and the logits and greedy ids
// that Hugging Face transformers computed for them (scripts/reference).
const referenceDir = "../../testdata/reference"

// Tolerance for logits. transformers computed them in float32 from the same
// bf16 weights (IEEE fp32 matmuls, no TF32; eager attention), as vlanode's
// cpu backend does, so the two differ only in summation order, a few float32
// ulps per op. Measured: at most 2.8e-5 over logits of magnitude up to 33
// (qwen3-gqa4-tied). 2e-4 absolute plus 1e-4 relative leaves ~7x headroom and
// still catches small mistakes: an rms_norm_eps ten times too large moves a
// logit by 2.5e-4 and fails; a missing q norm fails by far more.
const (
	atol = 2e-4
	rtol = 1e-4
)

func referenceCases(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(referenceDir)
	require.NoError(t, err, "reference outputs missing: run scripts/reference/qwen3_reference.py on the GPU machine")
	var cases []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(referenceDir, e.Name(), "config.json"))
		require.NoError(t, err)
		var head struct {
			ModelType string `json:"model_type"`
		}
		require.NoError(t, json.Unmarshal(raw, &head))
		if head.ModelType == "qwen3" {
			cases = append(cases, e.Name())
		}
	}
	require.GreaterOrEqual(t, len(cases), 3, "expected at least three qwen3 reference checkpoints")
	return cases
}

func loadCase(t *testing.T, dir string) (*qwen3.Model, []int32, *safetensors.File) {
	t.Helper()
	be, err := cpu.New()
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	ck, err := safetensors.Open(dir)
	require.NoError(t, err)
	t.Cleanup(func() { ck.Close() })
	m, err := qwen3.Load(be, dir, ck)
	require.NoError(t, err)
	t.Cleanup(m.Close)

	in, err := safetensors.OpenFile(filepath.Join(dir, "inputs.safetensors"))
	require.NoError(t, err)
	t.Cleanup(func() { in.Close() })
	info, err := in.Tensor("input_ids")
	require.NoError(t, err)
	raw, err := info.I64()
	require.NoError(t, err)
	ids := make([]int32, len(raw))
	for i, v := range raw {
		ids[i] = int32(v)
	}
	exp, err := safetensors.OpenFile(filepath.Join(dir, "expected.safetensors"))
	require.NoError(t, err)
	t.Cleanup(func() { exp.Close() })
	return m, ids, exp
}

func TestLogitsMatchTransformers(t *testing.T) {
	for _, name := range referenceCases(t) {
		t.Run(name, func(t *testing.T) {
			m, ids, exp := loadCase(t, filepath.Join(referenceDir, name))
			sess, err := m.NewSession(len(ids))
			require.NoError(t, err)
			defer sess.Close()
			got, err := sess.Forward(context.Background(), ids, true)
			require.NoError(t, err)
			info, err := exp.Expect("logits", 0, len(ids), m.Config.VocabSize)
			require.NoError(t, err)
			want, err := info.F32()
			require.NoError(t, err)
			maxAbs := 0.0
			for i := range want {
				d := math.Abs(float64(got[i] - want[i]))
				maxAbs = math.Max(maxAbs, d)
				if d > atol+rtol*math.Abs(float64(want[i])) {
					t.Fatalf("logit %d (position %d, token %d): got %g, transformers %g", i, i/m.Config.VocabSize, i%m.Config.VocabSize, got[i], want[i])
				}
			}
			t.Logf("%s: max |logit - transformers| = %.3g over %d logits", name, maxAbs, len(want))
		})
	}
}

func TestGreedyMatchesTransformers(t *testing.T) {
	for _, name := range referenceCases(t) {
		t.Run(name, func(t *testing.T) {
			m, ids, exp := loadCase(t, filepath.Join(referenceDir, name))
			info, err := exp.Tensor("greedy_ids")
			require.NoError(t, err)
			want, err := info.I64()
			require.NoError(t, err)
			sess, err := m.NewSession(len(ids) + len(want))
			require.NoError(t, err)
			defer sess.Close()
			ctx := context.Background()
			logits, err := sess.Forward(ctx, ids, false)
			require.NoError(t, err)
			stepInfo, err := exp.Expect("step_logits", 0, len(want), m.Config.VocabSize)
			require.NoError(t, err)
			steps, err := stepInfo.F32()
			require.NoError(t, err)
			v := m.Config.VocabSize
			got := make([]int64, 0, len(want))
			for len(got) < len(want) {
				ref := steps[len(got)*v : (len(got)+1)*v]
				for i := range ref {
					require.InDelta(t, ref[i], logits[i], atol+rtol*math.Abs(float64(ref[i])), "step %d logit %d", len(got), i)
				}
				next := sample.Greedy(logits)
				got = append(got, int64(next))
				logits, err = sess.Forward(ctx, []int32{int32(next)}, false)
				require.NoError(t, err)
			}
			assert.Equal(t, want, got, "greedy ids through the KV cache must equal transformers' generate")
		})
	}
}

// TestIncrementalEqualsFull checks that decoding through the KV cache gives
// the same last-position logits as one forward over the whole sequence.
func TestIncrementalEqualsFull(t *testing.T) {
	name := referenceCases(t)[0]
	m, ids, _ := loadCase(t, filepath.Join(referenceDir, name))
	ctx := context.Background()
	full, err := m.NewSession(len(ids))
	require.NoError(t, err)
	defer full.Close()
	all, err := full.Forward(ctx, ids, true)
	require.NoError(t, err)

	inc, err := m.NewSession(len(ids))
	require.NoError(t, err)
	defer inc.Close()
	split := len(ids) / 2
	_, err = inc.Forward(ctx, ids[:split], false)
	require.NoError(t, err)
	var last []float32
	for _, id := range ids[split:] {
		last, err = inc.Forward(ctx, []int32{id}, false)
		require.NoError(t, err)
	}
	v := m.Config.VocabSize
	want := all[(len(ids)-1)*v:]
	for i := range want {
		require.InDelta(t, want[i], last[i], 1e-4, "logit %d", i)
	}
}

func TestSessionBounds(t *testing.T) {
	name := referenceCases(t)[0]
	m, ids, _ := loadCase(t, filepath.Join(referenceDir, name))
	sess, err := m.NewSession(len(ids) - 1)
	require.NoError(t, err)
	defer sess.Close()
	_, err = sess.Forward(context.Background(), ids, false)
	assert.ErrorContains(t, err, "do not fit")
	_, err = sess.Forward(context.Background(), []int32{int32(m.Config.VocabSize)}, false)
	assert.ErrorContains(t, err, "outside the vocabulary")
	_, err = m.NewSession(m.Config.MaxPositionEmbeddings + 1)
	assert.ErrorContains(t, err, "max_position_embeddings")
}
