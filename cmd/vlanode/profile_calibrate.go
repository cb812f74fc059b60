package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"vlanode/layering"
	"vlanode/models/alpamayo"
	"vlanode/placement"
	"vlanode/residency"
)

// coexecSample is what the executor measured of the CPU engine and the
// copy stream in one stage of a co-executed inference.
type coexecSample struct {
	Stage     placement.Stage
	Rows      int     // the stage's rows a pass (its CPU tier)
	Tasks     int     // CPU tasks run
	CPUMs     float64 // their compute, from each input's arrival to its result
	CPUBytes  int64   // the weights they read
	CopyMs    float64 // the copy stream's busy time
	CopyBytes int64   // what it copied (slots and homes)
}

// sampleStage sums the turns of stage s (passes named "s" or "s.N") of a
// profiled inference, with the bytes from the plan it ran: passes is the
// number of the stage's passes that ran (a decode may stop early).
func sampleStage(plan *residency.Plan, s placement.Stage, turns []layering.Turn, passes int) (coexecSample, error) {
	sp, ok := plan.Stage(s)
	if !ok {
		return coexecSample{}, fmt.Errorf("the plan has no stage %s", s)
	}
	out := coexecSample{Stage: s, Rows: sp.Rows,
		CPUBytes:  sp.CPUBytes * int64(passes),
		CopyBytes: sp.StreamedBytes*int64(passes) + sp.EnterBytes}
	for _, t := range turns {
		if stageOf(t.Pass) != string(s) {
			continue
		}
		if t.Slot != layering.NoSlot {
			out.CopyMs += t.CopyMs
		}
		if t.CPU != nil {
			out.Tasks++
			out.CPUMs += t.CPU.Ms
		}
	}
	if out.Tasks == 0 || out.CPUBytes == 0 {
		return out, fmt.Errorf("the CPU computed nothing in stage %s: calibrate at a budget whose plan gives it shares there", s)
	}
	if out.CopyMs <= 0 || out.CopyBytes == 0 {
		return out, fmt.Errorf("nothing was copied in stage %s", s)
	}
	return out, nil
}

// untimed takes the CPU's compute from plain, the inference before the
// profiled one, when the plan gives the CPU shares in the decode stage
// alone (the CPU engine times its tasks in every run, profiled or not):
// on the H200 the decode's CPU tasks ran at 86 GB/s in the profiled run,
// which times every turn, and at 92-93 GB/s in unprofiled ones (budgets
// run 32), the runs the planner predicts.
func (s *coexecSample) untimed(plan *residency.Plan, plain *alpamayo.Result) {
	if plain.Layers == nil || len(plain.Layers.CPUTasks) == 0 {
		return
	}
	var bytes int64
	for _, sp := range plan.Stages {
		if sp.Stage != placement.StageDecode && sp.CPUBytes > 0 {
			return // tasks of other tiers: the profiled run's turns tell them apart
		}
		if sp.Stage == placement.StageDecode {
			bytes = sp.CPUBytes * int64(plain.CachedTokens-plain.PromptTokens)
		}
	}
	s.CPUMs, _ = plain.Layers.CPUMs()
	s.Tasks, s.CPUBytes = len(plain.Layers.CPUTasks), bytes
}

// apply sets the CPU section's rate for the sample's tier (the tier
// whose rows are nearest: the one the planner reads for it), scaling its
// compute roof with it, and the copy rate while the CPU computes to what
// the executor measured: the rate from the compute time less the tier's
// cost per call, the copy rate from the copy stream's busy time. It returns what changed, for the log and the
// profile's source.
func (s coexecSample) apply(c *residency.CPUProfile) (string, error) {
	if c == nil || len(c.Rates) == 0 {
		return "", errors.New("the profile has no CPU section to calibrate (vlanode profile --cpu-only first)")
	}
	r := c.Tier(s.Rows)
	compute := s.CPUMs - float64(s.Tasks)*r.CallMs
	if compute <= 0 {
		return "", fmt.Errorf("stage %s: %d CPU tasks took %.3f ms, less than their cost per call (%.3f ms each)", s.Stage, s.Tasks, s.CPUMs, r.CallMs)
	}
	gbps := float64(s.CPUBytes) / (compute * 1e6)
	h2d := float64(s.CopyBytes) / (s.CopyMs * 1e6)
	note := fmt.Sprintf("%d-row rate %.1f → %.1f GB/s (%d tasks, %.1f ms, %.2f GB), copies while it computes %.1f → %.1f GB/s (%.2f GB in %.1f ms)",
		r.Rows, r.GBps, gbps, s.Tasks, s.CPUMs, float64(s.CPUBytes)/1e9, c.H2DBusyGBps, h2d, float64(s.CopyBytes)/1e9, s.CopyMs)
	r.SetGBps(gbps) // the tier's compute roof moves with it
	c.H2DBusyGBps = h2d
	return note, nil
}

