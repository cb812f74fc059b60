package alpamayo_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/configs"
	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
	"vlanode/residency/residencytest"
	"vlanode/synth"
	"vlanode/tensor"
	"vlanode/weights"
)

// unitRules map a checkpoint tensor name to the unit whose blob holds it,
// independently of the loaders' tables: the grouping of models/qwen3vl,
// models/qwen3 and diffusion, a layer's or block's tensors split into its
// attention part and its MLP part.
var unitRules = []struct {
	re     *regexp.Regexp
	module placement.Module
	parts  bool
}{
	{regexp.MustCompile(`model\.visual\.(patch_embed|pos_embed)\.`), placement.PatchEmbed, false},
	{regexp.MustCompile(`model\.visual\.blocks\.(\d+)\.`), placement.Vision, true},
	{regexp.MustCompile(`model\.visual\.deepstack_merger_list\.(\d+)\.`), placement.Deepstack, false},
	{regexp.MustCompile(`model\.visual\.merger\.`), placement.Merger, false},
	{regexp.MustCompile(`(?:language_model|^model)\.embed_tokens\.`), placement.Embedding, false},
	{regexp.MustCompile(`(?:language_model|^model)\.layers\.(\d+)\.`), placement.VLM, true},
	{regexp.MustCompile(`(?:language_model\.norm\.|^model\.norm\.|lm_head\.)`), placement.LMHead, false},
	{regexp.MustCompile(`^expert\.layers\.(\d+)\.`), placement.Expert, true},
	{regexp.MustCompile(`^(expert\.norm\.|action_out_proj\.)`), placement.ActionOut, false},
	{regexp.MustCompile(`^action_in_proj\.(encoder|norm)\.`), placement.ActionIn, false},
}

// mlpTensor says whether a layer's or block's tensor is in its MLP part.
var mlpTensor = regexp.MustCompile(`\.(mlp\.|post_attention_layernorm\.|norm2\.)`)

func unitOf(name string) (placement.ID, bool) {
	for _, r := range unitRules {
		m := r.re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		id := placement.ID{Module: r.module}
		if len(m) > 1 {
			if n, err := strconv.Atoi(m[1]); err == nil {
				id.Index = n
			}
		}
		if r.parts {
			id.Part = placement.Attn
			if mlpTensor.MatchString(name) {
				id.Part = placement.MLP
			}
		}
		return id, true
	}
	return placement.ID{}, false
}

// archOf is the planner's architecture of synth's arch.
func archOf(t *testing.T, arch synth.Arch) *residency.Arch { return residencytest.Arch(t, arch) }

// TestPlanUnitsMatchSynth groups every tensor synth writes into units and
// checks that the published units have exactly those blob sizes (the LM
// head: the same elements, cut into blocks), for every architecture synth
// knows.
func TestPlanUnitsMatchSynth(t *testing.T) {
	for _, arch := range synth.Archs() {
		t.Run(string(arch), func(t *testing.T) {
			l, err := synth.NewLayout(arch)
			require.NoError(t, err)
			groups := map[placement.ID][]weights.Spec{}
			for _, ts := range l.Tensors {
				id, ok := unitOf(ts.Name)
				if !ok {
					assert.Regexp(t, `^action_space\.|freqs$`, ts.Name, "tensor in no unit")
					continue
				}
				groups[id] = append(groups[id], weights.Spec{Name: ts.Name, DType: ts.DType, Shape: ts.Shape})
			}
			units := alpamayo.PlanUnits(archOf(t, arch), placement.StandardWorkload())
			var headElems, headWant int64
			blocks := 0
			seen := map[placement.ID]bool{}
			for _, u := range units {
				require.NoError(t, u.Validate())
				if u.ID.Module == placement.LMHead {
					headElems += u.Bytes
					blocks++
					continue
				}
				want, ok := groups[u.ID]
				require.True(t, ok, "unit %s has no tensors in synth's layout", u.ID)
				_, size := weights.Layout(want)
				assert.Equal(t, size, u.Bytes, u.ID.String())
				seen[u.ID] = true
			}
			for id, specs := range groups {
				if id.Module == placement.LMHead {
					for _, s := range specs {
						headWant += int64(tensor.NumElements(s.Shape)) * int64(s.DType.Size())
					}
					continue
				}
				assert.True(t, seen[id], "synth's unit %s is not published", id)
			}
			assert.GreaterOrEqual(t, headElems, headWant)
			assert.LessOrEqual(t, headElems, headWant+int64(blocks+1)*weights.Align)
		})
	}
}

