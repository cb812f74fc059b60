package residency

import (
	"flag"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite profiles/h200.json from the measured figures")

// Figures measured in this repository, on one NVIDIA H200 (driver 580,
// CUDA 13.0, cuBLAS 13.1), 2026-11-29. Nothing else enters the default
// profile.
const (
	// bench/results/standard-workload.md: the standard workload on
	// alpamayo-r1-10b weights, everything resident, ms per stage.
	measVisionMs    = 256.2 // 27 blocks × 11,520 patches, merger, DeepStack
	measPrefillMs   = 109.2 // 3,042 tokens, 36 layers (and the LM head's last row)
	measDecodeMs    = 161.1 // 21 tokens
	measDiffusionMs = 63.8  // 10 Euler steps × 36 expert layers

	// bench/results/cuda-kernels.md, final run, µs.
	gemvUs       = 29.58  // GPUMatMul/gemv_bf16_1x4096x12288
	gemmUs       = 424.06 // GPUMatMul/gemm_bf16_3030x4096x12288
	visionAttnUs = 343.30 // GPUAttention/vision_16x720_16x72
	geluTanhUs   = 217.38 // GPUOps/gelu_tanh_11520x4304
	geluErfUs    = 309.98 // GPUOps/gelu_erf_11520x4304
	layerNormUs  = 67.45  // GPUOps/layernorm_11520x1152
	addUs        = 37.16  // GPUOps/add_3030x4096
	ropeUs       = 31.69  // GPUOps/rope_3030x32x128

	// DESIGN.md, "Verified there": pinned H2D 55.4 GB/s; the primary
	// context leaves 139.3 of 139.8 GiB free; a cuBLAS handle takes ~0.43
	// GiB more.
	measH2DGBps   = 55.4
	measContextGi = 139.8 - 139.3
	measCUBLASGi  = 0.43
)

// Backend constants the CUDA backend charges on top of what it measures
// (cuda/gpu.go, cuda/options.go): they are accounting, not guesses.
const (
	cublasLazyMargin   = 16 << 20 // cuBLAS's lazily loaded GEMM kernels
	cublasWorkspace    = 32 << 20 // the default cuBLAS workspace
	kernelModuleMargin = 2 << 20  // vlanode's kernel module (its CUBIN is not measured yet)
)

// deriveH200 computes the default profile from the measured figures; see
// docs/planning.md for the arithmetic in words.
func deriveH200(t *testing.T) *Profile {
	t.Helper()
	units, err := alpamayo10B(t).Units(StandardWorkload())
	require.NoError(t, err)
	by := map[string]Unit{}
	for _, u := range units {
		by[u.String()] = u
	}
	head := lmHeadBlocks(alpamayo10B(t).Text, 0)[0] // the whole head, one GEMV

	// Rates of the measured kernels.
	gemvGBps := float64(4096*12288*2) / gemvUs / 1e3       // bf16 weight bytes per second, 10⁹
	gemmTFLOPs := 2.0 * 3030 * 4096 * 12288 / gemmUs / 1e6 // 10¹² FLOP/s
	eltGBps := float64(3*4*3030*4096) / addUs / 1e3        // an add reads two floats, writes one
	gemmMs := func(flops float64) float64 { return flops / (gemmTFLOPs * 1e9) }
	eltMs := func(bytes float64) float64 { return bytes / (eltGBps * 1e6) }
	scaleUs := func(us, elems, measured float64) float64 { return us * elems / measured / 1e3 }

	const P, h, ff = 11520.0, 1152.0, 4304.0 // vision rows, hidden, MLP
	const tokens, u = 2880.0, 4608.0         // merged rows, merge unit × hidden
	blockMs := gemmMs(2*P*h*(3*h+h+ff+ff)) + // qkv, proj, fc1, fc2
		visionAttnUs/1e3 + geluTanhUs/1e3 + 2*layerNormUs/1e3 +
		eltMs(2*12*P*h) + // two residual adds
		eltMs(8*P*(3*h+h+ff+h)) + // four bias adds (read and write the output)
		scaleUs(ropeUs, 2*P*h, 3030*4096) // rotary on q and k
	mergerMs := layerNormUs/1e3 + // 11,520×1152 before the fold, or 2,880×4608 after: as many elements
		gemmMs(2*tokens*u*u) + eltMs(8*tokens*u) + // fc1 and its bias
		scaleUs(geluErfUs, tokens*u, 11520*4304) + // exact GELU
		gemmMs(2*tokens*u*4096) + eltMs(8*tokens*4096) // fc2 and its bias
	headMs := float64(head.bytes()) / (gemvGBps * 1e6)

	p := &Profile{
		Device:   "NVIDIA H200 (132 SMs, 139.8 GiB), driver 580, CUDA 13.0, cuBLAS 13.1",
		H2DGBps:  measH2DGBps,
		Roofline: Roofline{MemGBps: round(gemvGBps, 1), TFLOPs: round(gemmTFLOPs, 1)},
		Fixed: FixedCosts{
			ContextBytes:   gib(measContextGi),
			CUBLASBytes:    gib(measCUBLASGi) + cublasLazyMargin,
			WorkspaceBytes: cublasWorkspace,
			KernelBytes:    kernelModuleMargin,
		},
	}
	// action_in and action_out are not profiled: their roofline times come
	// off the diffusion stage before it is shared among the expert layers.
	var actionMs float64
	for _, k := range []string{"action_in.0", "action_out.0"} {
		w, _ := by[k].WorkIn(StageDiffusion)
		actionMs += p.rooflineMs(by[k].Bytes, w.FLOPs)
	}
	blocks, mergers := 27.0, 4.0
	entry := func(key string, s Stage, ms float64, src string) {
		u := by[key]
		w, ok := u.WorkIn(s)
		require.True(t, ok, "%s in %s", key, s)
		p.Units = append(p.Units, UnitTiming{Module: u.Module, Stage: s, Rows: w.Rows, WeightBytes: u.Bytes, FLOPs: w.FLOPs, Ms: round(ms, 5), Source: src})
	}
	entry("patch_embed.0", StageVision, measVisionMs-blocks*blockMs-mergers*mergerMs,
		"the vision stage's 256.2 ms less 27 blocks and 4 mergers: the patch GEMM and the host-side position interpolation, rotary tables and uploads of VisionPass.Begin")
	entry("vision.0", StageVision, blockMs,
		"kernel sum: 4 GEMMs at the measured 719 TFLOP/s, attention 343.3 µs, GELU-tanh 217.4 µs, 2 LayerNorms 67.5 µs, residual and bias adds and rotary at the measured add/rope rates")
	for _, k := range []string{"deepstack.0", "merger.0"} {
		entry(k, StageVision, mergerMs, "kernel sum: LayerNorm 67.5 µs, 2 GEMMs at 719 TFLOP/s, exact GELU scaled from 310.0 µs, bias adds")
	}
	entry("vlm.0", StagePrefill, (measPrefillMs-headMs)/36, "the prefill stage's 109.2 ms less the LM head's last row, over 36 layers")
	entry("vlm.0", StageDecode, (measDecodeMs/21-headMs)/36, "a decode step (161.1 ms / 21) less the LM head, over 36 layers")
	for _, s := range []Stage{StagePrefill, StageDecode} {
		u := by["lm_head.0"]
		w, _ := u.WorkIn(s)
		p.Units = append(p.Units, UnitTiming{Module: LMHead, Stage: s, Rows: w.Rows, WeightBytes: head.bytes(), FLOPs: head.matFLOPs(1),
			Ms: round(headMs, 5), Source: "the whole head (one row) at the measured GEMV rate, 3.40 TB/s of bf16 weights"})
	}
	entry("expert.0", StageDiffusion, (measDiffusionMs/10-actionMs)/36, "an Euler step (63.8 ms / 10) less action_in/out (roofline), over 36 layers")
	p.Source = fmt.Sprintf("Derived only from figures measured in this repository on one NVIDIA H200, 2026-11-29 "+
		"(residency/profile_h200_test.go recomputes this file; docs/planning.md explains it). "+
		"h2d_gbps: pinned host-to-device copies, DESIGN.md 'Verified there'. "+
		"roofline: the GEMV's %.1f GB/s of weights and the GEMM's %.1f TFLOP/s, bench/results/cuda-kernels.md (final run). "+
		"fixed: the primary context (139.8 - 139.3 GiB) and the cuBLAS handle (0.43 GiB) from DESIGN.md, plus what the CUDA backend charges "+
		"on top: 16 MiB for lazily loaded cuBLAS kernels, the 32 MiB cuBLAS workspace, a 2 MiB kernel-module margin (the CUBIN itself is not measured yet). "+
		"units: the standard workload's per-stage times with everything resident (bench/results/standard-workload.md: vision 256.2, prefill 109.2, "+
		"decode 161.1, diffusion 63.8 ms) divided over the units that run in each stage, the vision blocks and mergers as sums of their measured kernels "+
		"(cuda-kernels.md); each entry says how. action_in and action_out are not profiled (roofline).", gemvGBps, gemmTFLOPs)
	return p
}

// gib is x GiB in bytes, rounded.
func gib(x float64) int64 { return int64(math.Round(x * (1 << 30))) }

func round(v float64, digits int) float64 {
	var out float64
	_, _ = fmt.Sscanf(fmt.Sprintf("%.*f", digits, v), "%g", &out)
	return out
}

// TestDefaultProfileDerivation recomputes the shipped profile from the
// measured figures: profiles/h200.json must be exactly that (run with
// -update to rewrite it).
func TestDefaultProfileDerivation(t *testing.T) {
	want := deriveH200(t)
	require.NoError(t, want.Validate())
	raw, err := want.Marshal()
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile("profiles/h200.json", raw, 0o644))
	}
	got := defaultProfile(t)
	assert.Equal(t, want, got, "profiles/h200.json is stale: go test ./residency -run DefaultProfileDerivation -update")
}

// TestDefaultProfileReproducesMeasurement: with everything resident, the
// default profile predicts the measured stage times of the standard
// workload (the figures it was derived from).
func TestDefaultProfileReproducesMeasurement(t *testing.T) {
	plan, err := NewPlan(alpamayo10B(t), StandardWorkload(), defaultProfile(t), 0)
	require.NoError(t, err)
	for s, want := range map[Stage]float64{StageVision: measVisionMs, StagePrefill: measPrefillMs, StageDecode: measDecodeMs, StageDiffusion: measDiffusionMs} {
		assert.InDelta(t, want, plan.PredictedMs[s], 0.01, s)
	}
	assert.InDelta(t, plan.PreloadTotalMs, plan.TotalMs, 1e-6)
	assert.Equal(t, 2, plan.Timing["roofline"], "action_in and action_out")
	assert.Equal(t, []string{"action_in/diffusion", "action_out/diffusion"}, plan.Roofline)
	assert.Equal(t, 8, plan.Timing["scaled"], "the LM head's 4 blocks, from the whole head's time, in prefill and decode")
}
