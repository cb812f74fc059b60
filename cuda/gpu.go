package cuda

import (
	"errors"
	"fmt"

	"vlanode/backend"
	"vlanode/cuda/driver"
)

// Memory the backend counts for the device's own use, beyond what it
// measures.
const (
	// kernelModuleMargin: a module's code, constants and per-kernel local
	// memory live in driver pages of their own, loaded lazily on first
	// launch; the CUBIN size alone undercounts them.
	kernelModuleMargin = 2 << 20
	// cublasLazyMargin: cuBLAS loads each GEMM kernel on its first use
	// (CUDA's lazy loading), after the memory of the handle was measured.
	cublasLazyMargin = 16 << 20
)

// gpu is one device and everything the backend made on it. It is touched
// only inside the backend's thread.do, where its context is current.
type gpu struct {
	drv  *driver.Driver
	blas *driver.BLAS
	rtc  *driver.NVRTC

	dev    driver.Device
	ctx    driver.Context // the retained primary context; 0 before
	stream driver.Stream  // where every op is queued, in order
	handle driver.BLASHandle
	// cuBLASLt, for the products with a bias or GELU folded in (nil when
	// it is missing), and its plans by shape.
	lt       *driver.BLASLt
	ltHandle driver.LtHandle
	ltPlans  map[ltKey]*driver.LtPlan
	module   driver.Module
	k        kernelSet

	mem         *allocator
	workspace   *block // cuBLAS's workspace
	xScratch    *block // MatMul's activations in the weight's type
	idsDev      *block // Embedding's ids
	attnScratch *block // split attention's partial results
	argmaxOut   *block // Argmax's index
	biasScratch *block // a 16-bit bias widened for a cuBLASLt epilogue
	kvScratch   *block // bf16 copies of K and V for the pipelined flash kernels
	rowsScratch *block // the row products' partial tiles (rows.go)
	rowsCount   *block // the row products' tile counters, zero between launches
	rowsOut     *block // silu(gate)·up of a row product, the down product's input
	stage       staging
	fetches     fetchPool                // FetchI32's page-locked slots
	hostTables  map[*block]struct{}      // HostTable's memory not freed yet
	stages      map[*imageStage]struct{} // image stages not closed yet

	info  DeviceInfo
	kinfo KernelInfo
	args  *driver.Args // parameters of the launch being built (an object of its own: see driver.Args)

	deferred error // errors of Free, reported by the next Sync

	// A twin is x rounded to bf16 in the MatMul scratch, written by the
	// kernel that wrote x (LayerNorm's, for the products that read its
	// output; attention's, for the output projection): convertX returns
	// it instead of converting x again. An op
	// leaves one in twinOut; the next op finds it in twinIn (Backend.run),
	// so nothing can have written x or the scratch in between.
	twinIn, twinOut twin

	exactAttention bool                // WithExactAttention
	pdl            bool                // programmatic dependent launch: pdlOK and not serial
	pdlOK          bool                // sm_90+ and cuLaunchKernelEx
	gemvLate       bool                // benchmarks: GEMVs load no weight before the kernel ahead finishes
	noGEMV         bool                // benchmarks: every MatMul through cuBLAS
	noRows         bool                // benchmarks: products of 2 to 64 rows through cuBLAS, not vla_gemm_rows
	rowsWG         bool                // vla_gemm_rows_wg is built (sm_90a) and granted its shared memory
	rowsWGOff      string              // why not, when not
	noRowsWG       bool                // benchmarks: vla_gemm_rows on mma.sync where the wgmma kernel is built
	flashWG        bool                // the vla_flash_wg_* kernels are built (sm_90a) and granted their shared memory
	flashWGOff     string              // why not, when not
	noFlashWG      bool                // benchmarks, tests: the flash attention that would take vla_flash_wg_* on vla_flash_pipe_*
	flashWGAll     bool                // tests: vla_flash_wg_* for every flash call they can take, split or not
	qkOne          bool                // benchmarks: a head a warp in vla_qk_norm_rope(_cache) at every shape (gpu.qkHeads)
	gstreamOK      bool                // vla_gemv_stream is built and granted its shared memory
	gstreamOff     string              // why not, when not
	noStream       bool                // benchmarks: one-row products on the warp-per-column GEMVs
	gstreamFloatX  bool                // benchmarks: vla_gemv_stream holds x as floats, not packed in 16 bits (SetGEMVFloatX)
	noQKAttn       bool                // benchmarks: a decode step's q/k norms in a kernel ahead of its attention (SetQKAttention)
	noNormStream   bool                // benchmarks: decode norms by vla_rmsnorm ahead of the streamed GEMV (SetNormGEMV)
	waitingFree    bool                // benchmarks: Free waits for the stream (SetWaitingFree)
	gstreamSlots   int                 // vla_gemv_stream's ring slots (gstreamSlots; tests change it)
	noEpilogues    bool                // benchmarks: biases and GELUs by kernels of ours, not cuBLASLt
	flashInPlace   bool                // tests and benchmarks: the flash kernels that read float K and V
	skipOps        []string            // SetSkipOps: launches left out (a diagnostic)
	combineBlocks  bool                // tests: every merge of attention splits on vla_attn_combine (a block a row)
	capture        *capture            // the capture in progress, nil when none
	graphs         map[*Graph]struct{} // graphs not yet closed
	trace          *opTrace            // StartTrace's records, nil when off

	marks map[driver.Event]struct{} // Stopwatch marks not yet released

	xpath     backend.ExchangePath   // HostExchange's path (probeExchange)
	exchanges map[*exchange]struct{} // exchanges not yet closed
}

