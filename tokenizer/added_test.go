package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chatFixture has a few merges, then Qwen's special tokens from id
// firstAdded on (the added ids follow the vocabulary, as in Qwen's files).
func chatFixture() fixture {
	f := fixture{merges: [][2]string{{"u", "s"}, {"us", "e"}, {"use", "r"}, {" ", "h"}, {" h", "i"}, {"\n", "\n"}}}
	f.added = qwenAdded(len(f.vocab()))
	return f
}

const firstAdded = 256 + 6

func TestSpecialTokensAreWholeTokens(t *testing.T) {
	tok := chatFixture().load(t)
	imStart, imEnd := firstAdded+1, firstAdded+2
	assert.Equal(t, append(append([]int{imStart}, ids(t, tok, "user", "\n")...), imEnd),
		tok.Encode("<|im_start|>user\n<|im_end|>"))

	// Text around the token is pre-tokenized piece by piece: the space
	// before <|im_end|> ends its piece, so it stays a lone token.
	assert.Equal(t, append(ids(t, tok, " hi", " "), imEnd, imEnd),
		tok.Encode(" hi <|im_end|><|im_end|>"))

	pad, vs, ve := firstAdded+5, firstAdded+3, firstAdded+4
	assert.Equal(t, []int{vs, pad, pad, pad, ve}, tok.Encode("<|vision_start|><|image_pad|><|image_pad|><|image_pad|><|vision_end|>"))

	// Inside a word.
	assert.Equal(t, append(append(ids(t, tok, "a"), firstAdded), ids(t, tok, "b")...), tok.Encode("a<|endoftext|>b"))
}

func TestIncompleteSpecialTokensArePlainText(t *testing.T) {
	tok := chatFixture().load(t)
	for _, s := range []string{"<|im_start", "<|im_end|", "<|IM_START|>", "<| im_start|>", "|>", "<|"} {
		for _, id := range tok.Encode(s) {
			assert.Less(t, id, firstAdded, "%q", s)
		}
		got, err := tok.Decode(tok.Encode(s))
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
}

func TestAddedTokensLongestMatchWins(t *testing.T) {
	f := fixture{added: []map[string]any{
		addedEntry(256, "<a>", true, false),
		addedEntry(257, "<a><b>", true, false),
		addedEntry(258, "<b>", true, false),
		addedEntry(259, "<a><b><c>", true, false),
	}}
	tok := f.load(t)
	assert.Equal(t, []int{257}, tok.Encode("<a><b>"))
	assert.Equal(t, []int{259}, tok.Encode("<a><b><c>"))
	assert.Equal(t, append([]int{257}, ids(t, tok, "<", "c")...), tok.Encode("<a><b><c"))
	assert.Equal(t, []int{256, 257}, tok.Encode("<a><a><b>"))
}

func TestNormalizedAddedTokenMatchesAfterNFC(t *testing.T) {
	f := chatFixture()
	cafe, think := firstAdded+6, firstAdded+7
	f.added = append(f.added, addedEntry(cafe, "<|café|>", false, true), addedEntry(think, "<think>", false, false))
	tok := f.load(t)
	// Decomposed input is normalized before the normalized token is sought.
	assert.Equal(t, []int{cafe}, tok.Encode("<|cafe\u0301|>"))
	assert.Equal(t, []int{cafe}, tok.Encode("<|café|>"))
	assert.Equal(t, []int{think}, tok.Encode("<think>"))
	// Non-special added tokens decode to their content too (the ByteLevel
	// decoder maps "é", a byte-level rune, to the byte 0xE9: as in
	// tokenizers, "<|café|>" decodes to invalid UTF-8).
	got, err := tok.Decode([]int{think, cafe})
	require.NoError(t, err)
	assert.Equal(t, "<think><|caf\uFFFD|>", got)
}

func TestNormalizationIsPerPiece(t *testing.T) {
	// A combining mark right after an added token cannot compose with the
	// letter before the token: each piece is normalized on its own.
	tok := chatFixture().load(t)
	got, err := tok.Decode(tok.Encode("e<|im_end|>\u0301"))
	require.NoError(t, err)
	assert.Equal(t, "e<|im_end|>\u0301", got)
}

func TestAddedTokenOptions(t *testing.T) {
	mask := func(opts map[string]any) fixture {
		e := addedEntry(256, "<mask>", false, false)
		for k, v := range opts {
			e[k] = v
		}
		return fixture{added: []map[string]any{e}}
	}

	// lstrip/rstrip swallow the white space next to the token.
	tok := mask(map[string]any{"lstrip": true, "rstrip": true}).load(t)
	assert.Equal(t, append(append(ids(t, tok, "a"), 256), ids(t, tok, "b")...), tok.Encode("a  <mask>\t b"))

	tok = mask(map[string]any{"lstrip": true}).load(t)
	assert.Equal(t, append(append(ids(t, tok, "a"), 256), ids(t, tok, " ", "b")...), tok.Encode("a <mask> b"))

	// single_word: only between non-word characters.
	tok = mask(map[string]any{"single_word": true}).load(t)
	assert.Equal(t, append(ids(t, tok, "a", " "), 256), tok.Encode("a <mask>"))
	assert.NotContains(t, tok.Encode("a<mask>"), 256)
	assert.NotContains(t, tok.Encode("<mask>b"), 256)
	assert.NotContains(t, tok.Encode("<mask>é"), 256)
	assert.Contains(t, tok.Encode("<mask>, "), 256)
}

func TestAddedTokenIDs(t *testing.T) {
	// An added token that is also in the vocabulary keeps its vocabulary
	// id; new ones follow the vocabulary, as tokenizers assigns them.
	// (tokenizers ignores the ids written in the file, with a warning.)
	f := fixture{extra: []string{"<s>"}}
	v := f.vocab()
	f.added = []map[string]any{
		addedEntry(v[byteLevel("<s>")], "<s>", true, false),
		addedEntry(len(v), "<|x|>", true, false),
		addedEntry(len(v)+1, "<|y|>", true, false),
	}
	tok := f.load(t)
	id, ok := tok.TokenID("<s>")
	require.True(t, ok)
	assert.Equal(t, v[byteLevel("<s>")], id)
	assert.Equal(t, []int{len(v), len(v) + 1, id}, tok.Encode("<|x|><|y|><s>"))
	assert.Equal(t, len(v)+2, tok.VocabSize())
}

func TestAddedTokenIDsAreAssignedLikeTokenizers(t *testing.T) {
	f := fixture{added: []map[string]any{
		addedEntry(500, "<mask>", false, false),
		addedEntry(7, "<x>", true, false),
	}}
	tok := f.load(t)
	assert.Equal(t, append(append(ids(t, tok, "a"), 256), append(ids(t, tok, "b"), 257)...), tok.Encode("a<mask>b<x>"))
	assert.Equal(t, 258, tok.VocabSize())
}
