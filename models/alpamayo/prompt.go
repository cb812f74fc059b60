package alpamayo

import (
	"fmt"
	"os"
	"strings"

	"vlanode/configs"
	"vlanode/tokenizer"
)

// Tokens are the ids of the special tokens the prompt and the decoding
// loop use, looked up in the checkpoint's tokenizer.
type Tokens struct {
	ImageStart, ImageEnd, ImagePad int
	HistoryStart, HistoryEnd       int
	History                        int // the <|traj_history|> placeholder
	CoTStart, CoTEnd               int
	FutureStart                    int // <|traj_future_start|>: reasoning ends
	EOS                            int // <|im_end|>
	// TrajFirst, TrajLast bound the trajectory tokens <i0>…, which are
	// masked out of the reasoning logits.
	TrajFirst, TrajLast int
}

// The prompt of NVlabs/alpamayo's chat template (helper.py), around the
// images and the trajectory history.
const (
	systemPrompt = "You are a driving assistant that generates safe and accurate actions."
	userRequest  = "output the chain-of-thought reasoning of the driving process, then output the future trajectory."
)

func lookupTokens(tok *tokenizer.Tokenizer, cfg *configs.AlpamayoR1) (Tokens, error) {
	var t Tokens
	var missing []string
	get := func(dst *int, content string) {
		id, ok := tok.TokenID(content)
		if !ok {
			missing = append(missing, content)
		}
		*dst = id
	}
	get(&t.ImageStart, "<|vision_start|>")
	get(&t.ImageEnd, "<|vision_end|>")
	get(&t.ImagePad, "<|image_pad|>")
	get(&t.HistoryStart, "<|traj_history_start|>")
	get(&t.HistoryEnd, "<|traj_history_end|>")
	get(&t.History, "<|traj_history|>")
	get(&t.CoTStart, "<|cot_start|>")
	get(&t.CoTEnd, "<|cot_end|>")
	get(&t.FutureStart, "<|traj_future_start|>")
	get(&t.EOS, "<|im_end|>")
	if len(missing) > 0 {
		return t, fmt.Errorf("alpamayo: tokenizer.json lacks the special tokens %v", missing)
	}
	t.TrajFirst = cfg.TrajTokenStartIdx
	t.TrajLast = cfg.TrajTokenStartIdx + cfg.TrajVocabSize - 1
	if want := cfg.TrajTokenIDs.FutureStart; want != 0 && want != t.FutureStart {
		return t, fmt.Errorf("alpamayo: config.json says <|traj_future_start|> is %d, tokenizer.json %d", want, t.FutureStart)
	}
	if want := cfg.TrajTokenIDs.History; want != 0 && want != t.History {
		return t, fmt.Errorf("alpamayo: config.json says <|traj_history|> is %d, tokenizer.json %d", want, t.History)
	}
	return t, nil
}

// buildPrompt returns the prompt's token ids: the chat template with one
// vision block of tokensPerImage[i] image tokens per image, and the history
// placeholders replaced by the history token ids.
func (m *Model) buildPrompt(tokensPerImage []int, history []int32) ([]int32, error) {
	var b strings.Builder
	b.WriteString("<|im_start|>system\n" + systemPrompt + "<|im_end|>\n<|im_start|>user\n")
	for _, n := range tokensPerImage {
		b.WriteString("<|vision_start|>")
		b.WriteString(strings.Repeat("<|image_pad|>", n))
		b.WriteString("<|vision_end|>")
	}
	b.WriteString("<|traj_history_start|>")
	b.WriteString(strings.Repeat("<|traj_history|>", len(history)))
	b.WriteString("<|traj_history_end|>" + userRequest + "<|im_end|>\n<|im_start|>assistant\n<|cot_start|>")
	raw := m.Tok.Encode(b.String())
	ids := make([]int32, len(raw))
	h := 0
	for i, id := range raw {
		if id == m.Tokens.History {
			if h >= len(history) {
				return nil, fmt.Errorf("alpamayo: the prompt has more history placeholders than the %d history tokens", len(history))
			}
			id = int(history[h])
			h++
		}
		ids[i] = int32(id)
	}
	if h != len(history) {
		return nil, fmt.Errorf("alpamayo: the prompt has %d history placeholders, want %d", h, len(history))
	}
	return ids, nil
}

func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	return b, nil
}
