package cuda

import "fmt"

// Option configures New.
type Option func(*options) error

type options struct {
	device     int    // ordinal
	budget     int64  // bytes; 0 = the device's memory
	cacheDir   string // kernel cache; "" = none
	noCache    bool   // compile even when the cache has the kernels
	workspace  int64  // cuBLAS workspace bytes
	stagingMin int64  // initial pinned staging bytes

	exactAttention bool // float32 attention kernels only
	serial         bool // no programmatic dependent launch
}

// Defaults.
const (
	// defaultWorkspace is the cuBLAS workspace NVIDIA recommends for
	// Hopper (32 MiB; 4 MiB suffices for older GPUs).
	defaultWorkspace = 32 << 20
	// defaultStaging is the first size of the pinned buffer that uploads,
	// downloads and token ids pass through; it grows on demand.
	defaultStaging = 1 << 20
)

func defaultOptions() options {
	return options{cacheDir: defaultKernelCacheDir(), workspace: defaultWorkspace, stagingMin: defaultStaging}
}

// WithDevice picks the GPU by ordinal (default 0).
func WithDevice(ordinal int) Option {
	return func(o *options) error {
		if ordinal < 0 {
			return fmt.Errorf("cuda: device ordinal %d", ordinal)
		}
		o.device = ordinal
		return nil
	}
}

// WithBudget limits the device memory the backend may make the GPU use,
// in bytes, its own (context, cuBLAS, kernels) included. 0 (the default)
// allows the device's whole memory.
func WithBudget(bytes int64) Option {
	return func(o *options) error {
		if bytes < 0 {
			return fmt.Errorf("cuda: negative budget %d", bytes)
		}
		o.budget = bytes
		return nil
	}
}

// WithKernelCache sets the folder where compiled kernels are cached
// (default $XDG_CACHE_HOME/vlanode/kernels or ~/.cache/vlanode/kernels);
// "" disables the cache.
func WithKernelCache(dir string) Option {
	return func(o *options) error { o.cacheDir = dir; return nil }
}

// WithKernelRebuild compiles the kernels even when the cache holds them
// (and refreshes the cache).
func WithKernelRebuild() Option {
	return func(o *options) error { o.noCache = true; return nil }
}

// WithCUBLASWorkspace sets the bytes of the cuBLAS workspace (default
// 32 MiB).
func WithCUBLASWorkspace(bytes int64) Option {
	return func(o *options) error {
		if bytes < 0 {
			return fmt.Errorf("cuda: negative cuBLAS workspace %d", bytes)
		}
		o.workspace = bytes
		return nil
	}
}

// WithExactAttention keeps attention in float32 on the CUDA cores for
// every shape: more than 4 queries take the one-block-per-query kernel
// instead of the tensor-core flash kernel, which rounds q, k, v and the
// softmax weights to bf16. It is many times slower for long prefills; use
// it to check numerics.
func WithExactAttention() Option {
	return func(o *options) error { o.exactAttention = true; return nil }
}

// WithSerialLaunches launches every kernel only once the kernel ahead of it
// has finished, as cuLaunchKernel does, instead of with programmatic
// dependent launch (the default on sm_90 and later: a kernel's blocks start
// while the kernel ahead finishes, and GEMVs load their first weights
// then). The results are the same bits either way; this is for measuring
// what the overlap gains and for ruling it out when diagnosing.
func WithSerialLaunches() Option {
	return func(o *options) error { o.serial = true; return nil }
}

// SetEpilogues says whether products of more than 64 rows with a bias
// (and the vision MLP's tanh GELU) fold them into cuBLASLt's epilogue
// (on, the default where cuBLASLt is found) or add them with kernels of
// ours after cublasGemmEx (off), for the ops queued after the call: for
// benchmarks that compare the two in one process. The results differ in
// rounding only.
func (b *Backend) SetEpilogues(on bool) error {
	return b.run(func(g *gpu) error {
		g.noEpilogues = !on
		return nil
	})
}

// SetRowProducts says whether products of 2 to 64 rows with a 16-bit
// weight take vla_gemm_rows (on, the default) or cuBLAS (off), for the
// ops queued after the call: for benchmarks and tests that compare the
// two in one process. The results differ in the order of float sums
// only.
func (b *Backend) SetRowProducts(on bool) error {
	return b.run(func(g *gpu) error {
		g.noRows = !on
		return nil
	})
}

