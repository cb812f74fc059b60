package residency

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"vlanode/placement"
)

// Profile is what the planner knows of a device: the pinned host-to-device
// bandwidth, compute times of units, a roofline for the shapes it lacks,
// and the memory the runtime takes before any weight. Every figure should
// come from a measurement; Source says which.
type Profile struct {
	// Source states where the figures come from (measurements, files,
	// dates, and how each per-unit time was derived).
	Source string `json:"source"`
	Device string `json:"device"`
	// H2DGBps is the pinned host-to-device copy bandwidth, 10⁹ bytes/s.
	H2DGBps  float64      `json:"h2d_gbps"`
	Roofline Roofline     `json:"roofline"`
	Fixed    FixedCosts   `json:"fixed"`
	Units    []UnitTiming `json:"units"`
	// StageMs, when set, are the measured stage times (every unit
	// resident, computed op by op) that the units' times add up to, per
	// stage.
	StageMs map[placement.Stage]float64 `json:"stage_ms,omitempty"`
	// GraphStageMs, when set, are the same stages' times with the decode
	// and Euler steps replayed from captured graphs, as a model runs when
	// its plan streams nothing (Plan.applyGraphs).
	GraphStageMs map[placement.Stage]float64 `json:"graph_stage_ms,omitempty"`
	// CPU is the host CPU as a co-execution engine; nil when it was not
	// profiled (plans then compute on the GPU alone).
	CPU *CPUProfile `json:"cpu,omitempty"`
	// StageEntryMs, when set, is each stage's cost beyond the simulation
	// when it copies anything (the host's work as the stage starts, the
	// copy engine's slower first copies into a new arena), ms, measured in
	// the executor on the standard workload (vlanode profile --calibrate)
	// and added to the stage's prediction in plans of that workload.
	StageEntryMs map[placement.Stage]float64 `json:"stage_entry_ms,omitempty"`
	// Decode is the GPU's decode kernel for compressed streaming (bf16z);
	// nil when it was not measured: plans then take FallbackDecode.
	Decode *DecodeProfile `json:"decode,omitempty"`
}

// DecodeProfile is the rate of the decode kernel that expands a
// compressed unit (bf16z) into its slot: t = LaunchMs + raw bytes /
// GBps, fitted from decodes of two unit sizes.
type DecodeProfile struct {
	// Source states where the figures come from.
	Source string `json:"source"`
	// GBps is the decoded (raw) bytes written per second beyond the
	// fixed cost, 10⁹ bytes/s.
	GBps float64 `json:"gbps"`
	// LaunchMs is each decode's fixed cost (the launch, the last wave of
	// tiles), ms.
	LaunchMs float64 `json:"launch_ms"`
}

// FallbackDecode is the decode rate a profile without a decode section
// plans with: the line through the two units BenchmarkGPUZDecode measured
// on the H200 (bench/results/compression.md, 2026-12-01, the warp
// kernel): a VLM layer, 385.9 MB in 884.6 µs, and an expert layer, 126.6
// MB in 344.7 µs, give 480 GB/s beyond 0.081 ms a decode. `vlanode
// profile` measures it on the device at hand.
var FallbackDecode = DecodeProfile{
	Source:   "fallback: BenchmarkGPUZDecode on the H200, 2026-12-01 (bench/results/compression.md): VLM layer 385.9 MB in 884.6 µs, expert layer 126.6 MB in 344.7 µs, fitted as a line",
	GBps:     480.3,
	LaunchMs: 0.0811,
}

// DecodeMs is the time to decode a compressed unit of raw bytes into its
// slot: the profile's decode rate, or FallbackDecode.
func (p *Profile) DecodeMs(raw int64) float64 {
	d := p.Decode
	if d == nil {
		d = &FallbackDecode
	}
	return d.LaunchMs + float64(raw)/(d.GBps*1e9)*1e3
}

// validate checks the decode figures.
func (d *DecodeProfile) validate(bad func(string, ...any)) {
	if d.Source == "" {
		bad("decode.source is empty: say where the figures come from")
	}
	if !(d.GBps > 0) || math.IsInf(d.GBps, 0) {
		bad("decode.gbps must be positive, got %g", d.GBps)
	}
	if !(d.LaunchMs >= 0) || math.IsInf(d.LaunchMs, 0) {
		bad("decode.launch_ms must not be negative, got %g", d.LaunchMs)
	}
}

