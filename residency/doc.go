// Package residency is vlanode's planner: given a model's units (as its
// family publishes them: placement.Unit), a workload, a device profile and
// a VRAM budget, it decides for every unit and every stage where its
// weights live (resident, homed in some stages, streamed through the two
// DFB slots, or on the host) and which engine computes it (the GPU, the
// CPU, or both, each a share), says where every byte of each stage's
// budget goes, and predicts the latency of each stage and of each engine
// in it. It is pure functions over plain data: no GPU, no cgo, no files.
//
// The model (docs/planning.md has the formulas and the numbers):
//
//   - Fixed costs first (memory.go): KV cache, activations per stage,
//     workspaces, the CUDA context, and the DFB slots (2 × the largest
//     streamed unit), in the allocator's 2 MiB pages. A budget below the
//     minimum is refused with the minimum.
//   - Residency (benefit.go, place.go, planner.go): the benefit B = R·ΔC/M
//     of paper 1 (§IV-D, Tables IV–VI) for every unit, filled greedily by
//     benefit per byte into each stage's room as homes per stage, upgraded
//     to resident where every stage has room; inside a module the
//     residents are placed interleaved (Eq. 8) under the
//     consecutive-residency limit ⌊C_DMA/C_EXE⌋.
//   - Three plans per token tier (planner.go, paper 2): GPU-only, Static
//     (the CPU computes every streamed splittable unit) and Dynamic (the CPU
//     computes a share of each, balanced against the copy stream), the
//     cheapest by simulation; Options.Exact forbids CPU shards.
//   - Prediction (simulate.go): each stage is simulated as the executor
//     runs it — a copy stream, a GPU compute stream and the CPU engine, two
//     slots, hand-offs, passes that prefetch across their boundaries — which
//     reduces to Eq. (1), (2) and (5)–(7) in the cases paper 1 treats.
//   - Compressed streaming (compress.go, Options.Compress): each unit's
//     bf16z size (estimated, or exact after encoding) and decode time
//     (Profile.Decode), a decode engine and staging buffers in the
//     simulation and the budget; the compressed plan is kept where it
//     predicts less than the raw one (docs/compression.md).
package residency
