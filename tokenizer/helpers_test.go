package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// fixture describes a small Qwen-style tokenizer.json for tests. Merges and
// extra vocabulary are written as raw text (" t", not "Ġt"); the fixture
// maps them to the byte-level alphabet.
type fixture struct {
	extra        []string    // vocabulary beyond the 256 byte-level tokens
	merges       [][2]string // merged tokens are added to the vocabulary
	legacyMerges bool        // write merges as "a b" strings
	added        []map[string]any
	ignoreMerges bool
}

// qwenAdded returns the added_tokens entries of Qwen's chat/vision special
// tokens, numbered from first.
func qwenAdded(first int) []map[string]any {
	names := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"}
	out := make([]map[string]any, len(names))
	for i, n := range names {
		out[i] = addedEntry(first+i, n, true, false)
	}
	return out
}

func addedEntry(id int, content string, special, normalized bool) map[string]any {
	return map[string]any{
		"id": id, "content": content, "single_word": false, "lstrip": false,
		"rstrip": false, "normalized": normalized, "special": special,
	}
}

// vocab returns the fixture's vocabulary in byte-level form.
func (f fixture) vocab() map[string]int {
	v := make(map[string]int)
	addTok := func(s string) {
		if _, ok := v[s]; !ok {
			v[s] = len(v)
		}
	}
	for b := 0; b < 256; b++ {
		addTok(string(byteToRune[b]))
	}
	for _, e := range f.extra {
		addTok(byteLevel(e))
	}
	for _, m := range f.merges {
		addTok(byteLevel(m[0] + m[1]))
	}
	return v
}

// doc returns the tokenizer.json document as a generic map, for tests to
// alter before writing it.
func (f fixture) doc() map[string]any {
	var merges any
	if f.legacyMerges {
		ms := make([]string, len(f.merges))
		for i, m := range f.merges {
			ms[i] = byteLevel(m[0]) + " " + byteLevel(m[1])
		}
		merges = ms
	} else {
		ms := make([][2]string, len(f.merges))
		for i, m := range f.merges {
			ms[i] = [2]string{byteLevel(m[0]), byteLevel(m[1])}
		}
		merges = ms
	}
	added := f.added
	if added == nil {
		added = []map[string]any{}
	}
	return map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{
			"type": "Sequence",
			"pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
				map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
			},
		},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil,
			"continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": f.ignoreMerges,
			"vocab": f.vocab(), "merges": merges,
		},
	}
}

// writeDoc writes doc as tokenizer.json in a temporary directory.
func writeDoc(t testing.TB, doc any) string {
	t.Helper()
	data, err := json.Marshal(doc)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

// load writes the fixture and loads it.
func (f fixture) load(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Load(writeDoc(t, f.doc()))
	require.NoError(t, err)
	return tok
}

// ids maps raw-text tokens to their ids in tok.
func ids(t testing.TB, tok *Tokenizer, raw ...string) []int {
	t.Helper()
	out := make([]int, len(raw))
	for i, r := range raw {
		id, ok := tok.TokenID(byteLevel(r))
		if !ok {
			id, ok = tok.TokenID(r)
		}
		require.True(t, ok, "no token %q", r)
		out[i] = id
	}
	return out
}

// trainMerges learns n merges from corpus with a plain BPE trainer (most
// frequent pair first, ties broken by the pair's text), on the pieces the
// Qwen2 pre-tokenizer gives. It stands in for a trained vocabulary in
// property tests and benchmarks.
func trainMerges(corpus string, n int) [][2]string {
	words := map[string]int{}
	for _, p := range appendQwen2Splits(nil, corpus) {
		words[p]++
	}
	type word struct {
		syms  []string
		count int
	}
	var ws []word
	for w, c := range words {
		var syms []string
		for i := 0; i < len(w); i++ {
			syms = append(syms, w[i:i+1])
		}
		ws = append(ws, word{syms, c})
	}
	var merges [][2]string
	for len(merges) < n {
		counts := map[[2]string]int{}
		for _, w := range ws {
			for i := 0; i+1 < len(w.syms); i++ {
				counts[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		if len(counts) == 0 {
			break
		}
		pairs := make([][2]string, 0, len(counts))
		for p := range counts {
			pairs = append(pairs, p)
		}
		sort.Slice(pairs, func(i, j int) bool {
			ci, cj := counts[pairs[i]], counts[pairs[j]]
			if ci != cj {
				return ci > cj
			}
			return pairs[i][0]+"\x00"+pairs[i][1] < pairs[j][0]+"\x00"+pairs[j][1]
		})
		best := pairs[0]
		merges = append(merges, best)
		for wi := range ws {
			syms := ws[wi].syms
			out := syms[:0]
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == best[0] && syms[i+1] == best[1] {
					out = append(out, best[0]+best[1])
					i++
				} else {
					out = append(out, syms[i])
				}
			}
			ws[wi].syms = out
		}
	}
	return merges
}
