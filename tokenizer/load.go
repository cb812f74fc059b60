package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
)

// fileJSON is the top level of a tokenizer.json file. Truncation, padding
// and the post-processor are not used: Encode never adds template tokens.
type fileJSON struct {
	Version      *string         `json:"version"`
	AddedTokens  []addedToken    `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        json.RawMessage `json:"model"`
	Decoder      json.RawMessage `json:"decoder"`
}

// modelJSON is tokenizer.json's "model" object for a BPE model.
type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// maxTokenID bounds the ids accepted in a file (Qwen's largest is ~152k).
const maxTokenID = 1<<24 - 1

// Load reads a Hugging Face tokenizer.json file and returns a Tokenizer for
// it. It fails if the file is missing or is not valid JSON, and if the file
// describes anything other than a byte-level BPE set up as Qwen's (model
// type, normalizer, pre-tokenizer, decoder or BPE options): the error names
// the unsupported setting.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// parse builds a Tokenizer from the contents of a tokenizer.json file.
func parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("invalid tokenizer.json: %w", err)
	}
	if f.Version != nil && *f.Version != "1.0" {
		return nil, fmt.Errorf("unknown tokenizer.json version %q (want \"1.0\")", *f.Version)
	}
	model, err := parseModel(f.Model)
	if err != nil {
		return nil, err
	}
	norm, err := parseNormalizer(f.Normalizer)
	if err != nil {
		return nil, err
	}
	if err := checkPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, err
	}
	return newTokenizer(model, norm, f.AddedTokens)
}

// parseModel builds the BPE model, refusing options that would make it
// tokenize differently from Qwen's.
func parseModel(raw json.RawMessage) (*bpe, error) {
	if isNull(raw) {
		return nil, errors.New(`missing "model"`)
	}
	var mj modelJSON
	if err := json.Unmarshal(raw, &mj); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	// `tokenizers` infers the type of an untagged model from its fields.
	if mj.Type != "BPE" && !(mj.Type == "" && len(mj.Merges) > 0) {
		return nil, fmt.Errorf("unsupported model type %q (only BPE is implemented)", mj.Type)
	}
	if mj.Dropout != nil && *mj.Dropout != 0 {
		return nil, fmt.Errorf("unsupported BPE option dropout=%v (encoding would be random)", *mj.Dropout)
	}
	if p := mj.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, fmt.Errorf("unsupported BPE option continuing_subword_prefix=%q", *p)
	}
	if s := mj.EndOfWordSuffix; s != nil && *s != "" {
		return nil, fmt.Errorf("unsupported BPE option end_of_word_suffix=%q", *s)
	}
	if mj.Vocab == nil {
		return nil, errors.New(`model: missing "vocab"`)
	}

	m := &bpe{
		vocab:        mj.Vocab,
		unk:          -1,
		fuseUnk:      mj.FuseUnk,
		ignoreMerges: mj.IgnoreMerges,
	}
	maxID := int32(-1)
	for tok, id := range m.vocab {
		if id < 0 || id > maxTokenID {
			return nil, fmt.Errorf("model: token %q has id %d, outside [0, %d]", tok, id, maxTokenID)
		}
		maxID = max(maxID, id)
	}
	owner := make([]int32, maxID+1) // 1 + index into names, 0 if unused
	names := make([]string, 0, len(m.vocab))
	for tok, id := range m.vocab {
		if o := owner[id]; o != 0 {
			return nil, fmt.Errorf("model: tokens %q and %q share id %d", names[o-1], tok, id)
		}
		names = append(names, tok)
		owner[id] = int32(len(names))
	}
	if mj.UnkToken != nil {
		// `tokenizers` only fails when an unknown byte is met; with a full
		// byte-level alphabet that never happens, so a dangling unk_token is
		// tolerated and unknown bytes are dropped.
		if id, ok := m.vocab[*mj.UnkToken]; ok {
			m.unk = id
		}
	}
	for b := 0; b < 256; b++ {
		s := string(byteToRune[b])
		if id, ok := m.vocab[s]; ok {
			m.initial[b] = byteSymbols{ids: []int32{id}, found: true, direct: true}
			continue
		}
		if mj.ByteFallback {
			ids, ok := fallbackIDs(m.vocab, s)
			m.initial[b] = byteSymbols{ids: ids, found: ok}
		}
	}

	pairs, err := parseMerges(mj.Merges)
	if err != nil {
		return nil, err
	}
	m.merges = make(map[uint64]merge, len(pairs))
	for rank, p := range pairs {
		a, okA := m.vocab[p[0]]
		b, okB := m.vocab[p[1]]
		c, okC := m.vocab[p[0]+p[1]]
		switch {
		case !okA:
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, p[0], p[1], p[0])
		case !okB:
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, p[0], p[1], p[1])
		case !okC:
			return nil, fmt.Errorf("merge %d (%q %q): %q is not in the vocabulary", rank, p[0], p[1], p[0]+p[1])
		}
		// A repeated pair keeps its last rank, as in `tokenizers`.
		m.merges[pairKey(a, b)] = merge{rank: int32(rank), id: c}
	}
	return m, nil
}

// fallbackIDs returns the ids of the <0xXX> tokens for the UTF-8 bytes of s.
func fallbackIDs(vocab map[string]int32, s string) ([]int32, bool) {
	var ids []int32
	for i := 0; i < len(s); i++ {
		id, ok := vocab[fmt.Sprintf("<0x%02X>", s[i])]
		if !ok {
			return nil, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

// parseMerges accepts both encodings of "merges": ["a b", ...] (where lines
// starting with "#version" are skipped) and [["a", "b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, errors.New(`model: missing "merges"`)
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err == nil {
		pairs := make([][2]string, 0, len(lines))
		for _, l := range lines {
			if strings.HasPrefix(l, "#version") {
				continue
			}
			parts := strings.Split(l, " ")
			if len(parts) != 2 {
				return nil, fmt.Errorf("merge %d: %q is not two tokens separated by one space", len(pairs), l)
			}
			pairs = append(pairs, [2]string{parts[0], parts[1]})
		}
		return pairs, nil
	}
	var tuples [][]string
	if err := json.Unmarshal(raw, &tuples); err != nil {
		return nil, fmt.Errorf(`model: "merges" is neither a list of "a b" strings nor a list of [a, b] pairs: %w`, err)
	}
	pairs := make([][2]string, len(tuples))
	for i, t := range tuples {
		if len(t) != 2 {
			return nil, fmt.Errorf("merge %d: %q is not a pair", i, t)
		}
		pairs[i] = [2]string{t[0], t[1]}
	}
	return pairs, nil
}

// pieceJSON is a pre-tokenizer or decoder object of tokenizer.json.
type pieceJSON struct {
	Type           string            `json:"type"`
	PreTokenizers  []json.RawMessage `json:"pretokenizers"`
	Pattern        map[string]string `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
}

