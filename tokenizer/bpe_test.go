package tokenizer

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMergesApplyByRank(t *testing.T) {
	tok := fixture{merges: [][2]string{
		{"l", "l"},    // rank 0
		{"h", "e"},    // rank 1
		{"he", "ll"},  // rank 2
		{"hell", "o"}, // rank 3
		{"e", "l"},    // rank 4: loses to "l l" in "hello"
		{" ", "w"},
		{" w", "o"},
	}}.load(t)

	assert.Equal(t, ids(t, tok, "hello"), tok.Encode("hello"))
	assert.Equal(t, ids(t, tok, "hello", " wo", "r", "l", "d"), tok.Encode("hello world"))
	// "e l" applies where "l l" does not compete.
	assert.Equal(t, ids(t, tok, "b", "el", "t"), tok.Encode("belt"))
	// Merges never cross pre-tokenizer pieces: "o" and " w" stay apart.
	assert.Equal(t, ids(t, tok, "o", " wo"), tok.Encode("o wo"))
}

// tokenizers merges with a priority queue keyed on (rank, position) and
// queues the pairs each merge creates; a newly created pair of better rank
// is merged before the remaining occurrences of the current pair. A classic
// "merge every occurrence of the best pair" loop would give "ab ab" here.
func TestMergeOrderFollowsTokenizersQueue(t *testing.T) {
	tok := fixture{merges: [][2]string{
		{"ab", "a"}, // rank 0, only reachable after "a b"
		{"a", "b"},  // rank 1
	}, extra: []string{"ab"}}.load(t)
	assert.Equal(t, ids(t, tok, "aba", "b"), tok.Encode("abab"))
	assert.Equal(t, ids(t, tok, "aba", "b", "ab"), tok.Encode("ababab"))
}

func TestRepeatedLettersMergeLeftToRight(t *testing.T) {
	tok := fixture{merges: [][2]string{{"a", "a"}}}.load(t)
	assert.Equal(t, ids(t, tok, "aa", "a"), tok.Encode("aaa"))
	assert.Equal(t, ids(t, tok, "aa", "aa"), tok.Encode("aaaa"))
}

func TestLegacyAndPairMergesAgree(t *testing.T) {
	merges := trainMerges(benchCorpus, 300)
	pairs := fixture{merges: merges}.load(t)
	legacy := fixture{merges: merges, legacyMerges: true}.load(t)
	for _, s := range []string{benchCorpus, "I'm sure we'll see", "Grüße 你好 😀"} {
		assert.Equal(t, pairs.Encode(s), legacy.Encode(s))
	}
}

func TestIgnoreMergesTakesWholeVocabularyWords(t *testing.T) {
	// "abc" is in the vocabulary but no merge leads to it.
	f := fixture{extra: []string{"abc"}, merges: [][2]string{{"a", "b"}}}
	assert.Equal(t, ids(t, f.load(t), "ab", "c"), f.load(t).Encode("abc"))
	f.ignoreMerges = true
	tok := f.load(t)
	assert.Equal(t, ids(t, tok, "abc"), tok.Encode("abc"))
	assert.Equal(t, ids(t, tok, "ab", "d"), tok.Encode("abd"))
}

func TestEveryByteHasAToken(t *testing.T) {
	// Without merges each UTF-8 byte of the text is one token: the id of
	// its byte-level rune.
	tok := fixture{}.load(t)
	var text []rune
	for r := rune(1); r < 0x80; r++ {
		text = append(text, r)
	}
	text = append(text, 0, 'é', 'ÿ', '中', '€', '😀', 0x7FF, 0x800, 0xFFFD, 0x10FFFF)
	for r := rune(0x80); r < 0x800; r += 61 {
		text = append(text, r)
	}
	s := string(text)
	seen := map[byte]bool{}
	want := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		id, ok := tok.TokenID(string(byteToRune[s[i]]))
		require.True(t, ok)
		want[i] = id
		seen[s[i]] = true
	}
	assert.Equal(t, want, tok.Encode(s))
	got, err := tok.Decode(want)
	require.NoError(t, err)
	assert.Equal(t, s, got)

	// Every one of the 256 byte tokens decodes to its byte.
	for b := 0; b < 256; b++ {
		id, ok := tok.TokenID(string(byteToRune[b]))
		require.True(t, ok)
		dec, err := tok.Decode([]int{id})
		require.NoError(t, err)
		assert.Equal(t, lossyUTF8([]byte{byte(b)}), dec, "byte %#x", b)
	}
}

func TestMissingByteTokensAreDropped(t *testing.T) {
	// tokenizers skips a rune that is not in the vocabulary when the model
	// has neither unk_token nor byte_fallback.
	doc := fixture{}.doc()
	vocab := doc["model"].(map[string]any)["vocab"].(map[string]int)
	delete(vocab, "Ġ")
	tok, err := Load(writeDoc(t, doc))
	require.NoError(t, err)
	want := []int{vocab["a"], vocab["b"]}
	assert.Equal(t, want, tok.Encode("a b"))
}

func TestUnkToken(t *testing.T) {
	doc := fixture{extra: []string{"<unk>"}}.doc()
	model := doc["model"].(map[string]any)
	vocab := model["vocab"].(map[string]int)
	delete(vocab, "Ġ")
	delete(vocab, "!")
	model["unk_token"] = "<unk>"
	unk := vocab[byteLevel("<unk>")]
	tok, err := Load(writeDoc(t, doc))
	require.NoError(t, err)
	assert.Equal(t, []int{vocab["a"], unk, unk, vocab["b"]}, tok.Encode("a !b"))

	model["fuse_unk"] = true
	tok, err = Load(writeDoc(t, doc))
	require.NoError(t, err)
	assert.Equal(t, []int{vocab["a"], unk, vocab["b"]}, tok.Encode("a !b"))
}

func TestEncodeIsStableWithCacheAndConcurrency(t *testing.T) {
	tok := fixture{merges: trainMerges(benchCorpus, 400)}.load(t)
	want := tok.Encode(benchCorpus)
	assert.Equal(t, want, tok.Encode(benchCorpus), "second encode, from the cache")

	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				assert.Equal(t, want, tok.Encode(benchCorpus))
			}
		}()
	}
	wg.Wait()
}

func TestLongPiecesAreNotCachedButEncoded(t *testing.T) {
	tok := fixture{merges: [][2]string{{"a", "a"}, {"aa", "aa"}}}.load(t)
	long := make([]byte, 1001)
	for i := range long {
		long[i] = 'a'
	}
	got := tok.Encode(string(long))
	aaaa, a := ids(t, tok, "aaaa")[0], ids(t, tok, "a")[0]
	require.Len(t, got, 251)
	for _, id := range got[:250] {
		require.Equal(t, aaaa, id)
	}
	assert.Equal(t, a, got[250])
}
