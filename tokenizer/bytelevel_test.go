package tokenizer

import (
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestByteToRuneIsGPT2BytesToUnicode(t *testing.T) {
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := byteToRune[b]
		require.False(t, seen[r], "rune %U used twice", r)
		seen[r] = true
		assert.True(t, unicode.IsPrint(r) && !unicode.IsSpace(r), "byte %#x maps to unprintable %U", b, r)
		assert.Equal(t, byte(b), runeToByte[r])
	}
	assert.Len(t, runeToByte, 256)
	// Printable bytes map to themselves, the others to U+0100 onwards.
	for _, c := range []struct {
		b byte
		r rune
	}{
		{'!', '!'}, {'~', '~'}, {'a', 'a'}, {0xA1, 0xA1}, {0xAC, 0xAC}, {0xAE, 0xAE}, {0xFF, 0xFF},
		{0x00, 'Ā'}, {'\t', 'ĉ'}, {'\n', 'Ċ'}, {'\r', 'č'}, {' ', 'Ġ'},
		{0x7F, 'ġ'}, {0x80, 'Ģ'}, {0xA0, 'ł'}, {0xAD, 'Ń'},
	} {
		assert.Equal(t, c.r, byteToRune[c.b], "byte %#x", c.b)
	}
	assert.Equal(t, "ĠhelloĊ", byteLevel(" hello\n"))
	assert.Equal(t, "Ã©", byteLevel("é"))
	assert.Equal(t, "ä¸Ń", byteLevel("中"))
}

func TestAppendTokenBytes(t *testing.T) {
	assert.Equal(t, " hello\n", string(appendTokenBytes(nil, "ĠhelloĊ")))
	assert.Equal(t, "é", string(appendTokenBytes(nil, "Ã©")))
	// A token with a rune outside the alphabet is taken verbatim.
	assert.Equal(t, "x<|a b|>", string(appendTokenBytes([]byte("x"), "<|a b|>")))
	assert.Equal(t, "<|im_start|>", string(appendTokenBytes(nil, "<|im_start|>")))
}

func TestLossyUTF8MatchesRustFromUTF8Lossy(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"a\x80b", "a\uFFFDb"},
		{"\xE2\x82", "\uFFFD"},                           // truncated 3-byte sequence
		{"\xE2\x82\xFF", "\uFFFD\uFFFD"},                 // truncated, then a bad byte
		{"\xF0\x9F\x98", "\uFFFD"},                       // truncated emoji
		{"\xF0\x9F\x98x", "\uFFFDx"},                     //
		{"\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD"},           // surrogate: ED then bad A0
		{"\xC0\x80", "\uFFFD\uFFFD"},                     // overlong lead
		{"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
		{"\xE0\x80\x80", "\uFFFD\uFFFD\uFFFD"},           // overlong 3-byte
		{"\xEF\xBF\xBD", "\uFFFD"},                       // a real U+FFFD
		{"é\xC3", "é\uFFFD"},
	} {
		assert.Equal(t, c.want, lossyUTF8([]byte(c.in)), "%q", c.in)
		assert.Equal(t, c.want, validUTF8(c.in), "%q", c.in)
	}
}