// CPUProfile is what the planner knows of the host CPU computing sub-layer
// shards from bf16 weights in host memory (paper 2's install-time profile,
// taken under PCIe contention): its rates per token tier with
// host-to-device copies in flight, the copy rate while it computes, and
// the cost of handing activations between the engines.
type CPUProfile struct {
	// Source states where the figures come from.
	Source string `json:"source"`
	// Threads is the number of cores the kernels ran on.
	Threads int `json:"threads"`
	// Rates are the kernels' rates per tier, with copies in flight.
	Rates []CPURate `json:"rates"`
	// H2DBusyGBps is the pinned host-to-device bandwidth while the CPU
	// kernels run, 10⁹ bytes/s.
	H2DBusyGBps float64 `json:"h2d_busy_gbps"`
	// HandoffMs is one hand-off of a row of activations between the GPU's
	// stream and the CPU (each way), ms.
	HandoffMs float64 `json:"handoff_ms"`
	// HandoffRowMs is what each further row of HandoffValues values adds
	// to a hand-off, each way, ms: the rows' way through the exchange and
	// the CPU task's work on them (into its backend, the norm, back out),
	// which grow with the rows, not with the share's columns. Zero (not
	// measured): HandoffMs a row, which overstates it (Hop).
	HandoffRowMs float64 `json:"handoff_row_ms,omitempty"`
}

// HandoffValues is the row width HandoffMs and HandoffRowMs are measured
// at (a 4096-wide hidden state).
const HandoffValues = 4096

// Hop is one hand-off, each way, of rows rows of width values: HandoffMs,
// and HandoffRowMs (or, unmeasured, HandoffMs) for each further row in
// proportion to its width.
func (c *CPUProfile) Hop(rows, width int) float64 {
	per := c.HandoffRowMs
	if per == 0 {
		per = c.HandoffMs
	}
	return c.HandoffMs + per*float64(max(rows-1, 0))*float64(width)/HandoffValues
}

// CPURate is the CPU's rate for products of Rows rows.
type CPURate struct {
	Rows int `json:"rows"`
	// GBps is the bf16 weights read per second, 10⁹ bytes/s.
	GBps float64 `json:"gbps"`
	// TFLOPs is the arithmetic rate, 10¹² FLOP/s.
	TFLOPs float64 `json:"tflops"`
	// CallMs is what one call costs beyond its bytes and FLOPs (waking the
	// kernel threads, rounding x, the barriers between the products), ms:
	// profile fits it from a whole share and a half share.
	CallMs float64 `json:"call_ms"`
}

// Ms is the CPU's time for a share of bytes of weights and flops FLOPs
// over rows rows, computed in one call: the nearest profiled tier's (in
// ratio of rows) roofline plus its cost per call.
func (c *CPUProfile) Ms(bytes int64, flops float64, rows int) float64 {
	best, dist := -1, math.Inf(1)
	for i, r := range c.Rates {
		if d := math.Abs(math.Log(float64(r.Rows) / float64(max(rows, 1)))); d < dist {
			best, dist = i, d
		}
	}
	r := c.Rates[best]
	return r.CallMs + max(float64(bytes)/(r.GBps*1e9), flops/(r.TFLOPs*1e12))*1e3
}

