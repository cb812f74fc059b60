package tokenizer

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope", "tokenizer.json")
	_, err := Load(path)
	require.Error(t, err)
	assert.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
	assert.Contains(t, err.Error(), path)
}

func TestLoadBadJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"model": {"type": "BPE", `), 0o644))
	_, err := Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "invalid tokenizer.json")
	assert.Contains(t, err.Error(), path)
}

// edit returns a Qwen-like document changed by fn.
func edit(fn func(doc, model map[string]any)) map[string]any {
	doc := fixture{merges: [][2]string{{"a", "b"}}}.doc()
	fn(doc, doc["model"].(map[string]any))
	return doc
}

func TestLoadRefusesUnsupportedSettings(t *testing.T) {
	gpt2ByteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	for _, c := range []struct {
		name string
		doc  map[string]any
		want string
	}{
		{"model type", edit(func(_, m map[string]any) { m["type"] = "WordPiece" }), `unsupported model type "WordPiece"`},
		{"dropout", edit(func(_, m map[string]any) { m["dropout"] = 0.1 }), "dropout"},
		{"subword prefix", edit(func(_, m map[string]any) { m["continuing_subword_prefix"] = "##" }), "continuing_subword_prefix"},
		{"word suffix", edit(func(_, m map[string]any) { m["end_of_word_suffix"] = "</w>" }), "end_of_word_suffix"},
		{"no model", edit(func(d, _ map[string]any) { delete(d, "model") }), `missing "model"`},
		{"no vocab", edit(func(_, m map[string]any) { delete(m, "vocab") }), `missing "vocab"`},
		{"merge out of vocabulary", edit(func(_, m map[string]any) { m["merges"] = []string{"a zz"} }), `"zz" is not in the vocabulary`},
		{"merged token out of vocabulary", edit(func(_, m map[string]any) { m["merges"] = []string{"b a"} }), `"ba" is not in the vocabulary`},
		{"bad merge line", edit(func(_, m map[string]any) { m["merges"] = []string{"a b c"} }), "not two tokens"},
		{"bad merge pair", edit(func(_, m map[string]any) { m["merges"] = [][]string{{"a"}} }), "not a pair"},
		{"negative id", edit(func(_, m map[string]any) { m["vocab"].(map[string]int)["ab"] = -3 }), "outside"},
		{"duplicate id", edit(func(_, m map[string]any) { m["vocab"].(map[string]int)["ab"] = 0 }), "share id 0"},
		{"version", edit(func(d, _ map[string]any) { d["version"] = "2.0" }), "version"},
		{"normalizer", edit(func(d, _ map[string]any) { d["normalizer"] = map[string]any{"type": "Lowercase"} }), `unsupported normalizer "Lowercase"`},
		{"no pre-tokenizer", edit(func(d, _ map[string]any) { d["pre_tokenizer"] = nil }), "unsupported pre_tokenizer null"},
		{"gpt-2 pre-tokenizer", edit(func(d, _ map[string]any) { d["pre_tokenizer"] = gpt2ByteLevel }), `unsupported pre_tokenizer "ByteLevel"`},
		{"llama-3 regex", edit(func(d, _ map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] =
				map[string]any{"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
		}), "is not the Qwen2 regex"},
		{"string pattern", edit(func(d, _ map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"String": " "}
		}), "is not the Qwen2 regex"},
		{"split behavior", edit(func(d, _ map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Removed"
		}), `behavior="Removed"`},
		{"byte level with regex", edit(func(d, _ map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[1] = gpt2ByteLevel
		}), "use_regex=true"},
		{"byte level default regex", edit(func(d, _ map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[1] = map[string]any{"type": "ByteLevel", "add_prefix_space": false}
		}), "use_regex=true"},
		{"decoder", edit(func(d, _ map[string]any) { d["decoder"] = map[string]any{"type": "WordPiece"} }), `unsupported decoder "WordPiece"`},
		{"no decoder", edit(func(d, _ map[string]any) { d["decoder"] = nil }), "unsupported decoder null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeDoc(t, c.doc))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestLoadAcceptsQwenVariants(t *testing.T) {
	for _, c := range []struct {
		name string
		doc  map[string]any
	}{
		{"untagged model", edit(func(_, m map[string]any) { delete(m, "type") })},
		{"null options", edit(func(_, m map[string]any) {
			m["continuing_subword_prefix"], m["end_of_word_suffix"], m["dropout"] = nil, nil, nil
		})},
		{"no version", edit(func(d, _ map[string]any) { delete(d, "version") })},
		{"no normalizer", edit(func(d, _ map[string]any) { d["normalizer"] = nil })},
		{"normalizer sequence", edit(func(d, _ map[string]any) {
			d["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}}}
		})},
		{"raw newlines in the regex", edit(func(d, _ map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] =
				map[string]any{"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}
		})},
		{"version line in legacy merges", edit(func(_, m map[string]any) { m["merges"] = []string{"#version: 0.2", "a b"} })},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok, err := Load(writeDoc(t, c.doc))
			require.NoError(t, err)
			id, ok := tok.TokenID("ab")
			require.True(t, ok)
			assert.Equal(t, []int{id}, tok.Encode("ab"))
		})
	}
}