// DeviceInfo describes the device and libraries a Backend runs on.
type DeviceInfo struct {
	Ordinal           int
	Name              string
	ComputeCapability int // major*10 + minor: 90 for an H100/H200
	SMs               int
	TotalMemory       int64
	Driver            string // e.g. "libcuda.so.1 (CUDA 13.0)"
	CUBLAS            string // e.g. "libcublas.so.13 13.1.0"
	CUBLASLt          string // e.g. "libcublasLt.so.13", or why there is none
	NVRTC             string // e.g. "libnvrtc.so.13 13.0"
	// HostExchange is the path of backend.HostExchange and why, e.g.
	// "device waits: cuStreamWaitValue32_v2 on device-mapped page-locked
	// memory (...)".
	HostExchange string
}

// errNoDevice says that the driver sees no GPU.
var errNoDevice = errors.New("cuda: the NVIDIA driver sees no GPU")

// openGPU brings up the device: driver, context, stream, allocator,
// cuBLAS, kernels, staging. On error everything made so far is released.
func openGPU(o options) (g *gpu, err error) {
	g = &gpu{args: driver.NewArgs(), exactAttention: o.exactAttention}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.close())
			g = nil
		}
	}()
	if g.drv, err = driver.OpenDriver(); err != nil {
		return g, err
	}
	if err = g.openDevice(o); err != nil {
		return g, err
	}
	if err = g.openBLAS(o); err != nil {
		return g, err
	}
	if err = g.openKernels(o); err != nil {
		return g, err
	}
	g.pdlOK = g.info.ComputeCapability >= 90 && g.drv.CanLaunchPDL()
	g.pdl = g.pdlOK && !o.serial
	if err = g.probeExchange(); err != nil {
		return g, err
	}
	return g, g.stage.open(g.drv, o.stagingMin)
}