// validate checks the CPU figures.
func (c *CPUProfile) validate(bad func(string, ...any)) {
	if c.Source == "" {
		bad("cpu.source is empty: say where the figures come from")
	}
	if c.Threads <= 0 {
		bad("cpu.threads must be positive, got %d", c.Threads)
	}
	if len(c.Rates) == 0 {
		bad("cpu.rates is empty")
	}
	for i, r := range c.Rates {
		if r.Rows <= 0 || !(r.GBps > 0) || !(r.TFLOPs > 0) || math.IsInf(r.GBps, 0) || math.IsInf(r.TFLOPs, 0) {
			bad("cpu.rates[%d]: rows, gbps and tflops must be positive, got %+v", i, r)
		}
		if !(r.CallMs >= 0) || math.IsInf(r.CallMs, 0) {
			bad("cpu.rates[%d].call_ms must not be negative, got %g", i, r.CallMs)
		}
	}
	if !(c.H2DBusyGBps > 0) || math.IsInf(c.H2DBusyGBps, 0) {
		bad("cpu.h2d_busy_gbps must be positive, got %g", c.H2DBusyGBps)
	}
	if !(c.HandoffMs >= 0) || math.IsInf(c.HandoffMs, 0) {
		bad("cpu.handoff_ms must not be negative, got %g", c.HandoffMs)
	}
	if !(c.HandoffRowMs >= 0) || math.IsInf(c.HandoffRowMs, 0) {
		bad("cpu.handoff_row_ms must not be negative, got %g", c.HandoffRowMs)
	}
}

// Roofline is the fallback model: a unit takes max(bytes/MemGBps,
// FLOPs/TFLOPs), and a profiled time is carried to another shape of the
// same module and stage in the ratio of their rooflines.
type Roofline struct {
	// MemGBps is the achieved device-memory read bandwidth, 10⁹ bytes/s.
	MemGBps float64 `json:"mem_gbps"`
	// TFLOPs is the achieved bf16 matrix rate, 10¹² FLOP/s.
	TFLOPs float64 `json:"tflops"`
}

// FixedCosts are device bytes taken before any weight, KV cache or
// activation.
type FixedCosts struct {
	// ContextBytes is the CUDA primary context.
	ContextBytes int64 `json:"cuda_context_bytes"`
	// CUBLASBytes is the cuBLAS handle with the kernels it loads.
	CUBLASBytes int64 `json:"cublas_handle_bytes"`
	// WorkspaceBytes is the workspace given to cuBLAS.
	WorkspaceBytes int64 `json:"cublas_workspace_bytes"`
	// KernelBytes is vlanode's kernel module.
	KernelBytes int64 `json:"kernel_module_bytes"`
}

// UnitTiming is one measured (or derived) compute time: one pass of a unit
// of Module in Stage, over Rows rows, whose blob was WeightBytes and whose
// arithmetic was FLOPs. WeightBytes and FLOPs let the time be carried to
// other shapes; with both zero, Ms is used as it is for every shape.
type UnitTiming struct {
	Module placement.Module `json:"module"`
	// Part, when set, says the entry timed that part of the module's
	// units; an entry without one timed whole layers, and parts take its
	// time in the ratio of their rooflines.
	Part        placement.Part  `json:"part,omitempty"`
	Stage       placement.Stage `json:"stage"`
	Rows        int             `json:"rows"`
	WeightBytes int64           `json:"weight_bytes"`
	FLOPs       float64         `json:"flops"`
	Ms          float64         `json:"ms"`
	// Source says how Ms was obtained.
	Source string `json:"source,omitempty"`
}

//go:embed profiles/h200.json
var h200JSON []byte

// DefaultProfileName names the shipped profile.
const DefaultProfileName = "h200 (default)"

// DefaultProfile is the shipped profile of one NVIDIA H200, derived from
// the figures measured in this repository (see its Source). Each call
// returns a new copy.
func DefaultProfile() (*Profile, error) {
	p, err := ParseProfile(h200JSON)
	if err != nil {
		return nil, fmt.Errorf("residency: the embedded H200 profile: %w", err)
	}
	return p, nil
}

// ParseProfile decodes and validates a profile.
func ParseProfile(raw []byte) (*Profile, error) {
	var p Profile
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("residency: profile: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Marshal encodes the profile as indented JSON.
func (p *Profile) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("residency: profile: %w", err)
	}
	return append(b, '\n'), nil
}

