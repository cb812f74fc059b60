// Package residency is vlanode's planner: given a model's units, a
// workload, a device profile and a VRAM budget, it decides which units stay
// resident in VRAM and which are streamed through the two DFB slots, says
// where every byte of the budget goes, and predicts the latency of each
// stage. It is pure functions over plain data: no GPU, no cgo, no files.
//
// The model (docs/planning.md has the formulas and the numbers):
//
//   - Units (units.go, arch.go): one flat weight blob each — a vision
//     block, a merger, a text layer, an expert layer, a block of LM head
//     rows, an action projection — with its exact size (weights.Layout, 256-
//     byte aligned tensors) and, per stage it runs in, its passes R and
//     its compute time per pass from the Profile.
//   - Fixed costs first (memory.go): KV cache, activations, workspaces, the
//     CUDA context, and the DFB slots (2 × the largest streamed unit). A
//     budget below the minimum is refused with the minimum.
//   - Residency (benefit.go, place.go): the benefit B = R·ΔC/M of paper 1
//     (§IV-D, Tables IV–VI) for every unit, filled greedily by benefit per
//     byte across modules; inside a module the residents are placed
//     interleaved (Eq. 8) and the consecutive-residency limit ⌊C_DMA/C_EXE⌋
//     lowers the benefit of residents that would have to sit in longer runs.
//   - Prediction (simulate.go): each stage is simulated as the executor runs
//     it — a copy stream and a compute stream, two slots, passes that
//     prefetch across their boundaries — which reduces to Eq. (1), (2) and
//     (5)–(7) in the cases the paper treats.
package residency
