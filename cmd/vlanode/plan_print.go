package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"vlanode/placement"
	"vlanode/residency"
)

// planInfo is what the report says about the plan's inputs.
type planInfo struct {
	dir, profile, device string
	h2d                  float64 // GB/s
	cpu                  *residency.CPUProfile
	// largest is the largest batch of the workload's requests that fits
	// the budget (residency.LargestBatch up to MaxBatchSearch), when a
	// batch or samples were asked for; 0 otherwise.
	largest int
	// at is the plan predicted again with the one-row CPU rate atRate
	// (GB/s; --at-cpu-rate); nil without.
	at     *residency.Plan
	atRate float64
}

// writePlanText prints the plan: the placement per module, each stage's
// plan kind and predicted timeline per engine, every byte of the budget
// by purpose, the predicted latency per stage.
func writePlanText(w io.Writer, p *residency.Plan, in planInfo) {
	wl := p.Workload
	fmt.Fprintf(w, "model %s (%s)\n", p.Model, in.dir)
	if wl.Name == placement.TextWorkloadName {
		chunk := wl.PromptTokens
		if wl.PrefillChunk > 0 {
			chunk = wl.PrefillChunk
		}
		fmt.Fprintf(w, "workload text: %d prompt tokens prefilled in %d pass(es) of up to %d (tier %d), %d new tokens (%d decode passes, tier 1)\n",
			wl.PromptTokens, (wl.PromptTokens+chunk-1)/chunk, chunk, placement.Tier(chunk), wl.ReasoningTokens+1, wl.ReasoningTokens)
	} else {
		fmt.Fprintf(w, "workload %s: %d images × %d patches, %d prompt tokens, %d reasoning tokens, %d Euler steps × %d action tokens\n",
			wl.Name, wl.Images, wl.PatchesPerImage, wl.PromptTokens, wl.ReasoningTokens, wl.EulerSteps, wl.ActionTokens)
	}
	if wl.Seqs() > 1 || wl.SamplesEach() > 1 {
		fmt.Fprintf(w, "batch %d requests × %d trajectory samples (largest batch that fits the budget: %s); %.2f plans/s predicted\n",
			wl.Seqs(), wl.SamplesEach(), largestText(in.largest), float64(wl.Seqs())*1e3/p.TotalMs)
	}
	fmt.Fprintf(w, "profile %s: %s, pinned H2D %.1f GB/s\n", in.profile, in.device, in.h2d)
	switch {
	case p.Options.Exact:
		fmt.Fprintf(w, "CPU shards: none (--exact)\n")
	case in.cpu == nil:
		fmt.Fprintf(w, "CPU shards: none (the profile has no CPU figures)\n")
	default:
		fmt.Fprintf(w, "CPU: %d threads, %s; H2D %.1f GB/s while it computes, hand-off %.3f ms\n",
			in.cpu.Threads, cpuRates(in.cpu), in.cpu.H2DBusyGBps, in.cpu.HandoffMs)
	}
	if p.BudgetBytes == 0 {
		fmt.Fprintf(w, "budget none (everything resident); minimum %s\n\n", residency.FormatBytes(p.MinBudgetBytes))
	} else {
		fmt.Fprintf(w, "budget %s; minimum %s\n\n", residency.FormatBytes(p.BudgetBytes), residency.FormatBytes(p.MinBudgetBytes))
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "module\tunits\tresident\tGB resident\tresident units\thome in some stages\tCPU shares")
	for _, m := range p.Modules() {
		count, idx := strconv.Itoa(len(m.Resident)), residentRanges(m.Resident)
		if m.Host {
			count, idx = "host", "rows gathered on the host"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%.3f\t%s\t%s\t%s\n", m.Module, m.Units, count, float64(m.ResidentBytes)/1e9, idx,
			homeRanges(p, m.Module), cpuShares(p, m.Module))
	}
	tw.Flush()

	fmt.Fprintf(w, "\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\trows\ttier\tpasses\tplan\tCPU share\tpredicted ms\tcopy ms\tdecode ms\tGPU ms\tCPU ms\tGB into homes\tGB streamed/pass\tGB copied/pass\tGB on CPU/pass\tGB VRAM\t")
	for _, sp := range p.Stages {
		var used int64
		for k, n := range sp.Bytes {
			if k != residency.PurposeFree {
				used += n
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", sp.Stage, sp.Rows, sp.Tier, sp.Passes,
			sp.Kind, sp.CPUShare, sp.PredictedMs, sp.CopyMs, sp.DecodeMs, sp.GPUMs, sp.CPUMs, float64(sp.EnterBytes)/1e9,
			float64(sp.StreamedBytes)/1e9, float64(sp.CopiedBytes)/1e9, float64(sp.CPUBytes)/1e9, float64(used)/1e9)
	}
	tw.Flush()

	fmt.Fprintf(w, "\n%-20s %8s %16s   (the stage that uses the most)\n", "memory", "GB", "bytes")
	var total int64
	for _, purpose := range residency.Purposes() {
		if n, ok := p.Bytes[purpose]; ok {
			fmt.Fprintf(w, "  %-18s %8.3f %16s\n", purpose, float64(n)/1e9, residency.GroupDigits(n))
			total += n
		}
	}
	label := "= budget"
	if p.BudgetBytes == 0 {
		label = "= needed"
	}
	fmt.Fprintf(w, "  %-18s %8.3f %16s\n", label, float64(total)/1e9, residency.GroupDigits(total))
	if p.SlotBytes > 0 {
		fmt.Fprintf(w, "  (dfb-slots: 2 × %s bytes, the largest streamed unit)\n", residency.GroupDigits(p.SlotBytes))
	}
	if p.StagingBytes > 0 {
		fmt.Fprintf(w, "  (z-staging: 2 × %s bytes, the largest compressed unit)\n", residency.GroupDigits(p.StagingBytes))
	}
	fmt.Fprintf(w, "  host memory for the weights: %s", residency.FormatBytes(p.HostBytes))
	if p.Compressed {
		fmt.Fprintf(w, "; raw %s", residency.FormatBytes(p.HostRawBytes))
	}
	fmt.Fprintln(w)
	writeCompression(w, p)

	at := func(ms float64) string { return "" }
	fmt.Fprintf(w, "\n%-20s %10s %13s", "predicted ms", "this plan", "all resident")
	if in.at != nil {
		fmt.Fprintf(w, " %15s", fmt.Sprintf("CPU %.1f GB/s", in.atRate))
		at = func(ms float64) string { return fmt.Sprintf(" %15.1f", ms) }
	}
	fmt.Fprintln(w)
	for _, s := range placement.Stages() {
		if ms, ok := p.PredictedMs[s]; ok {
			fmt.Fprintf(w, "  %-18s %10.1f %13.1f%s\n", s, ms, p.PreloadMs[s], at(predictedOf(in.at, s)))
		}
	}
	fmt.Fprintf(w, "  %-18s %10.1f %13.1f%s\n", "total", p.TotalMs, p.PreloadTotalMs, at(totalOf(in.at)))
	if in.at != nil {
		fmt.Fprintf(w, "  (CPU %.1f GB/s: this plan's placement and CPU shares, the one-row CPU rate at %.1f GB/s, its compute roof scaled with it)\n", in.atRate, in.atRate)
	}
	if len(p.Roofline) > 0 {
		fmt.Fprintf(w, "  (not in the profile, timed by its roofline: %s)\n", strings.Join(p.Roofline, ", "))
	}
}

// predictedOf is stage s's prediction in p (0 for a nil plan).
func predictedOf(p *residency.Plan, s placement.Stage) float64 {
	if p == nil {
		return 0
	}
	return p.PredictedMs[s]
}

// totalOf is p's predicted total (0 for a nil plan).
func totalOf(p *residency.Plan) float64 {
	if p == nil {
		return 0
	}
	return p.TotalMs
}

// writeCompression prints what compressed streaming does per module: the
// units it codes, their raw and stored bytes; or why the plan streams raw.
func writeCompression(w io.Writer, p *residency.Plan) {
	switch {
	case !p.Options.Compress:
		fmt.Fprintf(w, "\ncompression: off (--compress=false)\n")
		return
	case !p.Compressed:
		fmt.Fprintf(w, "\ncompression: %s\n", p.CompressNote)
		return
	}
	fmt.Fprintf(w, "\ncompression: bf16z, sizes %s\n", zSizes(p))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "module\tcompressed units\tGB raw\tGB compressed\tratio\tGPU shares\tGB shares\tGB host\t")
	var raw, z, shares, host int64
	ratio := func(a, b int64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.4f", float64(a)/float64(b))
	}
	for _, m := range p.Modules() {
		if m.Compressed == 0 && m.Shares == 0 {
			continue
		}
		raw, z, shares, host = raw+m.CompressedRaw, z+m.CompressedZ, shares+m.ShareBytes, host+m.HostBytes
		fmt.Fprintf(tw, "  %s\t%d\t%.3f\t%.3f\t%s\t%d\t%.3f\t%.3f\t\n", m.Module, m.Compressed, float64(m.CompressedRaw)/1e9, float64(m.CompressedZ)/1e9,
			ratio(m.CompressedZ, m.CompressedRaw), m.Shares, float64(m.ShareBytes)/1e9, float64(m.HostBytes)/1e9)
	}
	fmt.Fprintf(tw, "  all\t\t%.3f\t%.3f\t%s\t\t%.3f\t%.3f\t\n", float64(raw)/1e9, float64(z)/1e9, ratio(z, raw), float64(shares)/1e9, float64(host)/1e9)
	tw.Flush()
	fmt.Fprintf(w, "  (GB host: what host memory keeps of the module's compressed units: the compressed blob, and the raw blob and GPU shares of a unit the CPU shares)\n")
}

