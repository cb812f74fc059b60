package tokenizer

import (
	"encoding/json"
	"fmt"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization; nil means none.
type normalizer []norm.Form

func (n normalizer) apply(s string) string {
	for _, f := range n {
		s = f.String(s)
	}
	return s
}

// normalizerJSON is the subset of a tokenizer.json "normalizer" object that
// is understood.
type normalizerJSON struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
}

// parseNormalizer accepts null, the Unicode normalization forms and a
// Sequence of them.
func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var nj normalizerJSON
	if err := json.Unmarshal(raw, &nj); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch nj.Type {
	case "NFC":
		return normalizer{norm.NFC}, nil
	case "NFD":
		return normalizer{norm.NFD}, nil
	case "NFKC":
		return normalizer{norm.NFKC}, nil
	case "NFKD":
		return normalizer{norm.NFKD}, nil
	case "Sequence":
		var out normalizer
		for _, sub := range nj.Normalizers {
			n, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, n...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported normalizer %q (supported: null, NFC, NFD, NFKC, NFKD, Sequence of these)", nj.Type)
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}