// calibrateEntries adds to each stage's entry cost (Profile.StageEntryMs)
// the difference between its measured time and the plan's prediction, for
// the stages the plan gives the GPU alone and that copy anything: there the
// simulation's figures are measured ones, and what it misses is the
// stage's host work and its first copies (a co-executed stage's difference
// is the CPU figures', which the CPU calibration takes). It returns the
// entry costs for the log.
func calibrateEntries(p *residency.Profile, plan *residency.Plan, t alpamayo.Timing) string {
	measured := map[placement.Stage]time.Duration{placement.StageVision: t.Vision, placement.StagePrefill: t.Prefill,
		placement.StageDecode: t.Decode, placement.StageDiffusion: t.Diffusion}
	if p.StageEntryMs == nil {
		p.StageEntryMs = map[placement.Stage]float64{}
	}
	var parts []string
	for _, sp := range plan.Stages {
		if sp.Kind != residency.GPUOnly || sp.StreamedBytes+sp.EnterBytes == 0 {
			continue
		}
		d := float64(measured[sp.Stage])/1e6 - sp.PredictedMs
		p.StageEntryMs[sp.Stage] += d
		parts = append(parts, fmt.Sprintf("%s %+.1f → %.1f ms", sp.Stage, d, p.StageEntryMs[sp.Stage]))
	}
	return strings.Join(parts, ", ")
}

// profiledInfer runs req with every copy, compute and CPU task timed
// (Result.Layers.Turns).
func profiledInfer(ctx context.Context, bm *budgeted, req *alpamayo.Request) (*alpamayo.Result, error) {
	bm.model.SetProfiling(true)
	res, err := bm.model.Infer(ctx, req)
	bm.model.SetProfiling(false)
	if err != nil {
		return nil, fmt.Errorf("timed inference: %w", err)
	}
	if res.Layers == nil {
		return nil, errors.New("the inference ran no layered plan")
	}
	return res, nil
}

// calibrateCPU measures the CPU engine where the planner uses it: it
// loads the checkpoint within budget with profile p, runs the standard
// workload (a warm-up, one inference timed per stage, then one with every
// copy, compute and CPU task timed), and sets p's decode-tier CPU rate and
// its copy rate while the CPU computes to what the executor measured, and
// the entry costs of the stages the GPU computes alone (calibrateEntries); rounds times, re-planning
// with the new figures each round (a larger CPU share changes the
// contention it measures). The install-time figures (measureCPU: the
// kernels in a loop beside copies that never pause) differ from the
// executor's, where each engine idles part of the time: on the H200 of
// 2026-12-01 the engine read 77–83 GB/s in the executor against 58.9 in
// the loop, and the copies ran at 48.5 GB/s against 52.3.
func calibrateCPU(ctx context.Context, p *residency.Profile, spec budgetSpec, rounds int, from string, log io.Writer) error {
	tmp, err := os.CreateTemp("", "vlanode-calibrate-*.json")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	var notes []string
	var entries string
	spec.layers.profile = from
	for round := range rounds {
		bm, err := loadBudgeted(spec, log)
		if err != nil {
			return err
		}
		sample, err := func() (coexecSample, error) {
			defer bm.Close()
			req := standardRequest(bm.model, placement.StandardWorkload())
			if _, err := bm.model.Infer(ctx, req); err != nil {
				return coexecSample{}, fmt.Errorf("warm-up: %w", err)
			}
			plain, err := bm.model.Infer(ctx, req)
			if err != nil {
				return coexecSample{}, fmt.Errorf("timed inference: %w", err)
			}
			entries = calibrateEntries(p, bm.plan, plain.Timing)
			res, err := profiledInfer(ctx, bm, req)
			if err != nil {
				return coexecSample{}, err
			}
			sample, err := sampleStage(bm.plan, placement.StageDecode, res.Layers.Turns, res.CachedTokens-res.PromptTokens)
			if err == nil {
				sample.untimed(bm.plan, plain)
			}
			return sample, err
		}()
		if err != nil {
			return err
		}
		note, err := sample.apply(p.CPU)
		if err != nil {
			return err
		}
		note += "; stage entry " + entries
		fmt.Fprintf(log, "vlanode profile: calibration round %d at %s: %s\n", round+1, budgetText(spec.budget), note)
		notes = append(notes, note)
		if round+1 < rounds {
			// The next round plans with these figures.
			if err := writeProfile(p, tmp.Name(), io.Discard, io.Discard); err != nil {
				return err
			}
			spec.layers.profile = tmp.Name()
		}
	}
	p.CPU.Source += fmt.Sprintf("; calibrated in the executor (vlanode profile --calibrate %s, %s): %s",
		budgetText(spec.budget), time.Now().UTC().Format("2006-01-02"), strings.Join(notes, "; then "))
	return nil
}

// tierFit is a CPU tier's cost per call and rate fitted through the
// executor's tasks of two plans whose shares differ in size: each plan's
// tasks give a mean share (bytes) and a mean time; the line through the
// two points has the cost per call for its intercept and the rate for its
// slope.
type tierFit struct {
	CallMs float64
	GBps   float64
}

