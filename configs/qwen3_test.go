package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const base = `{"model_type":"qwen3","vocab_size":384,"hidden_size":64,"intermediate_size":160,
"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":16%s}`

func TestParseQwen3(t *testing.T) {
	cases := []struct {
		name    string
		extra   string
		theta   float64
		wantErr string
	}{
		{"defaults", ``, 10000, ""},
		{"top-level theta", `,"rope_theta":5000000`, 5e6, ""},
		{"transformers 5 rope_parameters", `,"rope_parameters":{"rope_type":"default","rope_theta":1000000}`, 1e6, ""},
		{"yarn refused", `,"rope_parameters":{"rope_type":"yarn","rope_theta":1000000}`, 0, `rope type "yarn"`},
		{"gelu refused", `,"hidden_act":"gelu"`, 0, "hidden_act"},
		{"sliding window refused", `,"use_sliding_window":true`, 0, "use_sliding_window"},
		{"bad gqa", `,"num_key_value_heads":3`, 0, "not a multiple"},
		{"odd head dim", `,"head_dim":15`, 0, "even"},
		{"zero layers", `,"num_hidden_layers":0`, 0, "num_hidden_layers must be positive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseQwen3([]byte(fmt.Sprintf(base, c.extra)))
			if c.wantErr != "" {
				assert.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.theta, cfg.RopeTheta)
			assert.Equal(t, 1e-6, cfg.RMSNormEps)
		})
	}
}

func TestHeadDimDefault(t *testing.T) {
	cfg, err := ParseQwen3([]byte(`{"model_type":"qwen3","vocab_size":10,"hidden_size":64,"intermediate_size":8,
"num_hidden_layers":1,"num_attention_heads":4}`))
	require.NoError(t, err)
	assert.Equal(t, 16, cfg.HeadDim)
	assert.Equal(t, 4, cfg.NumKeyValueHeads)
}

func TestLoadQwen3Errors(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadQwen3(dir)
	assert.ErrorContains(t, err, "config.json")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644))
	mt, err := ReadModelType(dir)
	require.NoError(t, err)
	assert.Equal(t, "llama", mt)
	assert.ErrorIs(t, UnknownArchitecture(dir, mt), ErrUnknownArchitecture)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{not json`), 0o644))
	_, err = ReadModelType(dir)
	assert.ErrorContains(t, err, "config.json")
}
