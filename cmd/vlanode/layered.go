package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"unsafe"

	"vlanode/backend"
	"vlanode/cuda"
	"vlanode/device"
	"vlanode/layering"
	"vlanode/models"
	"vlanode/models/alpamayo"
	"vlanode/models/layered"
	"vlanode/placement"
	"vlanode/residency"
)

// layerFlags are the flags of the commands that run Alpamayo-R1 within a
// VRAM budget: the planner places its units (residency), the layering
// executor streams the rest.
type layerFlags struct {
	mode    string
	profile string
	planOpts
}

// planOpts are the planner's options on the command line.
type planOpts struct {
	exact      bool
	kind       string
	cpuThreads int
	compress   bool
	zRatio     float64
}

func (o *planOpts) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.exact, "exact", false, "forbid CPU shards: the GPU computes every unit, and plans stay bit-identical across budgets")
	fs.StringVar(&o.kind, "plan-kind", "", "force one plan for every stage that streams: gpu-only, static (MLPs on the CPU) or dynamic (MLPs split between CPU and GPU); default: the cheapest per stage")
	fs.IntVar(&o.cpuThreads, "cpu-threads", 0, "threads of the CPU engine that computes CPU shards (default: all cores but two)")
	fs.BoolVar(&o.compress, "compress", true, "stream weights compressed (bf16z, lossless) where the planner predicts it pays: copied compressed, decoded by the GPU into the slot; --compress=false streams raw")
	fs.Float64Var(&o.zRatio, "z-ratio", 0, fmt.Sprintf("compressed share of a bf16 tensor's bytes the planner assumes before the weights are encoded (default %.3f, synth Alpamayo-R1-10B; 0.68-0.70 for trained weights)", residency.DefaultZRatio))
}

// options are the planner's options.
func (o planOpts) options() residency.Options {
	return residency.Options{Exact: o.exact, Kind: residency.Kind(o.kind), Compress: o.compress, ZRatio: o.zRatio}
}

// textOptions are the planner's options for a text model's generation:
// streamed raw (its loads are replaceable, re-placed raw by later plans:
// layered.Config.Compress).
func (o planOpts) textOptions() residency.Options {
	opts := o.options()
	opts.Compress = false
	return opts
}

// modeNames are --mode's values.
var modeNames = []string{"auto", "pipelined", "sequential", "preload"}

func (f *layerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.mode, "mode", "auto", "how streamed units move: pipelined (two DFB slots, copies overlap computes), sequential (one slot, copy then compute), preload (every unit resident: needs a budget that holds them), or auto (pipelined when the plan streams anything)")
	fs.StringVar(&f.profile, "profile", "", "device profile JSON for the planner (default: the shipped H200 profile; measure one with the profile command)")
	f.planOpts.register(fs)
}

func (f *layerFlags) check() error {
	if err := f.options().Validate(); err != nil {
		return usagef("%v", err)
	}
	for _, m := range modeNames {
		if f.mode == m {
			return nil
		}
	}
	return usagef("unknown --mode %q (want one of %v)", f.mode, modeNames)
}

// resolveMode picks the executor mode for a plan.
func (f *layerFlags) resolveMode(plan *residency.Plan) (layering.Mode, error) {
	streams := streamedUnits(plan) > 0 // slots, homes per stage or CPU shares: the executor runs it
	switch f.mode {
	case "pipelined":
		if !streams {
			return layering.Preload, nil // nothing to stream: the same computes
		}
		return layering.Pipelined, nil
	case "sequential":
		if !streams {
			return layering.Preload, nil
		}
		return layering.Sequential, nil
	case "preload":
		if streams {
			return 0, fmt.Errorf("--mode preload: the budget of %s does not hold every unit (%d streamed); raise it or use pipelined",
				residency.FormatBytes(plan.BudgetBytes), streamedUnits(plan))
		}
		return layering.Preload, nil
	}
	if streams {
		return layering.Pipelined, nil
	}
	return layering.Preload, nil
}

func streamedUnits(p *residency.Plan) int { return countPlaced(p, placement.Streamed) }
func residentUnits(p *residency.Plan) int { return countPlaced(p, placement.Resident) }

func countPlaced(p *residency.Plan, place placement.Weights) int {
	n := 0
	for _, u := range p.Units {
		if u.Weights == place {
			n++
		}
	}
	return n
}

// budgeted is Alpamayo-R1 loaded within a budget, with what keeps it
// alive.
type budgeted struct {
	// batch is the most requests the plan holds at once (budgetSpec.batch,
	// or fewer where the budget holds fewer).
	batch int
	be    backend.Backend
	model *alpamayo.Model
	plan  *residency.Plan
	mode  layering.Mode

	closers []func() error
}

// Close releases the model, the executor's device, the pinned blobs and
// the backend, in that order.
func (b *budgeted) Close() error {
	var errs []error
	if b.model != nil {
		b.model.Close()
	}
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	b.closers = nil
	return errors.Join(errs...)
}

