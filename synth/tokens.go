package synth

import (
	"fmt"
	"slices"

	"vlanode/configs"
)

// qwenRegularTokens is the number of byte-level BPE tokens of Qwen2/Qwen3
// tokenizers (ids 0…151642); the added tokens follow.
const qwenRegularTokens = 151643

// addedToken is a token of tokenizer.json's added_tokens.
type addedToken struct {
	content    string
	special    bool
	normalized bool
}

// qwenAddedTokens are Qwen3's added tokens, ids 151643…151668, in order.
var qwenAddedTokens = []addedToken{
	{content: "<|endoftext|>", special: true},
	{content: "<|im_start|>", special: true},
	{content: "<|im_end|>", special: true},
	{content: "<|object_ref_start|>", special: true},
	{content: "<|object_ref_end|>", special: true},
	{content: "<|box_start|>", special: true},
	{content: "<|box_end|>", special: true},
	{content: "<|quad_start|>", special: true},
	{content: "<|quad_end|>", special: true},
	{content: "<|vision_start|>", special: true},
	{content: "<|vision_end|>", special: true},
	{content: "<|vision_pad|>", special: true},
	{content: "<|image_pad|>", special: true},
	{content: "<|video_pad|>", special: true},
	{content: "<tool_call>"},
	{content: "</tool_call>"},
	{content: "<|fim_prefix|>"},
	{content: "<|fim_middle|>"},
	{content: "<|fim_suffix|>"},
	{content: "<|fim_pad|>"},
	{content: "<|repo_name|>"},
	{content: "<|file_sep|>"},
	{content: "<tool_response>"},
	{content: "</tool_response>"},
	{content: "<think>"},
	{content: "</think>"},
}

// trajVocabSize is the number of discrete trajectory tokens <i0>… that
// Alpamayo adds (traj_vocab_size).
const trajVocabSize = 4000

// Vocab names a tokenizer vocabulary synth writes.
type Vocab int

// The vocabularies: Qwen3's, and Alpamayo's extended ones.
const (
	// VocabQwen is the base Qwen tokenizer (151,669 ids).
	VocabQwen Vocab = iota
	// VocabAlpamayoR1 adds the trajectory tokens and the special tokens
	// with NVlabs/alpamayo's names (155,697 ids).
	VocabAlpamayoR1
	// VocabAlpamayo15 is VocabAlpamayoR1 with NVlabs/alpamayo1.5's names:
	// the same ids, the unused tokens renamed <|_padding_N|>.
	VocabAlpamayo15
)

// alpamayoSpecialKeys is SPECIAL_TOKENS_KEYS of NVlabs/alpamayo
// (models/base_model.py) followed by the seven keys Alpamayo 1.5 added
// (route_*, question_*, answer_*, which the synthetic R1 vocabulary keeps
// too, at the same ids): with add_special_tokens each becomes "<|key|>"
// and is added in this order, except those the tokenizer already has
// (<|image_pad|>).
var alpamayoSpecialKeys = []string{
	"prompt_start", "prompt_end", "image_start", "image_pre_tkn", "image_end",
	"traj_history_start", "traj_history_pre_tkn", "traj_history_end",
	"cot_start", "cot_end", "meta_action_start", "meta_action_end",
	"traj_future_start", "traj_future_pre_tkn", "traj_future_end",
	"traj_history", "traj_future", "image_pad",
	"vectorized_wm", "vectorized_wm_start", "vectorized_wm_end", "vectorized_wm_pre_tkn",
	"route_start", "route_pad", "route_end",
	"question_start", "question_end", "answer_start", "answer_end",
}

// alpamayo15Renamed are the keys NVlabs/alpamayo1.5 (models/base_model.py)
// renamed, each to "_padding_N" in order: same positions, same ids.
var alpamayo15Renamed = []string{
	"image_pre_tkn", "traj_history_pre_tkn", "meta_action_start", "meta_action_end",
	"traj_future_pre_tkn", "vectorized_wm", "vectorized_wm_start", "vectorized_wm_end", "vectorized_wm_pre_tkn",
}

// specialKeys are the special-token keys of v, in order.
func specialKeys(v Vocab) []string {
	out := append([]string(nil), alpamayoSpecialKeys...)
	if v == VocabAlpamayo15 {
		for i, k := range alpamayo15Renamed {
			out[slices.Index(out, k)] = fmt.Sprintf("_padding_%d", i)
		}
	}
	return out
}

// trajToken is the content of discrete trajectory token i.
func trajToken(i int) string { return fmt.Sprintf("<i%d>", i) }

// addedTokens returns the added tokens of v, in id order from
// qwenRegularTokens: Qwen's, then for Alpamayo's <i0>…<i3999> (added as
// plain tokens, normalized, not special), then its special tokens not
// already present.
func addedTokens(v Vocab) []addedToken {
	out := append([]addedToken(nil), qwenAddedTokens...)
	if v == VocabQwen {
		return out
	}
	for i := 0; i < trajVocabSize; i++ {
		out = append(out, addedToken{content: trajToken(i), normalized: true})
	}
	have := map[string]bool{}
	for _, t := range out {
		have[t.content] = true
	}
	for _, k := range specialKeys(v) {
		c := "<|" + k + "|>"
		if !have[c] {
			out = append(out, addedToken{content: c, special: true})
			have[c] = true
		}
	}
	return out
}

// baseVocabSize is the length of the Qwen tokenizer (151669).
func baseVocabSize() int { return qwenRegularTokens + len(qwenAddedTokens) }

// alpamayoVocabSize is the length of the extended tokenizer (155697).
func alpamayoVocabSize() int { return qwenRegularTokens + len(addedTokens(VocabAlpamayoR1)) }

// tokenIDs are the ids an Alpamayo config records.
type tokenIDs struct {
	start int // <i0>
	traj  configs.TrajTokenIDs
}

// alpamayoTokenIDs computes the trajectory token ids from the token list.
func alpamayoTokenIDs() tokenIDs {
	id := map[string]int{}
	for i, t := range addedTokens(VocabAlpamayoR1) {
		id[t.content] = qwenRegularTokens + i
	}
	return tokenIDs{
		start: id[trajToken(0)],
		traj: configs.TrajTokenIDs{
			History:      id["<|traj_history|>"],
			Future:       id["<|traj_future|>"],
			HistoryStart: id["<|traj_history_start|>"],
			FutureStart:  id["<|traj_future_start|>"],
			HistoryEnd:   id["<|traj_history_end|>"],
			FutureEnd:    id["<|traj_future_end|>"],
		},
	}
}
