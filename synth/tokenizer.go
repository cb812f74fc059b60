package synth

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"unicode/utf8"
)

// corpus is the text the first merges are learned from: driving scenes and
// Alpamayo's prompt, so that such text encodes to few tokens.
//
//go:embed corpus.txt
var corpus string

// qwen2Pattern is the Split regex of Qwen2/Qwen3 tokenizer.json files.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Shape of the generated merges beyond the corpus.
const (
	fillSeed      = 0x5157454e33564c // "QWEN3VL": the vocabulary does not depend on --seed
	fillShortPool = 4096             // right-hand parts come from the first tokens (short ones)
	fillMaxBytes  = 16               // longest generated token, in bytes
)

// byteRune is GPT-2's bytes_to_unicode: the printable rune that stands for
// each byte in a byte-level vocabulary.
var byteRune = func() (m [256]rune) {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
	}
	return m
}()

// bpeVocab is a byte-level BPE vocabulary: tokens[id] in byte-level form,
// and merges in rank order, each joining two tokens into a third.
type bpeVocab struct {
	tokens []string
	merges [][2]string
}

// buildVocab makes the qwenRegularTokens tokens: the 256 byte tokens (in
// rune order, as Qwen numbers them), the merges a plain BPE trainer learns
// from corpus, then merges of an existing token with a short one, drawn
// from a fixed random stream, until the count is reached.
var buildVocab = sync.OnceValue(func() *bpeVocab {
	v := &bpeVocab{
		tokens: make([]string, 0, qwenRegularTokens),
		merges: make([][2]string, 0, qwenRegularTokens-256),
	}
	have := make(map[string]bool, qwenRegularTokens)
	runes := make([]int, 0, qwenRegularTokens) // length of each token, in bytes it stands for
	add := func(tok string) {
		if !have[tok] {
			have[tok] = true
			v.tokens = append(v.tokens, tok)
			runes = append(runes, utf8.RuneCountInString(tok))
		}
	}
	bytesInOrder := make([]string, 256)
	for b := range bytesInOrder {
		bytesInOrder[b] = string(byteRune[b])
	}
	sort.Strings(bytesInOrder)
	for _, t := range bytesInOrder {
		add(t)
	}
	for _, m := range trainMerges(corpus) {
		v.merges = append(v.merges, m)
		add(m[0] + m[1])
	}

	reserved := map[string]bool{}
	for _, t := range addedTokens(VocabAlpamayoR1) {
		reserved[t.content] = true
	}
	for i := uint64(0); len(v.tokens) < qwenRegularTokens; i++ {
		w := word(fillSeed, i)
		a := int(w>>32) % len(v.tokens)
		b := int(w&0xffffffff) % min(len(v.tokens), fillShortPool)
		if runes[a]+runes[b] > fillMaxBytes {
			continue
		}
		tok := v.tokens[a] + v.tokens[b]
		if have[tok] || reserved[tok] {
			continue
		}
		v.merges = append(v.merges, [2]string{v.tokens[a], v.tokens[b]})
		add(tok)
	}
	return v
})

// trainMerges learns merges from text with a plain BPE trainer: the most
// frequent adjacent pair first (ties broken by the pair's text), until no
// pair occurs twice.
func trainMerges(text string) [][2]string {
	counts := map[string]int{}
	for _, w := range splitWords(text) {
		counts[w]++
	}
	type word struct {
		syms  []string
		count int
	}
	words := make([]word, 0, len(counts))
	for w, c := range counts {
		syms := make([]string, len(w))
		for i := 0; i < len(w); i++ {
			syms[i] = string(byteRune[w[i]])
		}
		words = append(words, word{syms, c})
	}
	var merges [][2]string
	for {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best [2]string
		bestN := 1
		for p, n := range pairs {
			if n > bestN || (n == bestN && n > 1 && (p[0] < best[0] || p[0] == best[0] && p[1] < best[1])) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			return merges
		}
		merges = append(merges, best)
		for wi := range words {
			syms := words[wi].syms
			out := syms[:0]
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == best[0] && syms[i+1] == best[1] {
					out = append(out, best[0]+best[1])
					i++
				} else {
					out = append(out, syms[i])
				}
			}
			words[wi].syms = out
		}
	}
}

