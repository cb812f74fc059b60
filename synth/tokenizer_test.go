package synth

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tokenizer"
)

// loadTokenizer writes TokenizerJSON(alpamayo) and loads it with the
// tokenizer package.
func loadTokenizer(t *testing.T, alpamayo bool) *tokenizer.Tokenizer {
	t.Helper()
	doc, err := TokenizerJSON(alpamayo)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	require.NoError(t, os.WriteFile(path, doc, 0o644))
	tok, err := tokenizer.Load(path)
	require.NoError(t, err)
	return tok
}

// alpamayoPrompt is the Alpamayo prompt of ALPAMAYO.md §5 with n visual
// tokens per image and h history tokens.
func alpamayoPrompt(n, h int) string {
	var sb strings.Builder
	sb.WriteString("<|im_start|>system\nYou are a driving assistant that generates safe and accurate actions.<|im_end|>\n<|im_start|>user\n")
	for i := 0; i < 16; i++ {
		sb.WriteString("<|vision_start|>" + strings.Repeat("<|image_pad|>", n) + "<|vision_end|>")
	}
	sb.WriteString("<|traj_history_start|>" + strings.Repeat("<|traj_history|>", h) + "<|traj_history_end|>")
	sb.WriteString("output the chain-of-thought reasoning of the driving process, then output the future trajectory.<|im_end|>\n")
	sb.WriteString("<|im_start|>assistant\n<|cot_start|>")
	return sb.String()
}

func TestAlpamayoTokenizer(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, true)
	assert.Equal(t, 155697, tok.VocabSize())
	for content, want := range map[string]int{
		// Qwen (ALPAMAYO.md §1).
		"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
		"<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|image_pad|>": 151655,
		"<|video_pad|>": 151656, "</think>": 151668,
		// Trajectory tokens.
		"<i0>": 151669, "<i3999>": 155668,
		// Alpamayo's special tokens.
		"<|prompt_start|>": 155669, "<|traj_history_start|>": 155674, "<|traj_history_end|>": 155676,
		"<|cot_start|>": 155677, "<|cot_end|>": 155678, "<|traj_future_start|>": 155681,
		"<|traj_future_end|>": 155683, "<|traj_history|>": 155684, "<|traj_future|>": 155685,
		"<|answer_end|>": 155696,
	} {
		id, ok := tok.TokenID(content)
		if assert.True(t, ok, content) {
			assert.Equal(t, want, id, content)
		}
	}

	// The ids the Alpamayo config records come from the same lists.
	ids := alpamayoTokenIDs()
	assert.Equal(t, 151669, ids.start)
	assert.Equal(t, 155681, ids.traj.FutureStart)
	assert.Equal(t, 155697, alpamayoVocabSize())

	prompt := alpamayoPrompt(180, 48)
	got := tok.Encode(prompt)
	text, err := tok.Decode(got)
	require.NoError(t, err)
	assert.Equal(t, prompt, text)
	count := map[int]int{}
	for _, id := range got {
		count[id]++
	}
	assert.Equal(t, 16*180, count[151655])
	assert.Equal(t, 48, count[155684])
	assert.Less(t, len(got), 3100, "≈3,030 tokens in the standard workload")
	assert.Equal(t, 155677, got[len(got)-1])

	// Trajectory tokens written as text are single tokens; ordinary text
	// round-trips, including bytes outside ASCII.
	assert.Equal(t, []int{151669 + 12, 151669 + 3999}, tok.Encode("<i12><i3999>"))
	for _, s := range []string{"The car ahead slows down; keep 2.5 m/s.", "Straße — 東京 🚗\r\n\t  x", ""} {
		text, err := tok.Decode(tok.Encode(s))
		require.NoError(t, err)
		assert.Equal(t, s, text)
	}
	// The corpus merges make domain text compact.
	assert.LessOrEqual(t, len(tok.Encode(" pedestrian")), 2)
}

func TestQwenTokenizer(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, false)
	assert.Equal(t, 151669, tok.VocabSize())
	_, ok := tok.TokenID("<i0>")
	assert.False(t, ok)
	id, ok := tok.TokenID("<|image_pad|>")
	assert.True(t, ok)
	assert.Equal(t, 151655, id)
}

func TestVocabIsValidBPE(t *testing.T) {
	t.Parallel()
	v := buildVocab()
	require.Len(t, v.tokens, qwenRegularTokens)
	assert.Len(t, v.merges, qwenRegularTokens-256)
	have := map[string]bool{}
	for _, tok := range v.tokens {
		require.False(t, have[tok], "duplicate token %q", tok)
		have[tok] = true
	}
	for i, m := range v.merges {
		require.True(t, have[m[0]] && have[m[1]] && have[m[0]+m[1]], "merge %d %q", i, m)
	}
	// Deterministic: a second build gives the same document.
	a, err := tokenizerJSON(VocabAlpamayoR1)
	require.NoError(t, err)
	b, err := TokenizerJSON(true)
	require.NoError(t, err)
	assert.Equal(t, a, b)
}

// TestAlpamayo15Vocab checks Alpamayo 1.5's names against R1's: the tokens
// NVlabs/alpamayo1.5 renamed are <|_padding_N|> at the same ids, and every
// other id and name is the same.
func TestAlpamayo15Vocab(t *testing.T) {
	r1, v15 := addedTokens(VocabAlpamayoR1), addedTokens(VocabAlpamayo15)
	require.Len(t, v15, len(r1))
	renamed := 0
	for i := range r1 {
		if r1[i].content == v15[i].content {
			continue
		}
		assert.Equal(t, "<|"+alpamayo15Renamed[renamed]+"|>", r1[i].content)
		assert.Equal(t, "<|_padding_"+strconv.Itoa(renamed)+"|>", v15[i].content)
		renamed++
	}
	assert.Equal(t, len(alpamayo15Renamed), renamed)
	doc, err := TokenizerJSONOf(VocabAlpamayo15)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	require.NoError(t, os.WriteFile(path, doc, 0o644))
	tok, err := tokenizer.Load(path)
	require.NoError(t, err)
	for content, id := range map[string]int{"<|route_start|>": 155690, "<|answer_end|>": 155696, "<|_padding_2|>": 155679, "<|traj_future_start|>": 155681} {
		got, ok := tok.TokenID(content)
		assert.True(t, ok, content)
		assert.Equal(t, id, got, content)
	}
}