// openDevice retains the device's primary context, makes it current, and
// starts the allocator with the context's memory charged.
func (g *gpu) openDevice(o options) error {
	d := g.drv
	if err := d.Init(); err != nil {
		return fmt.Errorf("cuda: the NVIDIA driver did not initialize: %w", err)
	}
	n, err := d.DeviceCount()
	if err != nil {
		return fmt.Errorf("cuda: counting devices: %w", err)
	}
	if n == 0 {
		return errNoDevice
	}
	if o.device >= n {
		return fmt.Errorf("cuda: no device %d: the driver sees %d", o.device, n)
	}
	if g.dev, err = d.Device(o.device); err != nil {
		return fmt.Errorf("cuda: device %d: %w", o.device, err)
	}
	if err := g.describe(o.device); err != nil {
		return err
	}
	ctx, err := d.PrimaryContextRetain(g.dev)
	if err != nil {
		return fmt.Errorf("cuda: device %d: %w", o.device, err)
	}
	g.ctx = ctx
	if err := d.SetCurrent(ctx); err != nil {
		return fmt.Errorf("cuda: device %d: %w", o.device, err)
	}
	free, total, err := d.MemInfo()
	if err != nil {
		return fmt.Errorf("cuda: device %d: %w", o.device, err)
	}
	if g.mem, err = newAllocator(d, o.budget, total); err != nil {
		return err
	}
	// What is not free now is the context's (and anything else already on
	// the GPU, which vlanode cannot use either).
	if err := g.mem.charge(PurposeContext, total-free); err != nil {
		return err
	}
	if g.stream, err = d.StreamCreate(driver.StreamNonBlocking); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	// A freed block goes to the allocator's cache without a wait (its
	// next owner's work follows on the stream); memory going back to the
	// driver waits for the stream's work first.
	g.mem.quiesce = func() error {
		if err := d.StreamSynchronize(g.stream); err != nil {
			return fmt.Errorf("cuda: freeing device memory: %w", err)
		}
		return nil
	}
	return nil
}