// errPreTokenizer explains what is supported.
var errPreTokenizer = errors.New(`supported: a Sequence of Split(Regex=<the Qwen2 pattern>, behavior="Isolated", invert=false) and ByteLevel(add_prefix_space=false, use_regex=false)`)

// checkPreTokenizer accepts exactly the pre-tokenizer of Qwen2/Qwen3.
func checkPreTokenizer(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("unsupported pre_tokenizer null; %w", errPreTokenizer)
	}
	var seq pieceJSON
	if err := json.Unmarshal(raw, &seq); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	if seq.Type != "Sequence" || len(seq.PreTokenizers) != 2 {
		return fmt.Errorf("unsupported pre_tokenizer %s; %w", describe(seq), errPreTokenizer)
	}
	var split, bl pieceJSON
	if err := json.Unmarshal(seq.PreTokenizers[0], &split); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := json.Unmarshal(seq.PreTokenizers[1], &bl); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	if split.Type != "Split" {
		return fmt.Errorf("unsupported pre_tokenizer: first step is %s; %w", describe(split), errPreTokenizer)
	}
	re, isRegex := split.Pattern["Regex"]
	if !isRegex || canonicalPattern(re) != qwen2Pattern {
		return fmt.Errorf("unsupported pre_tokenizer: Split pattern %v is not the Qwen2 regex %q; %w", split.Pattern, qwen2Pattern, errPreTokenizer)
	}
	if split.Behavior != "Isolated" || split.Invert {
		return fmt.Errorf("unsupported pre_tokenizer: Split behavior=%q invert=%v; %w", split.Behavior, split.Invert, errPreTokenizer)
	}
	if bl.Type != "ByteLevel" {
		return fmt.Errorf("unsupported pre_tokenizer: second step is %s; %w", describe(bl), errPreTokenizer)
	}
	useRegex := bl.UseRegex == nil || *bl.UseRegex // `tokenizers` defaults it to true
	if bl.AddPrefixSpace || useRegex {
		return fmt.Errorf("unsupported pre_tokenizer: ByteLevel add_prefix_space=%v use_regex=%v; %w", bl.AddPrefixSpace, useRegex, errPreTokenizer)
	}
	return nil
}

// canonicalPattern writes raw CR and LF characters of a regex as the
// escapes \r and \n, which match the same text.
func canonicalPattern(re string) string {
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(re)
}

// checkDecoder accepts the ByteLevel decoder.
func checkDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("unsupported decoder null (supported: ByteLevel)")
	}
	var d pieceJSON
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	if d.Type != "ByteLevel" {
		return fmt.Errorf("unsupported decoder %s (supported: ByteLevel)", describe(d))
	}
	return nil
}

func describe(p pieceJSON) string {
	if p.Type == "" {
		return "without a type"
	}
	return fmt.Sprintf("%q", p.Type)
}
