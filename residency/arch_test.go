package residency

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/synth"
	"vlanode/tensor"
	"vlanode/weights"
)

// unitOf maps a checkpoint tensor name to the unit whose blob holds it
// (the grouping of models/qwen3vl, models/qwen3 and diffusion); "" for
// tensors read on the host (the action space buffers, the Fourier
// frequencies).
var unitRules = []struct {
	re     *regexp.Regexp
	module Module
}{
	{regexp.MustCompile(`model\.visual\.(patch_embed|pos_embed)\.`), PatchEmbed},
	{regexp.MustCompile(`model\.visual\.blocks\.(\d+)\.`), Vision},
	{regexp.MustCompile(`model\.visual\.deepstack_merger_list\.(\d+)\.`), Deepstack},
	{regexp.MustCompile(`model\.visual\.merger\.`), Merger},
	{regexp.MustCompile(`language_model\.embed_tokens\.`), Embedding},
	{regexp.MustCompile(`language_model\.layers\.(\d+)\.`), VLM},
	{regexp.MustCompile(`(language_model\.norm\.|lm_head\.)`), LMHead},
	{regexp.MustCompile(`^expert\.layers\.(\d+)\.`), Expert},
	{regexp.MustCompile(`^(expert\.norm\.|action_out_proj\.)`), ActionOut},
	{regexp.MustCompile(`^action_in_proj\.(encoder|norm)\.`), ActionIn},
}

func unitOf(name string) (Module, int, bool) {
	for _, r := range unitRules {
		m := r.re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		idx := 0
		if len(m) > 1 {
			if n, err := strconv.Atoi(m[1]); err == nil {
				idx = n
			}
		}
		return r.module, idx, true
	}
	return "", 0, false
}

// TestUnitsMatchSynth groups every tensor synth writes into the models'
// units and checks that the planner's units have exactly those blob sizes
// (the LM head: the same elements, cut into blocks), for all three
// architectures synth knows.
func TestUnitsMatchSynth(t *testing.T) {
	for _, arch := range synth.Archs() {
		t.Run(string(arch), func(t *testing.T) {
			l, err := synth.NewLayout(arch)
			require.NoError(t, err)
			groups := map[string][]weights.Spec{}
			for _, ts := range l.Tensors {
				m, idx, ok := unitOf(ts.Name)
				if !ok {
					assert.Regexp(t, `^action_space\.|freqs$`, ts.Name, "tensor in no unit")
					continue
				}
				k := fmt.Sprintf("%s.%d", m, idx)
				groups[k] = append(groups[k], weights.Spec{Name: ts.Name, DType: ts.DType, Shape: ts.Shape})
			}
			units, err := archOf(t, arch).Units(StandardWorkload())
			require.NoError(t, err)
			var headElems, headWant int64
			seen := map[string]bool{}
			for _, u := range units {
				if u.Module == LMHead {
					headElems += u.Bytes // compared below, in elements
					continue
				}
				want, ok := groups[u.String()]
				require.True(t, ok, "planner unit %s has no tensors in synth's layout", u.String())
				_, size := weights.Layout(want)
				assert.Equal(t, size, u.Bytes, u.String())
				seen[u.String()] = true
			}
			for k, specs := range groups {
				if m, _, _ := unitOf(specs[0].Name); m == LMHead {
					for _, s := range specs {
						headWant += int64(tensor.NumElements(s.Shape)) * int64(s.DType.Size())
					}
					continue
				}
				assert.True(t, seen[k], "synth unit %s is missing from the plan", k)
			}
			// The head's blocks hold its bytes plus at most 256 bytes of
			// padding per tensor.
			blocks := int64(count(units, LMHead))
			assert.GreaterOrEqual(t, headElems, headWant)
			assert.LessOrEqual(t, headElems, headWant+(blocks+1)*weights.Align)
		})
	}
}

func count(units []Unit, m Module) int {
	n := 0
	for _, u := range units {
		if u.Module == m {
			n++
		}
	}
	return n
}

// TestAlpamayoUnits checks the 10B's unit list: counts, order, the sizes
// DESIGN.md gives, the LM head cut to fit a VLM layer's slot, and the work
// of each stage under the standard workload.
func TestAlpamayoUnits(t *testing.T) {
	units, err := alpamayo10B(t).Units(StandardWorkload())
	require.NoError(t, err)
	want := []struct {
		m Module
		n int
	}{{PatchEmbed, 1}, {Vision, 27}, {Deepstack, 3}, {Merger, 1}, {Embedding, 1}, {VLM, 36}, {LMHead, 4}, {ActionIn, 1}, {Expert, 36}, {ActionOut, 1}}
	for _, w := range want {
		assert.Equal(t, w.n, count(units, w.m), w.m)
	}
	assert.Equal(t, []Module{PatchEmbed, Vision, Deepstack, Merger, Embedding, VLM, LMHead, ActionIn, Expert, ActionOut}, modulesOf(reorder(units)))
	// DeepStack mergers run right after blocks 8, 16 and 24.
	for i, u := range units {
		if u.Module == Deepstack {
			assert.Equal(t, Vision, units[i-1].Module)
			assert.Equal(t, []int{8, 16, 24}[u.Index], units[i-1].Index)
		}
	}
	by := map[string]Unit{}
	for _, u := range units {
		by[u.String()] = u
	}
	assert.InDelta(t, 385.9e6, float64(by["vlm.0"].Bytes), 0.1e6)
	assert.InDelta(t, 126.6e6, float64(by["expert.0"].Bytes), 0.1e6)
	assert.True(t, by["embedding.0"].Host)
	for i := range 4 {
		assert.LessOrEqual(t, by[fmt.Sprintf("lm_head.%d", i)].Bytes, by["vlm.0"].Bytes)
	}
	vlm, _ := by["vlm.3"].WorkIn(StageDecode)
	assert.Equal(t, 21, vlm.Passes)
	assert.Equal(t, 1, vlm.Rows)
	pre, _ := by["vlm.3"].WorkIn(StagePrefill)
	assert.Equal(t, Work{Stage: StagePrefill, Passes: 1, Rows: 3042, FLOPs: pre.FLOPs}, pre)
	exp, _ := by["expert.7"].WorkIn(StageDiffusion)
	assert.Equal(t, 10, exp.Passes)
	assert.Equal(t, 64, exp.Rows)
	blk, _ := by["vision.0"].WorkIn(StageVision)
	assert.Equal(t, 11520, blk.Rows)
	ds, _ := by["deepstack.0"].WorkIn(StageVision)
	assert.Equal(t, 2880, ds.Rows)
}

// reorder returns units with each module's units together, keeping the
// order in which modules first appear (the DeepStack mergers interleave
// with the blocks).
func reorder(units []Unit) []Unit {
	var out []Unit
	for _, m := range modulesOf(units) {
		for _, u := range units {
			if u.Module == m {
				out = append(out, u)
			}
		}
	}
	return out
}

// TestQwen3TextUnits: a Qwen3 text model has an embedding, its layers and
// a head; with tied embeddings the head's blocks still carry the matrix
// (the GPU reads it from the embedding's bytes); no vision, no diffusion.
func TestQwen3TextUnits(t *testing.T) {
	c, err := configs.ParseQwen3([]byte(`{"model_type":"qwen3","vocab_size":151936,"hidden_size":1024,
		"intermediate_size":3072,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,
		"head_dim":128,"max_position_embeddings":40960,"tie_word_embeddings":true}`))
	require.NoError(t, err)
	units, err := Qwen3Arch(c).Units(StandardWorkload())
	require.NoError(t, err)
	assert.Equal(t, []Module{Embedding, VLM, LMHead}, modulesOf(units))
	assert.Equal(t, 28, count(units, VLM))
	layer := units[1].Bytes
	var head int64
	for _, u := range units {
		if u.Module == LMHead {
			assert.LessOrEqual(t, u.Bytes, layer)
			head += u.Bytes
		}
		_, vision := u.WorkIn(StageVision)
		_, diff := u.WorkIn(StageDiffusion)
		assert.False(t, vision || diff)
	}
	assert.InDelta(t, float64(151936*1024*2), float64(head), 64*1024)
}

// TestAlpamayoArchErrors: a broken expert is refused.
func TestAlpamayoArchErrors(t *testing.T) {
	a := alpamayo10B(t)
	bad := *a
	e := *a.Expert
	e.NumHiddenLayers = 12
	bad.Expert = &e
	_, err := bad.Units(StandardWorkload())
	assert.ErrorContains(t, err, "expert has 12 layers, the VLM 36")
	bad = *a
	bad.ActionIn = nil
	_, err = bad.Units(StandardWorkload())
	assert.ErrorContains(t, err, "needs action_in_proj")
	w := StandardWorkload()
	w.PromptTokens = 0
	_, err = a.Units(w)
	assert.ErrorContains(t, err, "prompt_tokens must be positive")
	w = StandardWorkload()
	w.PatchesPerImage = 721
	_, err = a.Units(w)
	assert.ErrorContains(t, err, "721 patches per image do not merge in groups of 4")
}
