package tokenizer

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func split(s string) []string { return appendQwen2Splits(nil, s) }

func TestQwen2SplitEdgeCases(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"words", "Hello world", []string{"Hello", " world"}},
		{"contractions", "I'm sure it's what we'd've done", []string{"I", "'m", " sure", " it", "'s", " what", " we", "'d", "'ve", " done"}},
		{"contractions are case-insensitive", "I'M HE'LL THEY'RE DON'T", []string{"I", "'M", " HE", "'LL", " THEY", "'RE", " DON", "'T"}},
		{"mixed-case contraction", "you'Ll we'rE", []string{"you", "'Ll", " we", "'rE"}},
		{"contraction beats a longer letter run", "'sam", []string{"'s", "am"}},
		{"apostrophe before a non-contraction word", "'hello 'x", []string{"'hello", " '", "x"}},
		{"long s folds to s", "it'ſ", []string{"it", "'ſ"}},
		{"lone apostrophes", "'' '", []string{"''", " '"}},
		{"digits one by one", "abc12345def", []string{"abc", "1", "2", "3", "4", "5", "def"}},
		{"space before digits stays alone", "in 2024", []string{"in", " ", "2", "0", "2", "4"}},
		{"other numbers", "½²Ⅻ٣", []string{"½", "²", "Ⅻ", "٣"}},
		{"decimal", "3.14", []string{"3", ".", "1", "4"}},
		{"two spaces before a word", "a  b", []string{"a", " ", " b"}},
		{"many spaces before a word", "a     b", []string{"a", "    ", " b"}},
		{"leading spaces", "   hi", []string{"  ", " hi"}},
		{"trailing spaces", "hi   ", []string{"hi", "   "}},
		{"only spaces", "    ", []string{"    "}},
		{"single space before punctuation joins it", "a !", []string{"a", " !"}},
		{"two spaces before punctuation", "a  !", []string{"a", " ", " !"}},
		{"space before digit", "a 1", []string{"a", " ", "1"}},
		{"tab joins the word", "\tfoo", []string{"\tfoo"}},
		{"tabs then word", "\t\tfoo", []string{"\t", "\tfoo"}},
		{"newline", "a\nb", []string{"a", "\n", "b"}},
		{"newlines collapse", "a\n\n\nb", []string{"a", "\n\n\n", "b"}},
		{"spaces around newlines", "a  \n  b", []string{"a", "  \n", " ", " b"}},
		{"crlf", "line\r\nnext", []string{"line", "\r\n", "next"}},
		{"newline then spaces at end", "a\n  ", []string{"a", "\n", "  "}},
		{"newline does not start a word", "\nfoo", []string{"\n", "foo"}},
		{"punctuation run with newlines", "end.)\n\nNext", []string{"end", ".)\n\n", "Next"}},
		{"space + punctuation run", "x ...!?", []string{"x", " ...!?"}},
		{"punctuation glued to a word", "$hello (world)", []string{"$hello", " (", "world", ")"}},
		{"code", "if (x == 1) {\n\treturn y;\n}", []string{"if", " (", "x", " ==", " ", "1", ")", " {\n", "\treturn", " y", ";\n", "}"}},
		{"unicode letters", "Grüße café naïve", []string{"Grüße", " café", " naïve"}},
		{"combining mark starts a word", "e\u0301t\u00e9", []string{"e", "\u0301t\u00e9"}},
		{"devanagari marks", "हिन्दी", []string{"ह", "िन", "्द", "ी"}},
		{"cjk run is one piece", "你好，世界！", []string{"你好", "，世界", "！"}},
		{"cjk after space", "hi 日本語です", []string{"hi", " 日本語です"}},
		{"ideographic space", "a\u3000b", []string{"a", "\u3000b"}},
		{"nbsp", "a\u00a0\u00a0b", []string{"a", "\u00a0", "\u00a0b"}},
		{"emoji", "ok 👍🏽 yes😀no", []string{"ok", " 👍🏽", " yes", "😀no"}},
		{"zwj emoji", "👨\u200d👩", []string{"👨\u200d👩"}},
		{"vertical tab and form feed are spaces", "a\v\fb", []string{"a", "\v", "\fb"}},
		{"line separator is a space", "a\u2028b", []string{"a", "\u2028b"}},
		{"underscore is other", "snake_case_name", []string{"snake", "_case", "_name"}},
		{"special token text is plain text here", "<|im_start|>user", []string{"<|", "im", "_start", "|>", "user"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, split(c.in))
		})
	}
}

// The oracle evaluates the Qwen2 regex with Go's regexp, which picks the
// same match as a backtracking engine at a given start, for every
// alternative except `\s+(?!\S)` (no look-ahead in RE2), done by hand. \s is
// spelled out as Unicode White_Space since RE2's \s is ASCII only.
const oracleWS = `\t\n\v\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}`

var (
	oracleHead  = regexp.MustCompile(`^(?:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\pL\pN]?\pL+|\pN| ?[^` + oracleWS + `\pL\pN]+[\r\n]*|[` + oracleWS + `]*[\r\n]+)`)
	oracleSpace = regexp.MustCompile(`^[` + oracleWS + `]+`)
)

func oracleSplit(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		var end int
		if m := oracleHead.FindStringIndex(s[i:]); m != nil {
			end = i + m[1]
		} else {
			sp := oracleSpace.FindString(s[i:])
			if sp == "" {
				panic("oracle: no match at " + s[i:])
			}
			end = i + len(sp)
			if end < len(s) && utf8.RuneCountInString(sp) > 1 { // \s+(?!\S)
				_, n := utf8.DecodeLastRuneInString(sp)
				end -= n
			}
		}
		out = append(out, s[i:end])
		i = end
	}
	return out
}

// splitAlphabet is weighted towards the runes where the alternatives of the
// regex compete.
var splitAlphabet = []rune("aAbszSTſKlLdDeErRvVmM'''   \t\n\n\r\v\f\u00a0\u3000\u2003\u0085\u2028" +
	"0179½²٣Ⅻ!.,;$-_()<|>\"#中文日本語한국어éüß\u0301\u093f\u094dहन😀👍\u200d\U0001F3FD\uFFFD")

func randomText(r *rand.Rand, maxLen int) string {
	n := r.IntN(maxLen + 1)
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.WriteRune(splitAlphabet[r.IntN(len(splitAlphabet))])
	}
	return sb.String()
}

func TestQwen2SplitMatchesRegexOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		s := randomText(r, 16)
		require.Equal(t, oracleSplit(s), split(s), "input %q", s)
	}
}

func TestQwen2SplitCoversInput(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 5000; i++ {
		s := randomText(r, 40)
		pieces := split(s)
		for _, p := range pieces {
			require.NotEmpty(t, p, "input %q", s)
			require.True(t, utf8.ValidString(p), "input %q", s)
		}
		require.Equal(t, s, strings.Join(pieces, ""))
	}
}

func FuzzQwen2Split(f *testing.F) {
	for _, s := range []string{"Hello world", "I'M  ok\n\n", "a  \n  b", "x'ſ 12", " \t!!\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		got := split(s)
		if strings.Join(got, "") != s {
			t.Fatalf("pieces %q do not cover %q", got, s)
		}
		if want := oracleSplit(s); !equalStrings(want, got) {
			t.Fatalf("split(%q) = %q, oracle %q", s, got, want)
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