// TestPlanUnitsAlpamayo checks the 10B's units: counts, order, sizes,
// parts, the LM head cut to fit the largest part, and the work of each
// stage under the standard workload.
func TestPlanUnitsAlpamayo(t *testing.T) {
	units := alpamayo.PlanUnits(archOf(t, synth.AlpamayoR1_10B), placement.StandardWorkload())
	count := map[placement.Module]int{}
	var order []placement.Module
	by := map[string]placement.Unit{}
	for i, u := range units {
		if count[u.ID.Module] == 0 {
			order = append(order, u.ID.Module)
		}
		count[u.ID.Module]++
		by[u.ID.String()] = u
		if u.ID.Module == placement.Deepstack {
			// DeepStack mergers run right after blocks 8, 16 and 24.
			prev := units[i-1].ID
			assert.Equal(t, placement.ID{Module: placement.Vision, Index: []int{8, 16, 24}[u.ID.Index], Part: placement.MLP}, prev)
		}
	}
	assert.Equal(t, map[placement.Module]int{placement.PatchEmbed: 1, placement.Vision: 54, placement.Deepstack: 3, placement.Merger: 1,
		placement.Embedding: 1, placement.VLM: 72, placement.LMHead: 5, placement.ActionIn: 1, placement.Expert: 72, placement.ActionOut: 1}, count)
	assert.Equal(t, []placement.Module{placement.PatchEmbed, placement.Vision, placement.Deepstack, placement.Embedding, placement.VLM,
		placement.LMHead, placement.ActionIn, placement.Expert, placement.ActionOut}, without(order, placement.Merger))
	assert.InDelta(t, 385.9e6, float64(by["vlm.0.attn"].Bytes+by["vlm.0.mlp"].Bytes), 0.1e6)
	assert.InDelta(t, 126.6e6, float64(by["expert.0.attn"].Bytes+by["expert.0.mlp"].Bytes), 0.1e6)
	assert.Equal(t, int64(301998080), by["vlm.0.mlp"].Bytes, "post norm, gate, up, down")
	assert.Equal(t, 12288, by["vlm.0.mlp"].SplitDim)
	assert.Zero(t, by["vlm.0.attn"].SplitDim)
	assert.True(t, by["embedding.0"].HostOnly)
	for i := range 5 {
		assert.LessOrEqual(t, by[fmt.Sprintf("lm_head.%d", i)].Bytes, by["vlm.0.mlp"].Bytes)
	}
	dec, _ := by["vlm.3.mlp"].WorkIn(placement.StageDecode)
	assert.Equal(t, 21, dec.Passes)
	assert.Equal(t, 1, dec.Rows)
	assert.Equal(t, 2*3*4096*12288.0, dec.FLOPs, "gate, up, down: no attention")
	att, _ := by["vlm.3.attn"].WorkIn(placement.StageDecode)
	assert.Greater(t, att.FLOPs, 2*(2*4096*4096+2*1024*4096.0), "q, k, v, o and the attention")
	exp, _ := by["expert.7.mlp"].WorkIn(placement.StageDiffusion)
	assert.Equal(t, placement.Work{Stage: placement.StageDiffusion, Passes: 10, Rows: 64, FLOPs: exp.FLOPs}, exp)
	blk, _ := by["vision.0.attn"].WorkIn(placement.StageVision)
	assert.Equal(t, 11520, blk.Rows)
	ds, _ := by["deepstack.0"].WorkIn(placement.StageVision)
	assert.Equal(t, 2880, ds.Rows)
}

func without(ms []placement.Module, drop placement.Module) []placement.Module {
	var out []placement.Module
	for _, m := range ms {
		if m != drop {
			out = append(out, m)
		}
	}
	return out
}

// TestPlanUnitsQwen3Text: a Qwen3 text model has an embedding, its
// layers' parts and a head; with tied embeddings the head's blocks still
// carry the matrix; no vision, no diffusion.
func TestPlanUnitsQwen3Text(t *testing.T) {
	c, err := configs.ParseQwen3([]byte(`{"model_type":"qwen3","vocab_size":151936,"hidden_size":1024,
		"intermediate_size":3072,"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,
		"head_dim":128,"max_position_embeddings":40960,"tie_word_embeddings":true}`))
	require.NoError(t, err)
	units := alpamayo.PlanUnits(residency.Qwen3Arch(c), placement.StandardWorkload())
	var head, largest int64
	layers := 0
	for _, u := range units {
		switch u.ID.Module {
		case placement.LMHead:
			head += u.Bytes
		case placement.VLM:
			layers++
			largest = max(largest, u.Bytes)
		default:
			assert.Equal(t, placement.Embedding, u.ID.Module)
		}
		for _, w := range u.Work {
			assert.True(t, w.Stage == placement.StagePrefill || w.Stage == placement.StageDecode, "%s works in %s", u.ID, w.Stage)
		}
	}
	assert.Equal(t, 56, layers)
	assert.InDelta(t, float64(151936*1024*2), float64(head), 64*1024)
	for _, u := range units {
		if u.ID.Module == placement.LMHead {
			assert.LessOrEqual(t, u.Bytes, largest, u.ID)
		}
	}
	assert.True(t, strings.HasPrefix(units[0].ID.String(), "embedding"))
}
