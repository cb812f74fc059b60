package tokenizer

import (
	"fmt"
	"sync"
)

// Tokenizer converts between text and token ids. It is safe for concurrent
// use by multiple goroutines.
type Tokenizer struct {
	model *bpe
	norm  normalizer

	rawAdded  *addedMatcher // added tokens matched before normalization
	normAdded *addedMatcher // added tokens matched in normalized text

	added map[string]int // added token content -> id

	// Decoding table: the bytes id i decodes to are
	// arena[spans[i].off : spans[i].off+spans[i].n]; n < 0 marks unknown ids.
	arena []byte
	spans []span

	vocabSize int

	bufs sync.Pool // *encodeBufs
}

type span struct {
	off uint32
	n   int32
}

type encodeBufs struct {
	segs, normSegs []segment
	pieces         []string
}

// newTokenizer assembles a Tokenizer from a parsed model, normalizer and the
// file's added tokens.
func newTokenizer(m *bpe, norm normalizer, addedList []addedToken) (*Tokenizer, error) {
	t := &Tokenizer{model: m, norm: norm, added: make(map[string]int)}

	// Ids of added tokens are assigned as `tokenizers` does when it loads
	// the file (Tokenizer::add_tokens): an existing added token or model
	// token keeps its id, a new one gets the next free id. For a consistent
	// file this gives back the ids written in it.
	byID := make(map[int]*addedToken)
	var order []string // contents, first appearance first
	maxAdded := -1
	for i := range addedList {
		tok := addedList[i]
		if tok.Content == "" {
			continue
		}
		if id, ok := t.added[tok.Content]; ok && byID[id].sameAs(&tok) {
			continue
		}
		id, ok := t.added[tok.Content]
		if !ok {
			if vid, inVocab := m.vocab[tok.Content]; inVocab {
				id = int(vid)
			} else if maxAdded >= len(m.vocab) || len(m.vocab) == 0 {
				id = maxAdded + 1
			} else {
				id = len(m.vocab)
			}
			order = append(order, tok.Content)
		}
		if id > maxTokenID {
			return nil, fmt.Errorf("added token %q: id %d out of range", tok.Content, id)
		}
		tok.ID = id
		t.added[tok.Content] = id
		byID[id] = &tok
		maxAdded = max(maxAdded, id)
	}

	var rawPat, normPat []string
	var rawTok, normTok []*addedToken
	for _, content := range order {
		tok := byID[t.added[content]]
		if tok.Content != content {
			continue // its id was taken over by a later token
		}
		if tok.normalized() {
			normPat = append(normPat, norm.apply(content))
			normTok = append(normTok, tok)
		} else {
			rawPat = append(rawPat, content)
			rawTok = append(rawTok, tok)
		}
	}
	t.rawAdded = newAddedMatcher(rawPat, rawTok)
	t.normAdded = newAddedMatcher(normPat, normTok)

	// Decoding table.
	size := 0
	for _, id := range m.vocab {
		size = max(size, int(id)+1)
	}
	for id := range byID {
		size = max(size, id+1)
	}
	t.spans = make([]span, size)
	for i := range t.spans {
		t.spans[i].n = -1
	}
	setToken := func(id int, tok string) {
		off := len(t.arena)
		t.arena = appendTokenBytes(t.arena, tok)
		t.spans[id] = span{off: uint32(off), n: int32(len(t.arena) - off)}
	}
	for tok, id := range m.vocab {
		if _, isAdded := byID[int(id)]; !isAdded {
			setToken(int(id), tok)
		}
	}
	for id, tok := range byID {
		setToken(id, tok.Content)
	}
	for _, s := range t.spans {
		if s.n >= 0 {
			t.vocabSize++
		}
	}
	return t, nil
}

// Encode returns the token ids of text, as `tokenizers` encodes it without
// adding template tokens (Python: tok.encode(text,
// add_special_tokens=False).ids). Added tokens written in the text, such as
// "<|im_start|>", are recognised as whole tokens (leftmost, longest first);
// the text between them is normalized, pre-tokenized and BPE-encoded.
// Invalid UTF-8 in text is first replaced by U+FFFD.
func (t *Tokenizer) Encode(text string) []int {
	text = validUTF8(text)
	b, _ := t.bufs.Get().(*encodeBufs)
	if b == nil {
		b = new(encodeBufs)
	}
	ids := make([]int, 0, len(text)/3+1)
	b.segs = t.rawAdded.split(b.segs[:0], text)
	for _, seg := range b.segs {
		if seg.tok != nil {
			ids = append(ids, seg.tok.ID)
			continue
		}
		b.normSegs = t.normAdded.split(b.normSegs[:0], t.norm.apply(seg.text))
		for _, ns := range b.normSegs {
			if ns.tok != nil {
				ids = append(ids, ns.tok.ID)
				continue
			}
			b.pieces = appendQwen2Splits(b.pieces[:0], ns.text)
			for _, p := range b.pieces {
				ids = t.model.appendPiece(ids, p)
			}
		}
	}
	clear(b.segs)
	clear(b.normSegs)
	clear(b.pieces)
	t.bufs.Put(b)
	return ids
}

// Decode returns the text of ids. Byte-level tokens are mapped back to their
// bytes; added and special tokens are rendered as their content (nothing is
// skipped). Byte sequences that are not valid UTF-8, as a prefix of ids that
// cuts a character in two gives, become U+FFFD. An id that is neither in the
// vocabulary nor an added token is an error.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	buf := make([]byte, 0, 4*len(ids))
	for i, id := range ids {
		if id < 0 || id >= len(t.spans) || t.spans[id].n < 0 {
			return "", fmt.Errorf("tokenizer: decode: unknown token id %d at position %d", id, i)
		}
		s := t.spans[id]
		buf = append(buf, t.arena[s.off:s.off+uint32(s.n)]...)
	}
	return lossyUTF8(buf), nil
}

// TokenID returns the id of the token whose content (for an added token) or
// vocabulary string (byte-level form, e.g. "Ġthe" for " the") is content.
func (t *Tokenizer) TokenID(content string) (int, bool) {
	if id, ok := t.added[content]; ok {
		return id, true
	}
	if id, ok := t.model.vocab[content]; ok {
		return int(id), true
	}
	return 0, false
}

// VocabSize returns the number of distinct token ids: the BPE vocabulary
// plus the added tokens that are not part of it. For Qwen files the ids are
// exactly 0..VocabSize()-1; a model's embedding table may have more rows.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }
