// Package tokenizer implements Qwen's byte-level BPE tokenizer, loaded from a
// Hugging Face tokenizer.json file (the format written by the Rust
// `tokenizers` library).
//
// The pipeline reproduces what `tokenizers` does for Qwen2, Qwen2.5, Qwen2-VL
// and Qwen3 checkpoints, step by step:
//
//  1. Added tokens (`<|im_start|>`, `<|image_pad|>`, ...) whose "normalized"
//     flag is false are found in the raw text, leftmost-longest, and become
//     whole tokens.
//  2. The text between them is normalized (NFC for Qwen); added tokens whose
//     "normalized" flag is true are then found in the normalized pieces.
//  3. Each remaining piece is split by the Qwen2 pre-tokenizer regex, with a
//     hand-written scanner because Go's regexp cannot express its
//     `\s+(?!\S)` look-ahead.
//  4. Every split is mapped to GPT-2's byte-level alphabet and merged with the
//     BPE merge ranks, exactly as `tokenizers` orders its merges.
//
// Decoding maps ids back to token strings and undoes the byte-level mapping.
// Encode never adds template tokens (the post-processor is ignored): chat
// markup such as "<|im_start|>" is written into the text by the caller.
//
// Only the configuration Qwen uses is accepted; anything else (another model
// type, another pre-tokenizer regex, BPE dropout, ...) is refused by [Load]
// with an error naming the unsupported setting, rather than tokenizing
// differently from the reference implementation.
//
// TestAgainstReference compares the package with the Hugging Face library on
// data that scripts/tokenizer/tokenizer_reference.py generates into
// testdata/tokenizer.
package tokenizer
