package configs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// putConfig writes dir/config.json holding {"where": where} and returns
// its path.
func putConfig(t *testing.T, dir, where string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	p := filepath.Join(dir, "config.json")
	raw := `{"where":"` + where + `","text_config":{"hidden_size":4096,"num_attention_heads":32,"vocab_size":151936},"vocab_size":151936}`
	require.NoError(t, os.WriteFile(p, []byte(raw), 0o644))
	return p
}

func TestVLMLocator(t *testing.T) {
	// root/work                      working directory
	// root/ckpts/a10b                checkpoint
	// root/hf/hub/models--Qwen--...  Hugging Face cache
	type layout struct {
		inWork, inCkpt, inParent, inCache, inOtherSnap, refMain bool
	}
	cases := []struct {
		name     string
		vlm      string
		have     layout
		override string // relative to root
		env      map[string]string
		want     string // the "where" of the config found; "" = not found
		wantErr  string
	}{
		{"checkpoint sub folder", "vlm", layout{inCkpt: true}, "", nil, "ckpt", ""},
		{"working directory first", "vlm", layout{inWork: true, inCkpt: true}, "", nil, "work", ""},
		{"checkpoint before parent", "vlm", layout{inCkpt: true, inParent: true}, "", nil, "ckpt", ""},
		{"sibling of the checkpoint", "vlm", layout{inParent: true}, "", nil, "parent", ""},
		{"hub id from HF_HOME", "Qwen/Qwen3-VL-8B-Instruct", layout{inCache: true}, "",
			map[string]string{"HF_HOME": "hf"}, "cache", ""},
		{"hub id from HF_HUB_CACHE", "Qwen/Qwen3-VL-8B-Instruct", layout{inCache: true}, "",
			map[string]string{"HF_HUB_CACHE": "hf/hub", "HF_HOME": "elsewhere"}, "cache", ""},
		{"hub id from ~/.cache", "Qwen/Qwen3-VL-8B-Instruct", layout{inCache: true}, "",
			map[string]string{"HOME": "home"}, "cache", ""},
		{"refs/main picks the snapshot", "Qwen/Qwen3-VL-8B-Instruct", layout{inCache: true, inOtherSnap: true, refMain: true}, "",
			map[string]string{"HF_HOME": "hf"}, "cache", ""},
		{"newest snapshot without refs", "Qwen/Qwen3-VL-8B-Instruct", layout{inCache: true, inOtherSnap: true}, "",
			map[string]string{"HF_HOME": "hf"}, "other-snapshot", ""},
		{"override wins", "vlm", layout{inCkpt: true}, "elsewhere/x", nil, "override", ""},
		{"override is a file", "vlm", layout{inCkpt: true}, "elsewhere/x/config.json", nil, "override", ""},
		{"override missing", "vlm", layout{inCkpt: true}, "nope", nil, "", "given explicitly"},
		{"nowhere lists the places", "Qwen/Qwen3-VL-8B-Instruct", layout{}, "",
			map[string]string{"HF_HOME": "hf"}, "", "models--Qwen--Qwen3-VL-8B-Instruct/snapshots/*/config.json"},
		{"not a hub id", "./vlm", layout{}, "", nil, "", "ckpts/a10b/vlm/config.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			work := filepath.Join(root, "work")
			ckpt := filepath.Join(root, "ckpts", "a10b")
			require.NoError(t, os.MkdirAll(work, 0o755))
			require.NoError(t, os.MkdirAll(ckpt, 0o755))
			repo := filepath.Join(root, "hf", "hub", "models--Qwen--Qwen3-VL-8B-Instruct")
			if home := c.env["HOME"]; home != "" {
				repo = filepath.Join(root, home, ".cache", "huggingface", "hub", "models--Qwen--Qwen3-VL-8B-Instruct")
			}
			if c.have.inWork {
				putConfig(t, filepath.Join(work, "vlm"), "work")
			}
			if c.have.inCkpt {
				putConfig(t, filepath.Join(ckpt, "vlm"), "ckpt")
			}
			if c.have.inParent {
				putConfig(t, filepath.Join(root, "ckpts", "vlm"), "parent")
			}
			if c.have.inCache {
				p := putConfig(t, filepath.Join(repo, "snapshots", "aaa111"), "cache")
				old := time.Now().Add(-time.Hour)
				require.NoError(t, os.Chtimes(filepath.Dir(p), old, old))
			}
			if c.have.inOtherSnap {
				putConfig(t, filepath.Join(repo, "snapshots", "bbb222"), "other-snapshot")
			}
			if c.have.refMain {
				require.NoError(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("aaa111\n"), 0o644))
			}
			putConfig(t, filepath.Join(root, "elsewhere", "x"), "override")

			env := map[string]string{"HOME": filepath.Join(root, "nohome")}
			for k, v := range c.env {
				env[k] = filepath.Join(root, v)
			}
			l := VLMLocator{WorkDir: work, Getenv: func(k string) string { return env[k] }}
			if c.override != "" {
				l.Override = filepath.Join(root, c.override)
			}
			got, err := l.Locate(c.vlm, ckpt)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				if c.override == "" {
					assert.ErrorIs(t, err, ErrVLMNotFound)
				}
				return
			}
			require.NoError(t, err)
			var head struct{ Where string }
			require.NoError(t, json.Unmarshal(got.Raw, &head))
			assert.Equal(t, c.want, head.Where, "read %s", got.Path)
		})
	}
}

func TestVLMLocatorRelativeCheckpoint(t *testing.T) {
	// A relative checkpoint path is relative to the working directory.
	root := t.TempDir()
	putConfig(t, filepath.Join(root, "ck", "vlm"), "ckpt")
	l := VLMLocator{WorkDir: root, Getenv: func(string) string { return "" }}
	got, err := l.Locate("vlm", "ck")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "ck", "vlm", "config.json"), got.Path)
}

func TestExpertAndVLMConfigJSON(t *testing.T) {
	c, err := ParseAlpamayoR1([]byte(releaseLike))
	require.NoError(t, err)
	dir := t.TempDir()
	vlm := VLMConfig{Path: putConfig(t, dir, "x")}
	vlm.Raw, err = os.ReadFile(vlm.Path)
	require.NoError(t, err)

	raw, err := c.VLMConfigJSON(vlm)
	require.NoError(t, err)
	var full struct {
		VocabSize  int            `json:"vocab_size"`
		Where      string         `json:"where"`
		TextConfig map[string]any `json:"text_config"`
	}
	require.NoError(t, json.Unmarshal(raw, &full))
	assert.Equal(t, 155697, full.VocabSize)
	assert.Equal(t, "x", full.Where, "other keys are kept")
	assert.EqualValues(t, 155697, full.TextConfig["vocab_size"])
	assert.EqualValues(t, 4096, full.TextConfig["hidden_size"])

	raw, err = c.ExpertTextConfigJSON(vlm)
	require.NoError(t, err)
	var text map[string]any
	require.NoError(t, json.Unmarshal(raw, &text))
	assert.EqualValues(t, 2048, text["hidden_size"])
	assert.EqualValues(t, 16, text["num_attention_heads"])
	assert.EqualValues(t, 8256, text["intermediate_size"])
	assert.EqualValues(t, 128, text["head_dim"])

	_, err = c.ExpertTextConfigJSON(VLMConfig{Path: "p", Raw: []byte(`{"vision_config":{}}`)})
	assert.ErrorContains(t, err, "no text_config")
}
