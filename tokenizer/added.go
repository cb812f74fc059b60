package tokenizer

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's "added_tokens".
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// normalized reports whether the token is matched against normalized text;
// when the file omits the flag it defaults to !special, as in `tokenizers`.
func (t *addedToken) normalized() bool {
	if t.Normalized == nil {
		return !t.Special
	}
	return *t.Normalized
}

// sameAs reports whether two added tokens are equal in every field but the
// id (the equality `tokenizers` uses to ignore repeated entries).
func (t *addedToken) sameAs(u *addedToken) bool {
	return t.Content == u.Content && t.SingleWord == u.SingleWord &&
		t.LStrip == u.LStrip && t.RStrip == u.RStrip &&
		t.normalized() == u.normalized() && t.Special == u.Special
}

// addedMatcher finds added tokens in text the way `tokenizers` does with its
// leftmost-longest Aho-Corasick automaton, then applies the tokens'
// single_word, lstrip and rstrip options.
type addedMatcher struct {
	patterns []string      // text matched for each pattern
	tokens   []*addedToken // token emitted for each pattern
	byFirst  [256][]int    // pattern indices by first byte, longest first
}

func newAddedMatcher(patterns []string, tokens []*addedToken) *addedMatcher {
	m := &addedMatcher{patterns: patterns, tokens: tokens}
	for i, p := range patterns {
		if p != "" {
			m.byFirst[p[0]] = append(m.byFirst[p[0]], i)
		}
	}
	for b := range m.byFirst {
		slices.SortStableFunc(m.byFirst[b], func(x, y int) int {
			return len(patterns[y]) - len(patterns[x])
		})
	}
	return m
}

func (m *addedMatcher) empty() bool { return len(m.patterns) == 0 }

// segment is a piece of the input: either an added token (tok != nil) or
// text still to be tokenized.
type segment struct {
	text string
	tok  *addedToken
}

// split appends to dst the segments of s: the added tokens found and the
// text between them (empty text is dropped).
func (m *addedMatcher) split(dst []segment, s string) []segment {
	if m.empty() {
		if s != "" {
			dst = append(dst, segment{text: s})
		}
		return dst
	}
	startOffset := 0
	for i := 0; i < len(s); {
		p := m.longestAt(s, i)
		if p < 0 {
			i++
			continue
		}
		start, stop := i, i+len(m.patterns[p])
		i = stop // the automaton resumes after the match, kept or not
		tok := m.tokens[p]
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			start = max(trailingSpaceStart(s[:start]), startOffset)
		}
		if tok.RStrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if startOffset < start {
			dst = append(dst, segment{text: s[startOffset:start]})
		}
		dst = append(dst, segment{text: s[start:stop], tok: tok})
		startOffset = stop
	}
	if startOffset < len(s) {
		dst = append(dst, segment{text: s[startOffset:]})
	}
	return dst
}

// longestAt returns the index of the longest pattern that s has at offset
// i, or -1.
func (m *addedMatcher) longestAt(s string, i int) int {
	for _, p := range m.byFirst[s[i]] {
		if strings.HasPrefix(s[i:], m.patterns[p]) {
			return p
		}
	}
	return -1
}

// isWordRune reports whether r matches the Rust regex crate's Unicode \w:
// Alphabetic, marks, decimal digits, connector punctuation, join controls.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.IsMark(r) ||
		unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}

// trailingSpaceStart returns where the white space at the end of s begins.
func trailingSpaceStart(s string) int {
	return len(strings.TrimRightFunc(s, unicode.IsSpace))
}

// leadingSpaceLen returns the length of the white space at the start of s.
func leadingSpaceLen(s string) int {
	return len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
}
