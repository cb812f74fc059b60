package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// qwen2Pattern is the Split regex of Qwen2/Qwen2.5/Qwen3 tokenizer.json files
// (behavior "Isolated"). splitQwen2 implements it by hand.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// appendQwen2Splits appends to dst the pieces that splitting s with
// qwen2Pattern (Isolated behaviour) yields, and returns the extended slice.
// The pieces are substrings of s and concatenate back to s.
//
// The regex is evaluated as Oniguruma (the engine behind `tokenizers`) does:
// scanning left to right, the match at each position is the first
// alternative that matches, each quantifier greedy with backtracking. Every
// rune is a letter, a number, white space or "other", so some alternative
// always matches where the previous match ended and there are no gaps.
// s must be valid UTF-8.
func appendQwen2Splits(dst []string, s string) []string {
	for i := 0; i < len(s); {
		end := qwen2MatchEnd(s, i)
		dst = append(dst, s[i:end])
		i = end
	}
	return dst
}

// qwen2MatchEnd returns the end of the qwen2Pattern match that starts at byte
// offset i of s (i < len(s)).
func qwen2MatchEnd(s string, i int) int {
	r0, n0 := utf8.DecodeRuneInString(s[i:])
	next := i + n0

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' {
		if end := contractionEnd(s, next); end > 0 {
			return end
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+ : the optional rune is tried first.
	if isLetter(r0) {
		return letterRunEnd(s, next)
	}
	if !isNumber(r0) && r0 != '\r' && r0 != '\n' && next < len(s) {
		if r1, n1 := utf8.DecodeRuneInString(s[next:]); isLetter(r1) {
			return letterRunEnd(s, next+n1)
		}
	}

	// \p{N} : a single number rune.
	if isNumber(r0) {
		return next
	}

	// ` ?[^\s\p{L}\p{N}]+[\r\n]*` : with the space if it is followed by an
	// "other" rune; without it the space itself cannot start the run.
	j := i
	if r0 == ' ' {
		j = next
	}
	if j < len(s) {
		if r, _ := utf8.DecodeRuneInString(s[j:]); isOther(r) {
			return newlineRunEnd(s, otherRunEnd(s, j))
		}
	}

	if unicode.IsSpace(r0) {
		spaceEnd, lastNewline, lastStart := scanSpaces(s, i)
		// \s*[\r\n]+ : \s* backs off to the last \r or \n of the run, which
		// [\r\n]+ then takes (the rune after it is not \r or \n).
		if lastNewline >= 0 {
			return lastNewline + 1
		}
		// \s+(?!\S) : the whole run at the end of the text; otherwise all
		// of it but its last rune, which then starts the next piece.
		if spaceEnd == len(s) {
			return spaceEnd
		}
		if lastStart > i {
			return lastStart
		}
		// \s+ : a single space rune before a non-space.
		return spaceEnd
	}

	// Unreachable: every rune is a letter, number, space or other.
	return next
}

// contractionEnd matches 's|'t|'re|'ve|'m|'ll|'d case-insensitively with the
// apostrophe already consumed, j being the offset after it. It returns the
// end offset, or 0 if no alternative matches.
func contractionEnd(s string, j int) int {
	if j >= len(s) {
		return 0
	}
	r1, n1 := utf8.DecodeRuneInString(s[j:])
	k := j + n1
	// second returns the end of the rune at k if it folds to c, else 0.
	second := func(c rune) int {
		if k >= len(s) {
			return 0
		}
		if r2, n2 := utf8.DecodeRuneInString(s[k:]); foldEq(r2, c) {
			return k + n2
		}
		return 0
	}
	switch {
	case foldEq(r1, 's'), foldEq(r1, 't'):
		return k
	case foldEq(r1, 'r'):
		return second('e')
	case foldEq(r1, 'v'):
		return second('e')
	case foldEq(r1, 'm'):
		return k
	case foldEq(r1, 'l'):
		return second('l')
	case foldEq(r1, 'd'):
		return k
	}
	return 0
}

// foldEq reports whether r equals the lower-case ASCII letter c under Unicode
// simple case folding (so 's' also matches 'S' and 'ſ' U+017F, as Oniguruma's
// (?i) does).
func foldEq(r, c rune) bool {
	if r == c {
		return true
	}
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

// isOther reports whether r is in [^\s\p{L}\p{N}]. \s is Unicode White_Space,
// which is what unicode.IsSpace tests.
func isOther(r rune) bool {
	return !unicode.IsSpace(r) && !isLetter(r) && !isNumber(r)
}

func letterRunEnd(s string, j int) int {
	for j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		if !isLetter(r) {
			break
		}
		j += n
	}
	return j
}

func otherRunEnd(s string, j int) int {
	for j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		if !isOther(r) {
			break
		}
		j += n
	}
	return j
}

func newlineRunEnd(s string, j int) int {
	for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
		j++
	}
	return j
}

// scanSpaces scans the run of white space starting at i. It returns the end
// of the run, the offset of its last '\r' or '\n' (-1 if none) and the offset
// at which its last rune starts.
func scanSpaces(s string, i int) (end, lastNewline, lastStart int) {
	lastNewline = -1
	j := i
	for j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsSpace(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNewline = j
		}
		lastStart = j
		j += n
	}
	return j, lastNewline, lastStart
}