// describe fills g.info for the device of ordinal.
func (g *gpu) describe(ordinal int) (err error) {
	d, i := g.drv, &g.info
	i.Ordinal, i.Driver = ordinal, d.String()
	if i.Name, err = d.DeviceName(g.dev); err != nil {
		return fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	major, minor, err := d.ComputeCapability(g.dev)
	if err != nil {
		return fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	i.ComputeCapability = major*10 + minor
	if i.SMs, err = d.Attribute(g.dev, driver.AttrMultiprocessorCount); err != nil {
		return fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	if i.TotalMemory, err = d.TotalMem(g.dev); err != nil {
		return fmt.Errorf("cuda: device %d: %w", ordinal, err)
	}
	return nil
}

// openBLAS creates the cuBLAS handle on the stream with a budgeted
// workspace, and charges the memory cuBLAS takes for itself, measured.
func (g *gpu) openBLAS(o options) (err error) {
	if g.blas, err = driver.OpenBLAS(); err != nil {
		return err
	}
	if major, minor, patch, err := g.blas.Version(); err == nil {
		g.info.CUBLAS = fmt.Sprintf("%s %d.%d.%d", g.blas.LibraryName(), major, minor, patch)
	}
	used, err := g.measure(func() error {
		g.handle, err = g.blas.Create()
		return err
	})
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if err := g.mem.charge(PurposeCUBLAS, used+cublasLazyMargin); err != nil {
		return err
	}
	if err := g.blas.SetStream(g.handle, g.stream); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if o.workspace > 0 {
		if g.workspace, err = g.mem.alloc(PurposeWorkspace, o.workspace); err != nil {
			return err
		}
		if err := g.blas.SetWorkspace(g.handle, g.workspace.ptr, g.workspace.bytes); err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
	}
	// cuBLASLt comes with cuBLAS; without it the products with a bias take
	// a kernel of ours for the bias, which is slower, not wrong.
	if err := g.openLt(); err != nil {
		g.info.CUBLASLt = "none: " + err.Error()
	} else {
		g.info.CUBLASLt = g.lt.LibraryName()
	}
	return nil
}

// measure runs fn and returns how much device memory it took, by
// cuMemGetInfo before and after (never negative).
func (g *gpu) measure(fn func() error) (int64, error) {
	before, _, err := g.drv.MemInfo()
	if err != nil {
		return 0, err
	}
	if err := fn(); err != nil {
		return 0, err
	}
	after, _, err := g.drv.MemInfo()
	if err != nil {
		return 0, err
	}
	return max(0, before-after), nil
}

// openKernels compiles (or loads from the cache) the kernel module for the
// device and looks up every kernel.
func (g *gpu) openKernels(o options) (err error) {
	if g.rtc, err = driver.OpenNVRTC(); err != nil {
		return err
	}
	major, minor, err := g.rtc.Version()
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	g.info.NVRTC = fmt.Sprintf("%s %d.%d", g.rtc.LibraryName(), major, minor)
	archs, err := g.rtc.SupportedArchs()
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	arch, err := pickArch(g.info.ComputeCapability, archs)
	if err != nil {
		return err
	}
	name := archName(arch, major)
	cubin, info, err := buildKernels(g.rtc, name, o.cacheDir, o.noCache)
	if err != nil {
		return err
	}
	err = g.loadModule(cubin)
	if err != nil && info.FromCache && !errors.Is(err, ErrOverBudget) { // a stale or damaged cache entry: rebuild it
		if cubin, info, err = buildKernels(g.rtc, name, o.cacheDir, true); err != nil {
			return err
		}
		err = g.loadModule(cubin)
	}
	if err != nil {
		return fmt.Errorf("cuda: loading the kernels for %s: %w", info.Arch, err)
	}
	g.kinfo = info
	if err := g.k.load(g.drv, g.module); err != nil {
		return err
	}
	g.allowRowsSmem(name)
	g.allowFlashWG(name)
	g.allowStreamSmem(arch, major)
	return nil
}

// loadModule charges and loads a CUBIN as the kernel module.
func (g *gpu) loadModule(cubin []byte) (err error) {
	cost := int64(len(cubin)) + kernelModuleMargin
	if err := g.mem.charge(PurposeKernels, cost); err != nil {
		return err
	}
	if g.module, err = g.drv.ModuleLoad(cubin); err != nil {
		g.mem.uncharge(PurposeKernels, cost)
	}
	return err
}

// close releases everything, in the reverse order of openGPU; it copes
// with a half-open gpu. Errors are joined.
func (g *gpu) close() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if g.drv != nil && g.ctx != 0 {
		if g.stream != 0 {
			keep(g.closeGraphs())
			keep(g.closeExchanges()) // the stream may wait on their Posts
			keep(g.drv.StreamSynchronize(g.stream))
			keep(g.closeMarks())
			keep(g.closeFetches())
			for blk := range g.hostTables {
				keep(g.freeHostTable(blk))
			}
			for s := range g.stages {
				s.closed = true
				keep(g.closeStage(s))
			}
		}
		keep(g.closeLt())
		if g.handle != 0 {
			keep(g.blas.Destroy(g.handle))
		}
		if g.mem != nil {
			keep(g.mem.freeAll())
		}
		if g.module != 0 {
			keep(g.drv.ModuleUnload(g.module))
		}
		keep(g.stage.close(g.drv))
		if g.stream != 0 {
			keep(g.drv.StreamDestroy(g.stream))
		}
		keep(g.drv.PrimaryContextRelease(g.dev))
		keep(g.drv.SetCurrent(0)) // leave no released context current on this OS thread
	}
	g.handle, g.module, g.stream, g.ctx = 0, 0, 0, 0
	if g.rtc != nil {
		keep(g.rtc.Close())
	}
	if g.blas != nil {
		keep(g.blas.Close())
	}
	if g.drv != nil {
		keep(g.drv.Close())
	}
	if len(errs) > 0 {
		return fmt.Errorf("cuda: closing: %w", errors.Join(errs...))
	}
	return nil
}

// twin is a bf16 copy of the n elements at src, at p; p == 0: none.
type twin struct {
	src, p driver.DevicePtr
	n      int64
}

// twinFor returns the MatMul scratch as the place for a bf16 twin of x, or
// 0 where a capture could not grow it.
func (g *gpu) twinFor(x *Tensor) (driver.DevicePtr, error) {
	n := x.elements() * 2
	if g.capture != nil && (g.xScratch == nil || g.xScratch.bytes < n) {
		return 0, nil
	}
	return g.scratch(&g.xScratch, n)
}