// zSizes says whether the compressed sizes are exact or estimated.
func zSizes(p *residency.Plan) string {
	if len(p.Options.Stored) > 0 {
		return "exact (encoded)"
	}
	rho := p.Options.ZRatio
	if rho == 0 {
		rho = residency.DefaultZRatio
	}
	return fmt.Sprintf("estimated at %.3f of each coded tensor (--z-ratio)", rho)
}

// cpuRates writes the CPU's rates per tier: "1 row 47 GB/s, 64 rows 2.1 TFLOP/s".
func cpuRates(c *residency.CPUProfile) string {
	var out []string
	for _, r := range c.Rates {
		out = append(out, fmt.Sprintf("%d rows %.0f GB/s %.2f TFLOP/s", r.Rows, r.GBps, r.TFLOPs))
	}
	return strings.Join(out, ", ")
}

// homeRanges lists a module's units whose homes cover only some stages,
// by their stages: "prefill+decode: mlp 0-20".
func homeRanges(p *residency.Plan, m placement.Module) string {
	var keys []string
	by := map[string][]placement.ID{}
	for _, u := range p.Units {
		if u.ID.Module != m || u.Weights != placement.Streamed || len(u.Home) == 0 {
			continue
		}
		var names []string
		for _, s := range u.Home {
			names = append(names, string(s))
		}
		k := strings.Join(names, "+")
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], u.ID)
	}
	if len(keys) == 0 {
		return "-"
	}
	var out []string
	for _, k := range keys {
		out = append(out, k+": "+residentRanges(by[k]))
	}
	return strings.Join(out, "; ")
}

