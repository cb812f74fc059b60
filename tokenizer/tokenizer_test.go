package tokenizer

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
)

var roundTripTexts = []string{
	"",
	"Hello, world!",
	"I'm sure you'll like it; we've done what they'd said.",
	"DON'T SHOUT: I'M HERE",
	"two  spaces,    four, trailing   ",
	"line one\nline two\n\n\nwindows\r\nend\r\n",
	"def f(x):\n\treturn x ** 2  # square\n",
	"Grüße aus München! Ça va très bien. naïve façade",
	"Cafe\u0301 decomposed, \u1100\u1161\u11a8 jamo, K kelvin",
	"你好，世界！这是一个测试。日本語のテキスト。한국어",
	"हिन्दी पाठ और ไทย ภาษา",
	"Emoji: 😀👍🏽 👨\u200d👩\u200d👧 🇩🇪 ❤️",
	"spaces:\u00a0nbsp,\u3000ideographic,\u2003em,\u2028ls,\u0085nel",
	"<|im_start|>system\nYou are a robot.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Go!<|im_end|>\n",
	"\x00\x01\x1b[31mred\x1b[0m\x7f",
}

func TestDecodeEncodeIsNFC(t *testing.T) {
	f := fixture{merges: trainMerges(benchCorpus, 500)}
	f.added = qwenAdded(len(f.vocab()))
	tok := f.load(t)
	check := func(s string) {
		t.Helper()
		got, err := tok.Decode(tok.Encode(s))
		require.NoError(t, err)
		require.Equal(t, norm.NFC.String(s), got, "input %q", s)
	}
	for _, s := range roundTripTexts {
		check(s)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 3000; i++ {
		check(randomText(r, 40))
	}
}

func TestEncodeReplacesInvalidUTF8(t *testing.T) {
	tok := fixture{}.load(t)
	assert.Equal(t, tok.Encode("a\uFFFDb\uFFFD\uFFFD"), tok.Encode("a\xffb\xed\xa0"))
}

func TestDecodeErrorsOnUnknownIDs(t *testing.T) {
	tok := fixture{added: qwenAdded(256)}.load(t)
	for _, id := range []int{-1, 262, 1 << 40} {
		_, err := tok.Decode([]int{97, id})
		require.Error(t, err, "id %d", id)
		assert.Contains(t, err.Error(), "unknown token id")
		assert.Contains(t, err.Error(), "position 1")
	}
	got, err := tok.Decode(nil)
	require.NoError(t, err)
	assert.Equal(t, "", got)
}

func TestDecodeRendersSpecialTokens(t *testing.T) {
	tok := fixture{added: qwenAdded(256)}.load(t)
	ids := append([]int{257}, append(tok.Encode("user"), 258)...)
	got, err := tok.Decode(ids)
	require.NoError(t, err)
	assert.Equal(t, "<|im_start|>user<|im_end|>", got)
}

func TestDecodeOfPartialCharacter(t *testing.T) {
	tok := fixture{}.load(t)
	ids := tok.Encode("中")
	require.Len(t, ids, 3)
	got, err := tok.Decode(ids[:2])
	require.NoError(t, err)
	assert.Equal(t, "\uFFFD", got)
}

func TestTokenIDAndVocabSize(t *testing.T) {
	tok := fixture{merges: [][2]string{{" ", "t"}}, added: qwenAdded(257)}.load(t)
	assert.Equal(t, 257+6, tok.VocabSize())

	id, ok := tok.TokenID("<|im_start|>")
	require.True(t, ok)
	assert.Equal(t, 258, id)
	id, ok = tok.TokenID("Ġt") // vocabulary strings are byte-level
	require.True(t, ok)
	assert.Equal(t, 256, id)
	_, ok = tok.TokenID(" t")
	assert.False(t, ok)
	_, ok = tok.TokenID("<|nope|>")
	assert.False(t, ok)
}