// fitTier fits a and b (the same stage, the same tier, shares of
// different sizes). A line that does not rise (the larger share took no
// longer) or whose intercept falls below zero (the larger share read
// slower per byte than the smaller) keeps no cost per call and takes the
// rate of both samples' bytes over their time.
func fitTier(a, b coexecSample) (tierFit, error) {
	if a.Tasks == 0 || b.Tasks == 0 {
		return tierFit{}, errors.New("a plan ran no CPU tasks in the stage")
	}
	ba, bb := float64(a.CPUBytes)/float64(a.Tasks), float64(b.CPUBytes)/float64(b.Tasks)
	ma, mb := a.CPUMs/float64(a.Tasks), b.CPUMs/float64(b.Tasks)
	if math.Abs(ba-bb) < 0.25*max(ba, bb) {
		return tierFit{}, fmt.Errorf("the two plans' CPU shares are alike (%.1f and %.1f MB a task): the fit needs two sizes", ba/1e6, bb/1e6)
	}
	slope := (ma - mb) / (ba - bb) // ms per byte
	call := ma - slope*ba
	if slope <= 0 || call < 0 {
		total := a.CPUMs + b.CPUMs
		if total <= 0 {
			return tierFit{}, errors.New("the CPU tasks took no time")
		}
		return tierFit{GBps: float64(a.CPUBytes+b.CPUBytes) / (total * 1e6)}, nil
	}
	return tierFit{CallMs: call, GBps: 1 / (slope * 1e6)}, nil
}

// apply sets the tier of rows rows to the fit (its compute roof moving
// with the rate) and returns what changed.
func (f tierFit) apply(c *residency.CPUProfile, rows int, a, b coexecSample) (string, error) {
	if c == nil || len(c.Rates) == 0 {
		return "", errors.New("the profile has no CPU section to calibrate (vlanode profile --cpu-only first)")
	}
	r := c.Tier(rows)
	note := fmt.Sprintf("%d-row tier from the %s stage's tasks of two plans (%d of %.1f MB in %.3f ms, %d of %.1f MB in %.3f ms, means): rate %.1f → %.1f GB/s, cost per call %.4f → %.4f ms",
		r.Rows, a.Stage, a.Tasks, float64(a.CPUBytes)/float64(a.Tasks)/1e6, a.CPUMs/float64(a.Tasks),
		b.Tasks, float64(b.CPUBytes)/float64(b.Tasks)/1e6, b.CPUMs/float64(b.Tasks), r.GBps, f.GBps, r.CallMs, f.CallMs)
	r.SetGBps(f.GBps)
	r.CallMs = f.CallMs
	return note, nil
}

// calibrateTier measures the CPU tier of a stage that the auto plans
// give the GPU alone but the forced ones share (the Euler steps'
// 64-row tier at small budgets): it loads the checkpoint within the
// budget twice, with the Static plan (the stage's MLPs whole on the CPU)
// and with the Dynamic one (a share of each), times one inference of
// each turn by turn after a warm-up, and fits the tier's cost per call
// and rate through the two share sizes (fitTier). The profile's
// one-shape loop (measureCPU: one 302 MB share, whole and half) leaves
// the cost per call of small shares uncertain: on the H200 it put
// 1.52 ms a call at 64 rows, and the 4 GiB Dynamic plan's Euler steps,
// predicted at 695 ms, measured 354.
func calibrateTier(ctx context.Context, p *residency.Profile, spec budgetSpec, stage placement.Stage, from string, log io.Writer) error {
	spec.layers.profile = from
	var samples []coexecSample
	for _, kind := range []residency.Kind{residency.Static, residency.Dynamic} {
		s := spec
		s.layers.kind = string(kind)
		bm, err := loadBudgeted(s, log)
		if err != nil {
			return fmt.Errorf("the %s plan: %w", kind, err)
		}
		sample, err := func() (coexecSample, error) {
			defer bm.Close()
			req := standardRequest(bm.model, placement.StandardWorkload())
			if _, err := bm.model.Infer(ctx, req); err != nil {
				return coexecSample{}, fmt.Errorf("warm-up: %w", err)
			}
			res, err := profiledInfer(ctx, bm, req)
			if err != nil {
				return coexecSample{}, err
			}
			sp, _ := bm.plan.Stage(stage)
			return sampleStage(bm.plan, stage, res.Layers.Turns, sp.Passes)
		}()
		if err != nil {
			return fmt.Errorf("the %s plan: %w", kind, err)
		}
		fmt.Fprintf(log, "vlanode profile: %s plan at %s: %d CPU tasks in the %s stage, %.2f GB in %.1f ms\n",
			kind, budgetText(spec.budget), sample.Tasks, stage, float64(sample.CPUBytes)/1e9, sample.CPUMs)
		samples = append(samples, sample)
	}
	fit, err := fitTier(samples[0], samples[1])
	if err != nil {
		return err
	}
	note, err := fit.apply(p.CPU, samples[0].Rows, samples[0], samples[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "vlanode profile: calibration at %s: %s\n", budgetText(spec.budget), note)
	p.CPU.Source += fmt.Sprintf("; calibrated in the executor (vlanode profile --calibrate %s --calibrate-stage %s, %s): %s",
		budgetText(spec.budget), stage, time.Now().UTC().Format("2006-01-02"), note)
	return nil
}