// cpuShares lists, per stage, how many of the module's units the CPU
// computes whole and how many it shares with the GPU (with the largest
// CPU split): "decode: 36 split (≤5376)".
func cpuShares(p *residency.Plan, m placement.Module) string {
	var out []string
	for _, s := range placement.Stages() {
		whole, split, most := 0, 0, 0
		for _, u := range p.Units {
			pl, ok := u.Place[s]
			if u.ID.Module != m || !ok || u.Weights == placement.Host {
				continue
			}
			switch {
			case pl.Engine == placement.CPU:
				whole++
			case pl.Split():
				split++
				most = max(most, pl.CPUSplit)
			}
		}
		var parts []string
		if whole > 0 {
			parts = append(parts, fmt.Sprintf("%d on the CPU", whole))
		}
		if split > 0 {
			parts = append(parts, fmt.Sprintf("%d split (≤%d)", split, most))
		}
		if len(parts) > 0 {
			out = append(out, string(s)+": "+strings.Join(parts, ", "))
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, "; ")
}

// residentRanges writes resident units by part, their indices compacted:
// "0-3,5", or "attn 0-35; mlp 0-3,5"; "-" for none.
func residentRanges(ids []placement.ID) string {
	var parts []placement.Part
	byPart := map[placement.Part][]int{}
	for _, id := range ids {
		if _, ok := byPart[id.Part]; !ok {
			parts = append(parts, id.Part)
		}
		byPart[id.Part] = append(byPart[id.Part], id.Index)
	}
	if len(parts) == 0 {
		return "-"
	}
	var out []string
	for _, p := range parts {
		r := compactRanges(byPart[p])
		if p != placement.Whole {
			r = string(p) + " " + r
		}
		out = append(out, r)
	}
	return strings.Join(out, "; ")
}

// compactRanges writes increasing indices as "0-3,5,7-9"; "-" for none.
func compactRanges(idx []int) string {
	if len(idx) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(idx[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// planJSON is the plan as `vlanode plan --json` prints it.
type planJSON struct {
	Model          string                      `json:"model"`
	ModelDir       string                      `json:"model_dir"`
	Workload       placement.Workload          `json:"workload"`
	Profile        string                      `json:"profile"`
	Device         string                      `json:"device"`
	BudgetBytes    int64                       `json:"budget_bytes"`
	Unlimited      bool                        `json:"unlimited"`
	MinBudgetBytes int64                       `json:"min_budget_bytes"`
	SlotBytes      int64                       `json:"slot_bytes"`
	HostBytes      int64                       `json:"host_bytes"`
	HostRawBytes   int64                       `json:"host_raw_bytes"`
	Compress       bool                        `json:"compress"`
	Compressed     bool                        `json:"compressed"`
	StagingBytes   int64                       `json:"staging_bytes"`
	CompressNote   string                      `json:"compress_note,omitempty"`
	Exact          bool                        `json:"exact"`
	Stages         []residency.StagePlan       `json:"stages"`
	Bytes          map[residency.Purpose]int64 `json:"bytes"`
	PredictedMs    map[string]float64          `json:"predicted_ms"`
	PreloadMs      map[string]float64          `json:"preload_ms"`
	Roofline       []string                    `json:"timed_by_roofline,omitempty"`
	Modules        []moduleJSON                `json:"modules"`
	Units          []residency.UnitPlan        `json:"units"`
	// LargestBatch is the largest batch that fits the budget, with
	// --batch or --samples (MaxBatchSearch standing for more).
	LargestBatch int     `json:"largest_batch,omitempty"`
	PlansPerS    float64 `json:"plans_per_s"`
	// AtCPUGBps and PredictedAtCPUMs: with --at-cpu-rate, the plan
	// predicted again at that one-row CPU rate, its placement and shares
	// as planned (ms by stage and "total").
	AtCPUGBps        float64            `json:"at_cpu_gbps,omitempty"`
	PredictedAtCPUMs map[string]float64 `json:"predicted_at_cpu_ms,omitempty"`
}

// largestText is the largest batch for people: a count, or "≥ N" at the
// search's limit.
func largestText(n int) string {
	if n >= residency.MaxBatchSearch {
		return fmt.Sprintf("≥ %d", n)
	}
	return strconv.Itoa(n)
}

type moduleJSON struct {
	Module        placement.Module `json:"module"`
	Units         int              `json:"units"`
	Resident      []placement.ID   `json:"resident"`
	Host          bool             `json:"host,omitempty"`
	Bytes         int64            `json:"bytes"`
	ResidentBytes int64            `json:"resident_bytes"`
	// Compressed streaming: the units whose whole blob is compressed,
	// their raw and compressed bytes; the GPU shares coded and their
	// bytes; what host memory keeps of the module.
	Compressed    int   `json:"compressed_units"`
	CompressedRaw int64 `json:"compressed_raw_bytes"`
	CompressedZ   int64 `json:"compressed_bytes"`
	Shares        int   `json:"compressed_shares"`
	ShareBytes    int64 `json:"share_bytes"`
	HostBytes     int64 `json:"host_bytes"`
}

// writePlanJSON prints the plan as one JSON object.
func writePlanJSON(w io.Writer, p *residency.Plan, in planInfo) error {
	out := planJSON{
		Model: p.Model, ModelDir: in.dir, Workload: p.Workload, Profile: in.profile, Device: in.device,
		BudgetBytes: p.BudgetBytes, Unlimited: p.BudgetBytes == 0, MinBudgetBytes: p.MinBudgetBytes,
		SlotBytes: p.SlotBytes, HostBytes: p.HostBytes, HostRawBytes: p.HostRawBytes, Compress: p.Options.Compress,
		Compressed: p.Compressed, StagingBytes: p.StagingBytes, CompressNote: p.CompressNote,
		Exact: p.Options.Exact, Stages: p.Stages, Bytes: p.Bytes,
		Roofline: p.Roofline, Units: p.Units, LargestBatch: in.largest,
		PlansPerS:   math.Round(float64(p.Workload.Seqs())*1e6/p.TotalMs) / 1e3,
		PredictedMs: stageMap(p.PredictedMs, p.TotalMs), PreloadMs: stageMap(p.PreloadMs, p.PreloadTotalMs),
	}
	if in.at != nil {
		out.AtCPUGBps, out.PredictedAtCPUMs = in.atRate, stageMap(in.at.PredictedMs, in.at.TotalMs)
	}
	for _, m := range p.Modules() {
		out.Modules = append(out.Modules, moduleJSON{Module: m.Module, Units: m.Units, Resident: append([]placement.ID{}, m.Resident...),
			Host: m.Host, Bytes: m.Bytes, ResidentBytes: m.ResidentBytes,
			Compressed: m.Compressed, CompressedRaw: m.CompressedRaw, CompressedZ: m.CompressedZ,
			Shares: m.Shares, ShareBytes: m.ShareBytes, HostBytes: m.HostBytes})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	return nil
}

// stageMap is ms per stage with the total under "total", to the µs.
func stageMap(ms map[placement.Stage]float64, total float64) map[string]float64 {
	us := func(v float64) float64 { return math.Round(v*1e3) / 1e3 }
	out := map[string]float64{"total": us(total)}
	for s, v := range ms {
		out[string(s)] = us(v)
	}
	return out
}