// budgetSpec says what to load and within what.
type budgetSpec struct {
	dir, vlm string
	device   string
	threads  int
	ordinal  int
	budget   int64 // 0: unlimited
	layers   layerFlags
	profile  bool // time every copy and compute (Result.Layers.Turns)
	// batch and samples are the requests the plan holds at once and the
	// trajectory samples of each (0: 1); a budget that holds fewer
	// requests lowers batch (budgeted.batch).
	batch, samples int
}

// loadBudgeted plans the checkpoint for the standard workload within the
// budget, opens the backend with its allocator limited to the budget, and
// loads the model with the plan's placement.
func loadBudgeted(s budgetSpec, log io.Writer) (*budgeted, error) {
	plan, mode, err := planBudgeted(s)
	if err != nil {
		return nil, err
	}
	return loadPlanned(s, plan, mode, log)
}

// archProfile is the spec's model architecture (from its config files)
// and the device profile it plans with.
func (s budgetSpec) archProfile() (*residency.Arch, *residency.Profile, error) {
	arch, err := loadArch(s.dir, s.vlm)
	if err != nil {
		return nil, nil, err
	}
	prof, _, err := loadProfile(s.layers.profile)
	if err != nil {
		return nil, nil, err
	}
	return arch, prof, nil
}

// planBudgeted plans the checkpoint for the standard workload within the
// budget and picks the executor's mode; it reads only the configs and
// the profile. A budget below the plan's minimum is refused with it.
func planBudgeted(s budgetSpec) (*residency.Plan, layering.Mode, error) {
	arch, prof, err := s.archProfile()
	if err != nil {
		return nil, 0, err
	}
	// A batch the budget cannot hold is planned as the largest that it
	// can (loadPlanned says so; plan.Workload has it).
	w := placement.StandardWorkload().WithBatch(s.batch, s.samples)
	if batch := w.Seqs(); batch > 1 {
		units := func(w placement.Workload) []placement.Unit { return alpamayo.PlanUnits(arch, w) }
		fits, err := residency.LargestBatch(arch, units, w, prof, s.budget, s.layers.options(), batch)
		if err != nil {
			return nil, 0, err
		}
		w = w.WithBatch(max(fits, 1), s.samples)
	}
	plan, err := residency.NewPlan(arch, alpamayo.PlanUnits(arch, w), w, prof, s.budget, s.layers.options())
	if err != nil {
		return nil, 0, err
	}
	mode, err := s.layers.resolveMode(plan)
	if err != nil {
		return nil, 0, err
	}
	return plan, mode, nil
}

// loadPlanned opens the backend with its allocator limited to the budget
// and loads the model with the plan's placement.
func loadPlanned(s budgetSpec, plan *residency.Plan, mode layering.Mode, log io.Writer) (*budgeted, error) {
	b := &budgeted{plan: plan, mode: mode, batch: plan.Workload.Seqs()}
	if want := max(s.batch, 1); b.batch < want {
		fmt.Fprintf(log, "vlanode: %s holds batches of %d requests of %d trajectory samples, not %d: batches of up to %d\n",
			budgetText(s.budget), b.batch, plan.Workload.SamplesEach(), want, b.batch)
	}
	// The CUDA allocator charges the context and the cuBLAS handle to the
	// budget itself, as the plan does.
	be, err := device.Open(s.device, device.Options{Threads: s.threads, Ordinal: s.ordinal, Budget: s.budget}, log)
	if err != nil {
		return nil, err
	}
	b.be = be
	b.closers = append(b.closers, be.Close)
	lay, closers, err := layeredConfig(be, plan, mode, s.profile, s.layers.cpuThreads, nil)
	b.closers = append(b.closers, closers...)
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	if lay.Compress != nil {
		// The plan estimated the compressed sizes; once the units are
		// coded, plan again with the exact ones (same placement expected).
		lay.Compress.Progress = log
		lay.Replan = func(stored map[placement.ID]int64, shares map[placement.ID]float64) (*residency.Plan, error) {
			arch, prof, err := s.archProfile()
			if err != nil {
				return nil, err
			}
			opts := s.layers.options()
			opts.Stored, opts.ShareRatio = stored, shares
			w := placement.StandardWorkload()
			return residency.NewPlan(arch, alpamayo.PlanUnits(arch, w), w, prof, s.budget, opts)
		}
	}
	if b.model, err = alpamayo.Load(be, s.dir, alpamayo.LoadOptions{VLM: s.vlm, Layering: lay}); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	b.plan = b.model.Plan()
	if note := b.model.PlanNote(); note != "" {
		fmt.Fprintf(log, "vlanode: %s\n", note)
	}
	// A plan that streams nothing has nothing to say about compression.
	if note := b.plan.CompressNote; note != "" && s.layers.compress && streamedUnits(b.plan) > 0 {
		fmt.Fprintf(log, "vlanode: compression: %s\n", note)
	}
	if rep := b.model.Compression(); rep != nil {
		fmt.Fprintf(log, "vlanode: pinned host memory for the coded units: %s raw, %s compressed (%.3f; %d of %d units coded whole or in their GPU shares, %.1f s on %d threads)\n",
			residency.FormatBytes(rep.RawBytes), residency.FormatBytes(rep.StoredBytes), rep.Ratio(), codedUnits(rep), len(rep.Units), rep.Seconds, rep.Workers)
	}
	// The plan's prediction is the GPU's (its profile); on the CPU backend
	// it says nothing.
	predicted, compressed := "", ""
	if be.Name() == "cuda" {
		predicted = fmt.Sprintf(", predicted %.0f ms for the standard workload", b.plan.TotalMs)
	}
	if rep := b.model.Compression(); rep != nil {
		compressed = fmt.Sprintf(", %d compressed", codedUnits(rep))
	}
	fmt.Fprintf(log, "vlanode: %s within %s: %d units resident, %d streamed%s (%s mode)%s\n",
		b.plan.Model, budgetText(s.budget), residentUnits(b.plan), streamedUnits(b.plan), compressed, mode, predicted)
	return b, nil
}

