package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteToRune maps every byte to the printable rune that stands for it in a
// byte-level BPE vocabulary (GPT-2's bytes_to_unicode): printable Latin-1
// bytes map to themselves, the 68 others (controls, space, DEL, NBSP, soft
// hyphen, ...) to U+0100 onwards in byte order. runeToByte is its inverse.
var (
	byteToRune [256]rune
	runeToByte = make(map[rune]byte, 256)
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevel returns s with every byte replaced by its byte-level rune.
func byteLevel(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteToRune[s[i]])
	}
	return sb.String()
}

// appendTokenBytes appends the bytes a token string stands for, as the
// ByteLevel decoder does: if every rune of tok belongs to the byte-level
// alphabet the token is mapped back rune by rune, otherwise (an added token
// such as "<|im start|>" with a plain space) its UTF-8 text is used as is.
func appendTokenBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// lossyUTF8 converts b to a string the way Rust's String::from_utf8_lossy
// does: every maximal invalid subsequence (the longest prefix of a would-be
// UTF-8 sequence, or a single bad byte) becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefixLen(b[i:])
	}
	return sb.String()
}

// invalidPrefixLen returns how many bytes at the start of b form the maximal
// prefix of a UTF-8 sequence that turned out invalid (at least 1). b must not
// start with a valid encoded rune.
func invalidPrefixLen(b []byte) int {
	lead := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // allowed range for the second byte
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 2
	case lead == 0xE0:
		need, lo = 3, 0xA0
	case lead >= 0xE1 && lead <= 0xEC, lead == 0xEE, lead == 0xEF:
		need = 3
	case lead == 0xED:
		need, hi = 3, 0x9F
	case lead == 0xF0:
		need, lo = 4, 0x90
	case lead >= 0xF1 && lead <= 0xF3:
		need = 4
	case lead == 0xF4:
		need, hi = 4, 0x8F
	default:
		return 1
	}
	n := 1
	for n < need && n < len(b) {
		c := b[n]
		if n == 1 && (c < lo || c > hi) {
			break
		}
		if n > 1 && (c < 0x80 || c > 0xBF) {
			break
		}
		n++
	}
	return n
}

// validUTF8 returns s, with invalid UTF-8 replaced as lossyUTF8 does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return lossyUTF8([]byte(s))
}
