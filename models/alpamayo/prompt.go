package alpamayo

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"vlanode/configs"
	"vlanode/models"
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
	// Alpamayo 1.5's tokens (SPECIAL_TOKENS of NVlabs/alpamayo1.5): the
	// navigation text's and VQA's delimiters. 0 where the tokenizer lacks
	// them (Alpamayo-R1's release).
	RouteStart, RouteEnd       int
	QuestionStart, QuestionEnd int
	AnswerStart, AnswerEnd     int
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
	opt := func(dst *int, content string) {
		if id, ok := tok.TokenID(content); ok {
			*dst = id
		} else if cfg.Is15() {
			missing = append(missing, content)
		}
	}
	opt(&t.RouteStart, "<|route_start|>")
	opt(&t.RouteEnd, "<|route_end|>")
	opt(&t.QuestionStart, "<|question_start|>")
	opt(&t.QuestionEnd, "<|question_end|>")
	opt(&t.AnswerStart, "<|answer_start|>")
	opt(&t.AnswerEnd, "<|answer_end|>")
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

// promptSpec is what a prompt holds besides the chat template.
type promptSpec struct {
	// perImage is the number of image tokens of each image, camera-major.
	perImage []int
	// cameras are the cameras' indices in the images' order, one per
	// camera (each has len(perImage)/len(cameras) images); nil writes no
	// camera names.
	cameras []int
	// history are the ids replacing the <|traj_history|> placeholders
	// (nil in VQA).
	history []int32
	// nav is the navigation text between <|route_start|> and
	// <|route_end|>; hasNav says whether the route section is written.
	nav    string
	hasNav bool
	// question, when set, makes the prompt Alpamayo 1.5's VQA prompt.
	question string
}

// buildPrompt returns the prompt's token ids: the chat template of
// NVlabs/alpamayo's create_message (Alpamayo 1.5's create_message and
// create_vqa_message, helper.py), rendered as Qwen3-VL's chat template
// renders it with the assistant turn left open, each image one vision
// block of its image tokens, and the history placeholders replaced by
// the history token ids.
func (m *Model) buildPrompt(p promptSpec) ([]int32, error) {
	var b strings.Builder
	b.WriteString("<|im_start|>system\n" + systemPrompt + "<|im_end|>\n<|im_start|>user\n")
	perCamera := 0
	if len(p.cameras) > 0 {
		if len(p.perImage)%len(p.cameras) != 0 {
			return nil, fmt.Errorf("alpamayo: %w: %d images for %d cameras", models.ErrBadInput, len(p.perImage), len(p.cameras))
		}
		perCamera = len(p.perImage) / len(p.cameras)
	}
	for i, n := range p.perImage {
		if perCamera > 0 {
			// _build_image_content: the camera's display name before its
			// first image, "frame k " before each
			k := i % perCamera
			if k == 0 {
				b.WriteString(displayName(p.cameras[i/perCamera]) + ": ")
			}
			fmt.Fprintf(&b, "frame %d ", k)
		}
		b.WriteString("<|vision_start|>")
		b.WriteString(strings.Repeat("<|image_pad|>", n))
		b.WriteString("<|vision_end|>")
	}
	if p.question != "" {
		b.WriteString("<|question_start|>" + p.question + "<|question_end|><|im_end|>\n<|im_start|>assistant\n<|answer_start|>")
	} else {
		b.WriteString("<|traj_history_start|>")
		b.WriteString(strings.Repeat("<|traj_history|>", len(p.history)))
		b.WriteString("<|traj_history_end|>")
		if p.hasNav {
			b.WriteString("<|route_start|>" + p.nav + "<|route_end|>")
		}
		b.WriteString(userRequest + "<|im_end|>\n<|im_start|>assistant\n<|cot_start|>")
	}
	raw := m.Tok.Encode(b.String())
	ids := make([]int32, len(raw))
	h := 0
	for i, id := range raw {
		if id == m.Tokens.History {
			if h >= len(p.history) {
				return nil, fmt.Errorf("alpamayo: the prompt has more history placeholders than the %d history tokens", len(p.history))
			}
			id = int(p.history[h])
			h++
		}
		ids[i] = int32(id)
	}
	if h != len(p.history) {
		return nil, fmt.Errorf("alpamayo: the prompt has %d history placeholders, want %d", h, len(p.history))
	}
	return ids, nil
}

// withoutRoute is the prompt with its route section, <|route_start|>
// through <|route_end|>, removed: the unguided prompt of classifier-free
// guidance (remove_nav_text in NVlabs/alpamayo1.5 nav_utils.py).
func (m *Model) withoutRoute(ids []int32) ([]int32, error) {
	start := slices.Index(ids, int32(m.Tokens.RouteStart))
	end := slices.Index(ids, int32(m.Tokens.RouteEnd))
	if start < 0 || end < start {
		return nil, errors.New("alpamayo: the prompt has no route section to remove")
	}
	return append(slices.Clip(ids[:start]), ids[end+1:]...), nil
}

func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("alpamayo: %w", err)
	}
	return b, nil
}
