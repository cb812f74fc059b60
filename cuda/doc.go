// Package cuda is the NVIDIA GPU implementation of backend.Backend.
//
// Nothing of CUDA is needed to build it: package cuda/driver opens the
// driver (libcuda.so.1), cuBLAS (libcublas.so.13), cuBLASLt
// (libcublasLt.so.13, optional) and NVRTC (libnvrtc.so.13) with dlopen at
// run time, and New or Available says in one line what is missing on a
// machine without them.
//
// # Threads
//
// A CUDA context is current per OS thread. Every public method runs one
// closure with all of its CUDA calls, one method at a time (a mutex), on
// the calling goroutine with its OS thread locked and the device's primary
// context made current there first (cuCtxSetCurrent costs far less than
// handing the call to a dedicated thread). Methods wait for the closure,
// not for the GPU: ops are queued in order on one stream; Sync and
// Download wait for the GPU.
//
// # Graphs
//
// Capture records a sequence of ops into a CUDA graph and Graph.Launch
// replays it with one launch call: a decode step of a few hundred kernels
// then costs the GPU's time, not the host's launch time. See Capture for
// what a capture refuses. CaptureGraph serves model code (backend.Capturer);
// UploadI32, CopyRowsAt and AttentionAt (backend.DevicePos) read a decode
// step's position from device memory, so that one graph serves every step
// with the bits of the op-by-op path.
//
// # Host exchange
//
// NewExchange (backend.HostExchange) hands activations to a CPU engine
// and takes its results back in stream order: Send queues a copy into
// page-locked memory and a blocking-sync event, which a waiter goroutine
// of the exchange, on an OS thread of its own with the context current,
// waits for (the engine's Wait sleeps, and never takes the backend's
// lock); Receive queues cuStreamWaitValue32_v2 on a word of device-mapped
// page-locked memory that Post stores to, then the copy back, so that
// neither the queueing goroutine nor the GPU's host side waits. New probes
// whether the device can (DeviceInfo.HostExchange); where it cannot,
// Receive waits for the Post on the host. DFBDevice.CopyRectAsync streams
// a rectangle of a pinned blob (cuMemcpy2DAsync), e.g. the GPU's columns
// of a down projection split between the GPU and the CPU.
//
// # Overlapped launches
//
// On sm_90 and later every kernel is launched with programmatic dependent
// launch (cuLaunchKernelEx): its blocks may be placed while the kernel
// ahead of it finishes, and wait for it in griddepcontrol.wait before they
// touch memory (kernels/common.cuh, vla_pdl_enter). The GEMV kernels load
// their first weights before that wait when the weights come from Weight,
// so a decode step's one-block norms overlap the next product's reads.
// Results are the same bits; WithSerialLaunches and SetSerialLaunches turn
// it off.
//
// # Tracing
//
// StartTrace and StopTrace time every kernel, GEMM, copy and upload queued
// in between with a pair of events, summed by kernel and grid or GEMM
// shape (WriteOpTimes): a developer's view of where the GPU time goes.
//
// # Memory
//
// Every device byte is counted by one allocator against the budget
// (WithBudget; 0 means the device's memory), per purpose: the caller's
// ("weights", "kv-cache", "activations", ...) and the backend's own
// ("cuda-context", measured at start; "cublas", the handle measured with
// cuMemGetInfo plus a margin for the kernels cuBLAS loads lazily;
// "cublas-workspace"; "kernels", the CUBIN plus a margin; "scratch").
// Blocks are counted as the device gives them up (256-byte granules, 2 MiB
// pages from 1 MiB on). An allocation over the budget fails with a
// *BudgetError naming the purpose, the request and the budget, before the
// GPU is asked. Usage reports the accounts and their peaks. A freed block
// stays on the device ("cached", a quarter of the limit and 4 GiB at most)
// for the next allocation of its size, and the cache goes back to the
// driver when an allocation would otherwise pass the budget: cuMemFree waits for the whole device, which stalled the host
// behind a layering executor's copies (DFB slots, which another stream
// writes, are freed at once). Free does not wait for the device: the block
// is handed only to work queued after it on the stream, and memory going
// back to the driver waits for the stream first; so the host runs ahead
// of the device across a model's frees (the vision encoder's end, timed by
// event marks: Backend.Mark, Elapsed).
//
// Uploads, downloads and token ids pass through one pinned staging buffer,
// used as a ring with an event after each copy, so transfers are
// asynchronous DMA in stream order and a small upload waits only for the
// copies whose bytes it reuses. Weight copies from Go memory and waits.
// Argmax picks a greedy token on the GPU and brings back its index alone.
// backend.TokenFeed goes further: ArgmaxAt leaves the index on the device,
// EmbeddingAt embeds the token it reads there (from the embedding table
// itself or a page-locked copy of a host table, HostTable, which kernels
// read over the bus), and FetchI32 copies it back behind an event of its
// own, so that the host queues a greedy decode step before it reads the
// token the step feeds (qwen3.Session.StartGreedy). backend.FlowFeed does
// the same for the action expert's Euler steps: Fourier makes a step's
// features from the state on the device and EulerStep updates it there,
// the step's time picked by a device counter (diffusion's devFlow).
// backend.ImagePrep takes a vision model's preprocessing: NewImageStage
// gives page-locked host memory that the host decodes camera frames into,
// and each image's Patches copies it up, resizes it (vla_resize_h, then
// the vertical filter inside vla_patchify: the host's fixed-point filters,
// integer sums) and writes its normalized patch rows (a lookup table), the
// host's values bit for bit (vision.DeviceProcessor; kernels/imageprep.cu).
// A stage's device memory, one image and its horizontal pass at a time,
// and the filters, is counted under PurposeImages.
//
// # Kernels
//
// The kernels are CUDA C sources embedded from kernels/ (header-free: bf16
// and f16 are handled as bits), compiled by NVRTC for the device's
// architecture (sm_90a on an sm_90 device with NVRTC 12 or later, for
// wgmma) on first use into a CUBIN, cached under
// $XDG_CACHE_HOME/vlanode/kernels (or ~/.cache/vlanode/kernels) by a hash
// of source, options and NVRTC version. GEMMs go to cublasGemmEx with
// float32 accumulation (CUBLAS_COMPUTE_32F): F16/BF16 weights multiply
// activations rounded to the weight's type, F32 weights multiply float32
// activations; the output is float32. A GEMV (one row of x, a 16-bit
// weight: decoding) takes a kernel of its own that streams the weight once:
// on sm_90, vla_gemv_stream (kernels/gemv_stream.cu), the weight brought
// into shared memory by bulk copies issued before the kernel ahead has
// ended, x held there packed in the weight's type; elsewhere, or with
// Backend.SetStreamGEMV(false), a warp per column (kernels/gemv.cu), the
// same bits. A product of 2 to 64 rows with a 16-bit weight (the
// action expert's 64 tokens, short prompts) takes vla_gemm_rows
// (kernels/gemm_rows.cu): tensor cores on 64 × 64 tiles (on sm_90a the
// asynchronous warpgroup MMA, wgmma, reading both operands from shared
// memory; elsewhere, or with Backend.SetRowsWGMMA(false), mma.sync), K
// split so that about 256 blocks share the weight, the splits' partial
// sums added in slot order by each tile's last block, so the bits depend
// on the shapes alone; q, k and v (or gate and up) in one launch, gate and
// up with silu(gate)·up written in 16 bits as the down product's input
// (Backend.SetRowProducts(false) sends them to cuBLAS). Attention takes
// one of three kernels by shape: split flash decoding for up to 4 queries
// (float32), flash attention on the tensor cores (bf16 operands, float32
// softmax and sums; on sm_90a the prefill's and the vision encoder's on
// wgmma, vla_flash_wg_*)
// for more, and a float32 kernel for head dims the
// others do not cover (see Attention and WithExactAttention); split
// results are merged by vla_attn_combine, or a warp a row for up to 32
// splits. bench_test.go measures every kernel against the device's copy
// bandwidth and GEMM rate (bench/results/cuda-kernels.md);
// Backend.SetSkipOps leaves kernels out by name, so that a model's
// benchmark can measure what each costs inside its graphs
// (BenchmarkMarginalCosts in models/alpamayo).
//
// # Fused ops
//
// Backend implements backend.Fused: the sequences a decoder layer repeats
// in fewer kernels (kernels/fused.cu, gemv.cu, convert.cu, norm.cu) — q, k
// and v of one decode row in one GEMV launch, gate·up·SiLU in one,
// add+RMSNorm, per-head q/k norms with the rotary embedding and the
// KV-cache stores, after a cuBLAS product its bias with GELU or with the
// residual sum, a residual added by the product itself (the GEMV kernel's
// epilogue, cuBLAS's beta = 1: no Add), and the input of a cuBLAS product
// written straight in its 16-bit type by the op before (an RMSNorm,
// silu(gate)·up, the bias and GELU) instead of in float and then rounded,
// the vision encoder's LayerNorms in that type alone (LayerNormMatMuls,
// LayerNormGELUMLP: nothing reads their float output). A decode row's
// RMSNorm ahead of its products (RMSNormMatMuls, RMSNormMLP) runs inside
// the streamed GEMV, whose blocks sum x's squares as vla_rmsnorm does
// (Backend.SetNormGEMV); a decode step's q/k norms, rotary embedding and
// cache store run inside its attention at a device position
// (backend.QKAttentionAt, vla_attn_decode_bf16_g4_qk; Backend.SetQKAttention).
// Each computes the bits of its sequence (the same per-thread loops and
// roundings; TestGPUFused*), so a model gets the same answers either way;
// shapes the fused kernels do not take run the sequence.
//
// # Epilogues
//
// Where cuBLASLt is found, a product of more than 64 rows with a bias
// folds it into the product's epilogue (cublasLtMatmul, one algorithm per
// shape from its heuristic, kept: the same bits on every call), and so do
// the vision MLP's tanh GELU, its first product then written in 16 bits
// for the second, and a residual sum with a bias ((a·wᵀ + x) + b). These
// round differently from the sequences above (TestGPUFused* checks them
// within a tolerance, and with Backend.SetEpilogues(false) bit for bit);
// without cuBLASLt, kernels of ours add the biases, and for 2 to 64 rows
// vla_gemm_rows adds them itself.
//
// # Compressed units
//
// ZDecoder decodes units compressed by weights/bf16z (kernels/bf16z.cu)
// from device memory into their slots, on a stream the caller gives, and
// reports tiles that fail their checks in a device status word the
// caller reads after each pass (docs/compression.md).
package cuda