// layeredConfig is what runs plan on be through a layering executor in
// mode: the CPU engine of cpuThreads threads when the plan computes shares
// on the CPU, the DFB device and pinned host blobs on CUDA (layering.Host
// on the cpu backend), the coding of what the plan compresses at load
// (models.Compress, in the same pinned memory); profile times every unit. blobs, when not nil,
// allocates the host blobs and outlives the device (a model re-placed by
// several plans); else one is made and released with the device. closers
// release them, in order, after the model that uses them; they are
// returned with an error too (what was made before it).
func layeredConfig(be backend.Backend, plan *residency.Plan, mode layering.Mode, profile bool, cpuThreads int, blobs *hostBlobs) (*layered.Config, []func() error, error) {
	var closers []func() error
	lay := &layered.Config{Plan: plan, Mode: mode, Profile: profile}
	if planUsesCPU(plan) {
		engine, closeEngine, err := newCPUEngine(cpuThreads)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, closeEngine)
		lay.CPU = engine
	}
	if cb, ok := be.(*cuda.Backend); ok {
		dev := cb.NewDFBDevice()
		if blobs == nil {
			blobs = &hostBlobs{}
			closers = append(closers, blobs.free)
		}
		closers = append(closers, dev.Close) // dev first: it unpins
		lay.Device, lay.View, lay.HostAlloc = dev, dev.WeightAt, blobs.alloc
		if plan.Compressed {
			lay.Compress = &models.CompressOptions{Alloc: blobs.alloc, Release: blobs.release}
		}
	} else {
		dev := layering.NewHost()
		lay.Device, lay.View = dev, dev.WeightView(be)
		if plan.Compressed {
			lay.Compress = &models.CompressOptions{}
		}
	}
	return lay, closers, nil
}

// planUsesCPU says whether the plan computes a share of some unit on the
// CPU in some stage.
func planUsesCPU(p *residency.Plan) bool {
	for _, u := range p.Units {
		for _, pl := range u.Place {
			if u.Weights != placement.Host && (pl.Engine == placement.CPU || pl.CPUSplit > 0) {
				return true
			}
		}
	}
	return false
}

func budgetText(b int64) string {
	if b <= 0 {
		return "no budget"
	}
	return residency.FormatBytes(b)
}

// hostBlobs are the pinnable host allocations of streamed units, freed
// once the device that pinned them is closed.
type hostBlobs struct {
	mu    sync.Mutex
	blobs [][]byte
}

func (h *hostBlobs) alloc(size int64) ([]byte, error) {
	b, err := cuda.HostAlloc(size)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.blobs = append(h.blobs, b)
	h.mu.Unlock()
	return b, nil
}

// release frees one allocation of alloc's before the others (a raw blob
// once coded, compressed bytes that did not pay).
func (h *hostBlobs) release(b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, a := range h.blobs {
		if unsafe.SliceData(a) == unsafe.SliceData(b) {
			h.blobs = append(h.blobs[:i], h.blobs[i+1:]...)
			return cuda.HostFree(a)
		}
	}
	return fmt.Errorf("releasing %d bytes of host memory that were not allocated here", len(b))
}

// codedUnits counts the units a compression coded, whole or a share.
func codedUnits(r *models.CompressReport) int {
	n := 0
	for _, u := range r.Units {
		if u.Coded || len(u.Shares) > 0 {
			n++
		}
	}
	return n
}

func (h *hostBlobs) free() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, b := range h.blobs {
		errs = append(errs, cuda.HostFree(b))
	}
	h.blobs = nil
	return errors.Join(errs...)
}
