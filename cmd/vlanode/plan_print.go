package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"vlanode/residency"
)

// planInfo is what the report says about the plan's inputs.
type planInfo struct {
	dir, profile, device string
	h2d                  float64 // GB/s
}

// writePlanText prints the plan: the placement per module, every byte of
// the budget by purpose, the predicted latency per stage.
func writePlanText(w io.Writer, p *residency.Plan, in planInfo) {
	wl := p.Workload
	fmt.Fprintf(w, "model %s (%s)\n", p.Model, in.dir)
	fmt.Fprintf(w, "workload %s: %d images × %d patches, %d prompt tokens, %d reasoning tokens, %d Euler steps × %d action tokens\n",
		wl.Name, wl.Images, wl.PatchesPerImage, wl.PromptTokens, wl.ReasoningTokens, wl.EulerSteps, wl.ActionTokens)
	fmt.Fprintf(w, "profile %s: %s, pinned H2D %.1f GB/s\n", in.profile, in.device, in.h2d)
	if p.BudgetBytes == 0 {
		fmt.Fprintf(w, "budget none (everything resident); minimum %s\n\n", residency.FormatBytes(p.MinBudgetBytes))
	} else {
		fmt.Fprintf(w, "budget %s; minimum %s\n\n", residency.FormatBytes(p.BudgetBytes), residency.FormatBytes(p.MinBudgetBytes))
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "module\tunits\tresident\tGB resident\tresident indices")
	for _, m := range p.Modules() {
		count, idx := strconv.Itoa(len(m.Resident)), compactRanges(m.Resident)
		if m.Host {
			count, idx = "host", "rows gathered on the host"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%.3f\t%s\n", m.Module, m.Units, count, float64(m.ResidentBytes)/1e9, idx)
	}
	tw.Flush()

	fmt.Fprintf(w, "\n%-20s %8s %16s\n", "memory", "GB", "bytes")
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
	if p.PromotedBytes > 0 {
		var names []string
		for _, u := range p.Units {
			if u.Promoted {
				names = append(names, fmt.Sprintf("%s.%d", u.Module, u.Index))
			}
		}
		fmt.Fprintf(w, "  (after the prefill, %s of the activations hold %s for decode and diffusion: copied once in %.1f ms)\n",
			residency.FormatBytes(p.PromotedBytes), strings.Join(names, ", "), p.PromoteCopyMs)
	}
	if p.SlotBytes > 0 {
		fmt.Fprintf(w, "  (dfb-slots: 2 × %s bytes, the largest streamed unit)\n", residency.GroupDigits(p.SlotBytes))
	}

	fmt.Fprintf(w, "\n%-20s %10s %13s\n", "predicted ms", "this plan", "all resident")
	for _, s := range residency.Stages() {
		if ms, ok := p.PredictedMs[s]; ok {
			fmt.Fprintf(w, "  %-18s %10.1f %13.1f\n", s, ms, p.PreloadMs[s])
		}
	}
	fmt.Fprintf(w, "  %-18s %10.1f %13.1f\n", "total", p.TotalMs, p.PreloadTotalMs)
	if len(p.Roofline) > 0 {
		fmt.Fprintf(w, "  (not in the profile, timed by its roofline: %s)\n", strings.Join(p.Roofline, ", "))
	}
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
	Workload       residency.Workload          `json:"workload"`
	Profile        string                      `json:"profile"`
	Device         string                      `json:"device"`
	BudgetBytes    int64                       `json:"budget_bytes"`
	Unlimited      bool                        `json:"unlimited"`
	MinBudgetBytes int64                       `json:"min_budget_bytes"`
	SlotBytes      int64                       `json:"slot_bytes"`
	PromotedBytes  int64                       `json:"promoted_bytes"`
	Bytes          map[residency.Purpose]int64 `json:"bytes"`
	PredictedMs    map[string]float64          `json:"predicted_ms"`
	PreloadMs      map[string]float64          `json:"preload_ms"`
	Roofline       []string                    `json:"timed_by_roofline,omitempty"`
	Modules        []moduleJSON                `json:"modules"`
	Units          []residency.Placement       `json:"units"`
}

type moduleJSON struct {
	Module        residency.Module `json:"module"`
	Units         int              `json:"units"`
	Resident      []int            `json:"resident"`
	Host          bool             `json:"host,omitempty"`
	Bytes         int64            `json:"bytes"`
	ResidentBytes int64            `json:"resident_bytes"`
}

// writePlanJSON prints the plan as one JSON object.
func writePlanJSON(w io.Writer, p *residency.Plan, in planInfo) error {
	out := planJSON{
		Model: p.Model, ModelDir: in.dir, Workload: p.Workload, Profile: in.profile, Device: in.device,
		BudgetBytes: p.BudgetBytes, Unlimited: p.BudgetBytes == 0, MinBudgetBytes: p.MinBudgetBytes,
		SlotBytes: p.SlotBytes, PromotedBytes: p.PromotedBytes, Bytes: p.Bytes, Roofline: p.Roofline, Units: p.Units,
		PredictedMs: stageMap(p.PredictedMs, p.TotalMs), PreloadMs: stageMap(p.PreloadMs, p.PreloadTotalMs),
	}
	for _, m := range p.Modules() {
		out.Modules = append(out.Modules, moduleJSON{Module: m.Module, Units: m.Units, Resident: append([]int{}, m.Resident...),
			Host: m.Host, Bytes: m.Bytes, ResidentBytes: m.ResidentBytes})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	return nil
}

// stageMap is ms per stage with the total under "total", to the µs.
func stageMap(ms map[residency.Stage]float64, total float64) map[string]float64 {
	us := func(v float64) float64 { return math.Round(v*1e3) / 1e3 }
	out := map[string]float64{"total": us(total)}
	for s, v := range ms {
		out[string(s)] = us(v)
	}
	return out
}
