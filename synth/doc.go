// Package synth writes synthetic checkpoints: random bf16 weights in the
// exact Hugging Face layout of a real model, with matching config.json
// files and a tokenizer.json, so that every loader, planner and benchmark
// can run at full scale without the real weights (which cannot be
// downloaded here).
//
// Seven architectures are known (see Archs):
//
//   - alpamayo-r1-10b: Alpamayo-R1-10B, shapes of the release (ALPAMAYO.md
//     §1): vlm.* is Qwen3-VL-8B with the 155,697-token vocabulary and an
//     untied LM head, expert.* the 36-layer action expert, action_in_proj,
//     action_out_proj and the action_space buffers.
//   - alpamayo-r1-tiny: the same architecture with tiny dimensions (and the
//     same tokenizer and head settings), which runs in seconds on a CPU.
//   - alpamayo-1.5-10b and alpamayo-1.5-tiny: Alpamayo 1.5 at those shapes:
//     model_type alpamayo1_5, the alpamayo1_5.* _target_ names, the
//     tokenizer's 1.5 token names (<|_padding_N|>), and no action_space or
//     Fourier buffers (1.5 computes them from the config).
//   - qwen3-vl-8b: plain Qwen3VLForConditionalGeneration (model.visual.*,
//     model.language_model.*, lm_head).
//   - qwen3-8b: Qwen/Qwen3-8B, a text model (Qwen3ForCausalLM:
//     model.embed_tokens, model.layers.*, model.norm, an untied lm_head),
//     which `vlanode generate` runs; qwen3-tiny the same layout with
//     tiny dimensions (88 MB), for tests.
//
// The output depends only on the architecture and the seed. Every tensor
// has its own counter-based random stream (SplitMix64 keyed by the seed and
// the tensor's name), so tensors are generated in parallel chunks and are
// still identical. Each 64-bit draw gives four bf16 values through a
// 65,536-entry inverse-CDF table: matrices are N(0, 1/fan_in), embeddings
// N(0, 1), norm weights N(1, 0.05²), biases N(0, 0.02²). Fixed buffers (the
// Fourier frequencies, the action normalisation) hold their real values.
//
// Weights are streamed to disk one tensor at a time through
// safetensors.Create, in shards of at most 5 GB with
// model.safetensors.index.json when they do not fit in one, so memory stays
// near the size of the largest tensor.
package synth