// splitWords splits ASCII text roughly as the Qwen2 pre-tokenizer does:
// an optional leading non-letter and a run of letters, single digits,
// punctuation runs with an optional leading space, white-space runs.
func splitWords(s string) []string {
	isLetter := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
	isDigit := func(c byte) bool { return '0' <= c && c <= '9' }
	isSpace := func(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }
	isPunct := func(c byte) bool { return !isLetter(c) && !isDigit(c) && !isSpace(c) }
	var out []string
	for i := 0; i < len(s); {
		j := i + 1
		c := s[i]
		switch {
		case isLetter(c) || !isDigit(c) && c != '\n' && c != '\r' && j < len(s) && isLetter(s[j]):
			for j < len(s) && isLetter(s[j]) {
				j++
			}
		case isDigit(c):
		case c == ' ' && j < len(s) && isPunct(s[j]) || isPunct(c):
			for j < len(s) && isPunct(s[j]) {
				j++
			}
		default:
			for j < len(s) && isSpace(s[j]) {
				j++
			}
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

var tokenizerDocs = [3]func() ([]byte, error){
	sync.OnceValues(func() ([]byte, error) { return tokenizerJSON(VocabQwen) }),
	sync.OnceValues(func() ([]byte, error) { return tokenizerJSON(VocabAlpamayoR1) }),
	sync.OnceValues(func() ([]byte, error) { return tokenizerJSON(VocabAlpamayo15) }),
}

// TokenizerJSON returns a synthetic but valid Qwen-style tokenizer.json:
// byte-level BPE with 151,643 regular tokens and Qwen3's added tokens
// (<|endoftext|> 151643 … </think> 151668), set up exactly as Qwen's
// (NFC, the Qwen2 Split regex and ByteLevel, the ByteLevel decoder). With
// alpamayo it also has the 4,000 trajectory tokens <i0>… from 151669 and
// Alpamayo's special tokens (<|traj_history_start|> 155674 …
// <|answer_end|> 155696), 155,697 ids in all. The result is built once
// and shared: do not modify it.
func TokenizerJSON(alpamayo bool) ([]byte, error) {
	if alpamayo {
		return TokenizerJSONOf(VocabAlpamayoR1)
	}
	return TokenizerJSONOf(VocabQwen)
}

// TokenizerJSONOf is TokenizerJSON for the vocabulary v (Alpamayo 1.5's
// names the unused special tokens <|_padding_N|>).
func TokenizerJSONOf(v Vocab) ([]byte, error) {
	if v < 0 || int(v) >= len(tokenizerDocs) {
		return nil, fmt.Errorf("synth: unknown vocabulary %d", v)
	}
	return tokenizerDocs[v]()
}

// tokenizerJSON writes the document: one vocabulary entry and one merge
// per line, in id and rank order.
func tokenizerJSON(vocab Vocab) ([]byte, error) {
	v := buildVocab()
	type addedJSON struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	added := addedTokens(vocab)
	addedList := make([]addedJSON, len(added))
	for i, t := range added {
		addedList[i] = addedJSON{ID: qwenRegularTokens + i, Content: t.content, Normalized: t.normalized, Special: t.special}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
	head := []struct {
		key string
		val any
	}{
		{"version", "1.0"}, {"truncation", nil}, {"padding", nil},
		{"added_tokens", nil}, // written below, one per line
		{"normalizer", map[string]any{"type": "NFC"}},
		{"pre_tokenizer", map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}}},
		{"post_processor", byteLevel},
		{"decoder", byteLevel},
	}

	var buf bytes.Buffer
	buf.Grow(24 * (len(v.tokens) + len(v.merges)))
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteString("{\n")
	for _, h := range head {
		fmt.Fprintf(&buf, "  %q: ", h.key)
		if h.key == "added_tokens" {
			buf.WriteString("[")
			for i, a := range addedList {
				if i > 0 {
					buf.WriteByte(',')
				}
				buf.WriteString("\n    ")
				if err := enc.Encode(a); err != nil {
					return nil, fmt.Errorf("synth: tokenizer.json added token %q: %w", a.Content, err)
				}
				buf.Truncate(buf.Len() - 1)
			}
			buf.WriteString("\n  ],\n")
			continue
		}
		if err := enc.Encode(h.val); err != nil {
			return nil, fmt.Errorf("synth: tokenizer.json %s: %w", h.key, err)
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
		buf.WriteString(",\n")
	}
	buf.WriteString(`  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "", ` +
		`"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,` + "\n")
	buf.WriteString(`    "vocab": {`)
	for id, tok := range v.tokens {
		if id > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n      ")
		appendJSONString(&buf, tok)
		buf.WriteString(": ")
		buf.WriteString(strconv.Itoa(id))
	}
	buf.WriteString("\n    },\n    \"merges\": [")
	for i, m := range v.merges {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n      [")
		appendJSONString(&buf, m[0])
		buf.WriteString(", ")
		appendJSONString(&buf, m[1])
		buf.WriteByte(']')
	}
	buf.WriteString("\n    ]\n  }\n}\n")
	return buf.Bytes(), nil
}

// appendJSONString writes s as a JSON string, escaping only what JSON
// requires.
func appendJSONString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			buf.WriteByte('\\')
			buf.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(buf, `\u%04x`, r)
		default:
			buf.WriteRune(r)
		}
	}
	buf.WriteByte('"')
}