// Validate checks that every figure is usable.
func (p *Profile) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if p.Source == "" {
		bad("source is empty: say where the figures come from")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"h2d_gbps", p.H2DGBps}, {"roofline.mem_gbps", p.Roofline.MemGBps}, {"roofline.tflops", p.Roofline.TFLOPs}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			bad("%s must be positive, got %g", f.name, f.v)
		}
	}
	f := p.Fixed
	if f.ContextBytes < 0 || f.CUBLASBytes < 0 || f.WorkspaceBytes < 0 || f.KernelBytes < 0 {
		bad("fixed costs must not be negative: %+v", f)
	}
	for st, ms := range p.GraphStageMs {
		if !(ms > 0) || math.IsInf(ms, 0) {
			bad("graph_stage_ms[%s] must be positive, got %g", st, ms)
		}
	}
	for i, u := range p.Units {
		if u.Module == "" || u.Stage == "" || u.Rows <= 0 || u.WeightBytes < 0 || u.FLOPs < 0 || !(u.Ms > 0) {
			bad("units[%d] (%s in %s): module, stage, rows > 0, weight_bytes ≥ 0, flops ≥ 0 and ms > 0 are required", i, u.Module, u.Stage)
		}
	}
	if p.CPU != nil {
		p.CPU.validate(bad)
	}
	for st, ms := range p.StageEntryMs {
		if math.IsNaN(ms) || math.IsInf(ms, 0) || math.Abs(ms) > 1000 {
			bad("stage_entry_ms[%s] must be a finite cost within a second, got %g", st, ms)
		}
	}
	if p.Decode != nil {
		p.Decode.validate(bad)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("residency: profile: %w", err)
	}
	return nil
}

// DMAMs is the time to copy n bytes host-to-device, C_DMA.
func (p *Profile) DMAMs(n int64) float64 { return float64(n) / (p.H2DGBps * 1e9) * 1e3 }

// rooflineMs is max(bytes/bandwidth, FLOPs/peak).
func (p *Profile) rooflineMs(bytes int64, flops float64) float64 {
	return max(float64(bytes)/(p.Roofline.MemGBps*1e9), flops/(p.Roofline.TFLOPs*1e12)) * 1e3
}

// Cost fills ExeMs and Timing of every unit's work: the profiled time of
// the same module and stage ("profile" when the shape is the profiled one,
// "scaled" by the ratio of rooflines when it is not; the entry with the
// nearest rows is used), else the roofline ("roofline").
func (p *Profile) Cost(units []placement.Unit) {
	for i := range units {
		u := &units[i]
		for j := range u.Work {
			w := &u.Work[j]
			w.ExeMs, w.Timing = p.exeMs(u, w)
		}
	}
}

func (p *Profile) exeMs(u *placement.Unit, w *placement.Work) (float64, string) {
	ms, how := p.oneExeMs(u, w)
	return ms * float64(max(w.Seqs, 1)), how
}

// oneExeMs is C_EXE of one sequence's compute of the work.
func (p *Profile) oneExeMs(u *placement.Unit, w *placement.Work) (float64, string) {
	own := p.rooflineMs(u.Bytes, w.FLOPs)
	if u.HostOnly {
		own = 0 // host work has no device roofline
	}
	e, ok := p.nearest(u.ID, w.Stage, w.Rows)
	if !ok {
		return own, "roofline"
	}
	if u.HostOnly {
		return e.Ms, "profile"
	}
	ref := p.rooflineMs(e.WeightBytes, e.FLOPs)
	if ref <= 0 || (e.WeightBytes == u.Bytes && e.FLOPs == w.FLOPs) {
		return e.Ms, "profile"
	}
	return e.Ms * own / ref, "scaled"
}

// nearest is the entry of unit id's module in stage s whose rows are
// closest to rows (in ratio), of id's part where the profile has one, else
// of whole units.
func (p *Profile) nearest(id placement.ID, s placement.Stage, rows int) (UnitTiming, bool) {
	best, dist := -1, math.Inf(1)
	part := placement.Whole
	for _, e := range p.Units {
		if e.Module == id.Module && e.Stage == s && e.Part == id.Part {
			part = id.Part
		}
	}
	for i, e := range p.Units {
		if e.Module != id.Module || e.Stage != s || e.Part != part {
			continue
		}
		if d := math.Abs(math.Log(float64(e.Rows) / float64(max(rows, 1)))); d < dist {
			best, dist = i, d
		}
	}
	if best < 0 {
		return UnitTiming{}, false
	}
	return p.Units[best], true
}
