package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vlBase is a small qwen3_vl config in transformers 5's spelling; %s adds
// top-level keys, %s text_config keys, %s vision_config keys.
const vlBase = `{"model_type":"qwen3_vl","image_token_id":398,"video_token_id":399,
"vision_start_token_id":396,"vision_end_token_id":397,"tie_word_embeddings":false%s,
"text_config":{"model_type":"qwen3_vl_text","vocab_size":400,"hidden_size":96,"intermediate_size":160,
 "num_hidden_layers":4,"num_attention_heads":6,"num_key_value_heads":2,"head_dim":32,"rms_norm_eps":1e-5,
 "max_position_embeddings":1024%s},
"vision_config":{"model_type":"qwen3_vl_vision","depth":4,"hidden_size":48,"intermediate_size":96,"num_heads":4,
 "num_position_embeddings":36,"out_hidden_size":96,"deepstack_visual_indexes":[1,2,3]%s}}`

const vlRope = `,"rope_parameters":{"rope_type":"default","rope_theta":5000000.0,"mrope_section":[6,5,5],"mrope_interleaved":true}`

func vl(top, text, vision string) []byte { return []byte(fmt.Sprintf(vlBase, top, text, vision)) }

func TestParseQwen3VL(t *testing.T) {
	c, err := ParseQwen3VL(vl("", vlRope, `,"rope_parameters":{"rope_type":"axial","rope_theta":10000.0}`))
	require.NoError(t, err)
	assert.Equal(t, "qwen3_vl", c.ModelType)
	assert.Equal(t, 5e6, c.Text.RopeTheta)
	assert.Equal(t, [3]int{6, 5, 5}, c.MRopeSection)
	assert.True(t, c.MRopeInterleaved)
	assert.False(t, c.Text.TieWordEmbeddings)
	assert.Equal(t, 398, c.ImageTokenID)
	assert.Equal(t, 396, c.VisionStartTokenID)
	v := c.Vision
	assert.Equal(t, 12, v.HeadDim())
	assert.Equal(t, 1536, v.PatchDim(), "defaults: 3 channels, temporal patch 2, patch 16")
	assert.Equal(t, 6, v.GridSide())
	assert.Equal(t, 4, v.MergeUnit())
	assert.True(t, v.TanhGELU(), "default hidden_act gelu_pytorch_tanh")
	assert.Equal(t, 10000.0, v.RopeTheta())
	assert.Equal(t, 1e-5, c.Text.RMSNormEps)
}

// TestParseQwen3VLHubSpelling reads the spelling of the Hub's Qwen3-VL
// configs (transformers 4.57): rope_scaling with a top-level rope_theta in
// text_config, and tie_word_embeddings only there.
func TestParseQwen3VLHubSpelling(t *testing.T) {
	raw := `{"model_type":"qwen3_vl","image_token_id":151655,"text_config":{"vocab_size":151936,"hidden_size":4096,
"intermediate_size":12288,"num_hidden_layers":36,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,
"rope_scaling":{"mrope_interleaved":true,"mrope_section":[24,20,20],"rope_type":"default"},"rope_theta":5000000,
"tie_word_embeddings":true},"vision_config":{"out_hidden_size":4096}}`
	c, err := ParseQwen3VL([]byte(raw))
	require.NoError(t, err)
	assert.Equal(t, 5e6, c.Text.RopeTheta)
	assert.Equal(t, [3]int{24, 20, 20}, c.MRopeSection)
	assert.True(t, c.Text.TieWordEmbeddings)
	assert.Equal(t, 128000, c.Text.MaxPositionEmbeddings)
	assert.Equal(t, 27, c.Vision.Depth)
	assert.Equal(t, 72, c.Vision.HeadDim())
	assert.Equal(t, []int{8, 16, 24}, c.Vision.DeepstackVisualIndexes)
	assert.Equal(t, 151652, c.VisionStartTokenID)
	blocks, mergers := c.Vision.DeepstackOrder()
	assert.Equal(t, []int{8, 16, 24}, blocks)
	assert.Equal(t, []int{0, 1, 2}, mergers)
}

func TestParseQwen3VLDefaultTheta(t *testing.T) {
	c, err := ParseQwen3VL(vl("", `,"rope_parameters":{"mrope_section":[6,5,5]}`, ""))
	require.NoError(t, err)
	assert.Equal(t, 500000.0, c.Text.RopeTheta, "Qwen3VLTextConfig.default_theta")
}

func TestParseQwen3VLErrors(t *testing.T) {
	cases := []struct {
		name              string
		top, text, vision string
		want              string
	}{
		{"mrope not matching head_dim", "", `,"rope_parameters":{"mrope_section":[24,20,20]}`, "", "must add up to head_dim/2 = 16"},
		{"mrope of two", "", `,"rope_parameters":{"mrope_section":[8,8]}`, "", "3 entries"},
		{"yarn", "", `,"rope_parameters":{"rope_type":"yarn","mrope_section":[6,5,5]}`, "", `rope type "yarn"`},
		{"thetas disagree", "", `,"rope_theta":1000,"rope_parameters":{"rope_theta":2000,"mrope_section":[6,5,5]}`, "", "disagree"},
		{"vision heads", "", vlRope, `,"num_heads":5`, "head size divisible by 4"},
		{"position table not square", "", vlRope, `,"num_position_embeddings":40`, "not a square"},
		{"deepstack past depth", "", vlRope, `,"deepstack_visual_indexes":[1,4]`, "below depth 4"},
		{"deepstack repeated", "", vlRope, `,"deepstack_visual_indexes":[1,1]`, "distinct"},
		{"vision act", "", vlRope, `,"hidden_act":"quick_gelu"`, "hidden_act"},
		{"vision rope", "", vlRope, `,"rope_parameters":{"rope_type":"yarn"}`, "axial"},
		{"out size", "", vlRope, `,"out_hidden_size":64`, "out_hidden_size 64 differs"},
		{"image token outside vocab", `,"image_token_id":400`, vlRope, "", "image_token_id 400"},
		{"text attention bias", "", vlRope + `,"attention_bias":true`, "", "attention_bias"},
		{"bad gqa", "", vlRope + `,"num_key_value_heads":4`, "", "not a multiple"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseQwen3VL(vl(c.top, c.text, c.vision))
			assert.ErrorContains(t, err, c.want)
		})
	}
}

func TestLoadQwen3VL(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), vl("", vlRope, ""), 0o644))
	c, err := LoadQwen3VL(dir)
	require.NoError(t, err)
	assert.Equal(t, 4, c.Text.NumHiddenLayers)
	mt, err := ReadModelType(dir)
	require.NoError(t, err)
	assert.Equal(t, "qwen3_vl", mt)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644))
	_, err = LoadQwen3VL(dir)
	assert.ErrorIs(t, err, ErrUnknownArchitecture)
}