// SetRowsWGMMA says whether the products of 2 to 64 rows that take
// vla_gemm_rows run on its wgmma kernel (on, the default where it is
// built: sm_90a, NVRTC 12 or later) or on its mma.sync kernel (off), for
// the ops queued after the call: for benchmarks that compare the two in
// one process.
func (b *Backend) SetRowsWGMMA(on bool) error {
	return b.run(func(g *gpu) error {
		g.noRowsWG = !on
		return nil
	})
}

// SetFlashWGMMA says whether the flash attention calls that take
// vla_flash_wg_80 or _128 (built on sm_90a: one split, the prefill's and
// the vision encoder's) run on them (on, the default where they are
// built) or on vla_flash_pipe_80 or _128, the mma.sync kernels (off), for
// the ops queued after the call: for benchmarks that compare the two in
// one process.
func (b *Backend) SetFlashWGMMA(on bool) error {
	return b.run(func(g *gpu) error {
		g.noFlashWG = !on
		return nil
	})
}

// SetStreamGEMV says whether the products of one row with a 16-bit
// weight take vla_gemv_stream, the weight brought in by bulk copies (on,
// the default where it is built: sm_90 and NVRTC 12 or later), or the
// warp-per-column GEMV kernels (off), for the ops queued after the call:
// for benchmarks that compare the two in one process. Both compute the
// same bits.
func (b *Backend) SetStreamGEMV(on bool) error {
	return b.run(func(g *gpu) error {
		g.noStream = !on
		return nil
	})
}

// SetNormGEMV says whether a decoder layer's RMSNorm of one row ahead of
// its products (RMSNormMatMuls, RMSNormMLP) runs inside the streamed GEMV
// launch (on, the default where vla_gemv_stream runs) or as a vla_rmsnorm
// launch ahead of it (off), for the ops queued after the call: for
// benchmarks that compare the two in one process. Both compute the same
// bits. A graph keeps the launches it was captured with.
func (b *Backend) SetNormGEMV(on bool) error {
	return b.run(func(g *gpu) error {
		g.noNormStream = !on
		return nil
	})
}

// SetQKAttention says whether a decode step's per-head q/k norms, rotary
// embedding and KV-cache store run inside its attention kernel (on, the
// default, where QKNormRopeCacheAttentionAt's fused kernel applies) or in
// vla_qk_norm_rope_cache ahead of it (off), for the ops queued after the
// call: for benchmarks that compare the two in one process. Both compute
// the same bits.
func (b *Backend) SetQKAttention(on bool) error {
	return b.run(func(g *gpu) error {
		g.noQKAttn = !on
		return nil
	})
}

// SetGEMVFloatX says whether vla_gemv_stream holds x in shared memory as
// floats (on) or packed in the weight's 16-bit type (off, the default:
// half the bytes), for the ops queued after the call: for benchmarks. The
// same bits either way.
func (b *Backend) SetGEMVFloatX(on bool) error {
	return b.run(func(g *gpu) error {
		g.gstreamFloatX = on
		return nil
	})
}

// SetWaitingFree says whether Free waits until the work queued before it
// has run (on), or returns at once (off, the default: the block is reused
// only by work queued after it): for benchmarks that measure what the
// waits cost the host's lead over the device.
func (b *Backend) SetWaitingFree(on bool) error {
	return b.run(func(g *gpu) error {
		g.waitingFree = on
		return nil
	})
}

// SetSkipOps makes every later kernel launch whose name (as the trace
// names it, e.g. "rmsnorm", "attention decode") contains one of names do
// nothing; nil or empty restores them. A developer's diagnostic, never for
// serving: the results are wrong, but a run's time less the complete
// run's is what the ops left out cost there, overlap included
// (BenchmarkMarginalCosts in models/alpamayo). cuBLAS products and copies
// still run. A graph keeps the launches it was captured with.
func (b *Backend) SetSkipOps(names []string) error {
	return b.run(func(g *gpu) error {
		g.skipOps = nil
		for _, n := range names {
			if n != "" {
				g.skipOps = append(g.skipOps, n)
			}
		}
		return nil
	})
}

// SetSerialLaunches turns programmatic dependent launch off (serial) or
// back on, where the device has it, for the ops queued after the call (see
// WithSerialLaunches): for benchmarks that measure the overlap in one
// process. A graph keeps the launches it was captured with.
func (b *Backend) SetSerialLaunches(serial bool) error {
	return b.run(func(g *gpu) error {
		g.pdl = g.pdlOK && !serial
		return nil
	})
}
