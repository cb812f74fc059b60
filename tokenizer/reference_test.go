package tokenizer

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// referenceDirEnv overrides where TestAgainstReference looks for the
// reference files (default ../testdata/tokenizer).
const referenceDirEnv = "VLANODE_TOKENIZER_REFERENCE"

// referenceCase is one entry of cases.json, written by
// scripts/tokenizer/tokenizer_reference.py with the Hugging Face library.
type referenceCase struct {
	Text      string   `json:"text"`
	IDs       []int    `json:"ids"`
	Tokens    []string `json:"tokens"`    // optional, for diagnostics
	Decoded   *string  `json:"decoded"`   // decode(ids, skip_special_tokens=False)
	Pretokens []string `json:"pretokens"` // optional: pre_tokenize_str(text)
}

// TestAgainstReference checks Encode and Decode against ids produced by the
// Hugging Face `tokenizers` library for a Qwen2-configured BPE.
func TestAgainstReference(t *testing.T) {
	dir := filepath.Join("..", "testdata", "tokenizer")
	if d := os.Getenv(referenceDirEnv); d != "" {
		dir = d
	}
	tokPath := filepath.Join(dir, "tokenizer.json")
	casesPath := filepath.Join(dir, "cases.json")
	for _, p := range []string{tokPath, casesPath} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			t.Skipf("\n"+
				"******************************************************************\n"+
				"* SKIPPED: the tokenizer reference has not been generated:       *\n"+
				"* %s is missing.\n"+
				"* Generate it on a machine with Python 3.12 + `tokenizers`:      *\n"+
				"*   python3 scripts/tokenizer/tokenizer_reference.py \\           *\n"+
				"*       --out testdata/tokenizer                                 *\n"+
				"* then commit testdata/tokenizer/ (or point %s at it).\n"+
				"******************************************************************",
				p, referenceDirEnv)
		}
	}

	tok, err := Load(tokPath)
	require.NoError(t, err)
	data, err := os.ReadFile(casesPath)
	require.NoError(t, err)
	var cases []referenceCase
	require.NoError(t, json.Unmarshal(data, &cases))
	require.NotEmpty(t, cases, "cases.json has no cases")

	failures := 0
	for i, c := range cases {
		got := tok.Encode(c.Text)
		ok := assert.Equal(t, c.IDs, got, "case %d: Encode(%q)\nreference tokens: %q\nour tokens:       %q",
			i, c.Text, c.Tokens, tokenStrings(tok, got))

		want := c.Text
		if c.Decoded != nil {
			want = *c.Decoded
		}
		text, err := tok.Decode(c.IDs)
		ok = assert.NoError(t, err, "case %d", i) && ok
		ok = assert.Equal(t, want, text, "case %d: Decode(%v)", i, c.IDs) && ok

		if c.Pretokens != nil {
			pre := []string{}
			for _, p := range appendQwen2Splits(nil, c.Text) {
				pre = append(pre, byteLevel(p))
			}
			ok = assert.Equal(t, c.Pretokens, pre, "case %d: pre-tokenization of %q", i, c.Text) && ok
		}
		if !ok {
			failures++
			if failures >= 20 {
				t.Fatalf("stopping after %d failing cases of %d", failures, len(cases))
			}
		}
	}
	t.Logf("%d reference cases from %s", len(cases), dir)
}

// tokenStrings renders ids as vocabulary strings, for failure messages.
func tokenStrings(tok *Tokenizer, ids []int) []string {
	inv := make(map[int]string, len(tok.model.vocab)+len(tok.added))
	for s, id := range tok.model.vocab {
		inv[int(id)] = s
	}
	for s, id := range tok.added {
		inv[id] = s
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = inv[id]
	}
	return out
}
