package tokenizer

import (
	"strings"
	"testing"
)

// benchCorpus is mixed prompt-like text: chat markup, English, code,
// numbers, accents, CJK and emoji.
var benchCorpus = strings.Repeat(`<|im_start|>system
You are a helpful robot assistant. You'll receive camera images and must answer briefly.<|im_end|>
<|im_start|>user
<|vision_start|><|image_pad|><|image_pad|><|vision_end|>Pick up the red cube and place it on the blue plate, then move 15 cm to the left.
The scene has 3 objects: a mug (0.25 kg), a spoon, and a bowl. Don't touch the bowl!
def plan(steps):
    for i, s in enumerate(steps):
        print(f"step {i}: {s}")
Grüße aus München — ça va? 你好，世界！ 日本語のテキスト 😀👍
<|im_end|>
<|im_start|>assistant
`, 8)

func benchTokenizer(b *testing.B) *Tokenizer {
	b.Helper()
	f := fixture{merges: trainMerges(benchCorpus, 800)}
	f.added = qwenAdded(len(f.vocab()))
	return f.load(b)
}

// BenchmarkEncode encodes ~3000 tokens of fresh text per iteration; the
// piece cache is reset so each iteration does the merging work.
func BenchmarkEncode(b *testing.B) {
	tok := benchTokenizer(b)
	n := len(tok.Encode(benchCorpus))
	b.SetBytes(int64(len(benchCorpus)))
	b.ReportMetric(float64(n), "tokens/op")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.model.cache.mu.Lock()
		tok.model.cache.m = nil
		tok.model.cache.mu.Unlock()
		tok.Encode(benchCorpus)
	}
}

// BenchmarkEncodeCached encodes the same text with a warm piece cache.
func BenchmarkEncodeCached(b *testing.B) {
	tok := benchTokenizer(b)
	tok.Encode(benchCorpus)
	b.SetBytes(int64(len(benchCorpus)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok.Encode(benchCorpus)
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := benchTokenizer(b)
	ids := tok.Encode(benchCorpus)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tok.Decode(ids); err != nil {
			b.Fatal(err)
		}
	}
}
