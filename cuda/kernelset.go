package cuda

import (
	"fmt"
	"strings"

	"vlanode/cuda/driver"
)

// kernelSet holds the kernels of the module (kernels/*.cu).
type kernelSet struct {
	f32ToBF16, f32ToF16, addBias driver.Function // convert.cu
	toF32                        driver.Function // convert.cu
	rowsAtBF16, rowsAtF32        driver.Function // convert.cu
	add, silu, siluMul, gelu     driver.Function // elementwise.cu
	argmax                       driver.Function // elementwise.cu
	fourier, eulerStep           driver.Function // flow.cu
	resizeH, patchify            driver.Function // imageprep.cu
	// elementwise.cu: SiLUMul and the bias with its GELU, rounded to 16
	// bits for the next product ([0] bf16, [1] f16).
	siluMul16, addBias16       [2]driver.Function
	rmsNorm, layerNorm         driver.Function    // norm.cu
	rmsNorm16                  [2]driver.Function // norm.cu, written in bf16 [0] or f16 [1]
	rmsNormRows, layerNormRows driver.Function    // norm.cu, a warp per row
	rope, attention, embedding driver.Function    // rope.cu, attention.cu, embedding.cu

	// norm.cu, a warp per row held in registers: [v-layerNormRegMin] for
	// rows of ceil(n/128) = v float4s a lane (layerNormReg).
	layerNormReg [layerNormRegMax/128 - layerNormRegMin + 1]driver.Function

	// gemv.cu: [0] bf16, [1] f16 weights; [m-1] for m rows of x.
	gemv [2][gemvMaxM]driver.Function
	// gemv.cu: three projections of one row, and gate·up with SiLU
	// ([0] bf16, [1] f16 weights).
	gemv3, gemvSwiGLU [2]driver.Function
	// gemv_stream.cu: the same products with the weight streamed by
	// bulk copies ([0] bf16, [1] f16 weights, x held as floats; [2], [3]
	// the same with x held packed in 16 bits, unless gpu.gstreamFloatX).
	gemvStream [4]driver.Function
	// gemm_rows.cu: products of 2 to 64 rows ([0] bf16, [1] f16 weights).
	gemmRows   [2]driver.Function
	gemmRowsWG [2]driver.Function // sm_90a: on wgmma (gpu.rowsWG)
	// fused.cu.
	addRMSNorm, qkNormRope, qkNormRopeCache driver.Function
	biasResidual                            driver.Function // convert.cu
	// flash.cu, by padded head dim (flashHeadDims): loading tiles through
	// registers, and pipelined over bf16 copies of K and V.
	flash, flashPipe       [len(flashHeadDims)]driver.Function
	flashWG                [len(flashHeadDims)]driver.Function // sm_90a: vla_flash_pipe_* on wgmma (gpu.flashWG)
	kvToBF16, kvBF16ToBF16 driver.Function
	// decode.cu: float or bf16 K and V.
	attnDecode, attnDecodeBF16, attnCombine driver.Function
	attnDecodeQK                            driver.Function    // vla_attn_decode_bf16_g4_qk
	attnDecodeBF16G                         [3]driver.Function // for 1, 2 and 4 query heads a KV head
	attnCombineRows                         [2]driver.Function // a warp a row, up to 16 and 32 splits
	// bench.cu: for benchmarks and tests.
	fillRandom, readStream, spin driver.Function
	// bf16z.cu: compressed units into their slots (ZDecoder).
	zDecode, zDecodeSerial driver.Function
}

// kernelEntry names one kernel of the set.
type kernelEntry struct {
	f    *driver.Function
	name string // extern "C" name in kernels/*.cu
}

// entries lists every kernel of k with its name.
func (k *kernelSet) entries() []kernelEntry {
	e := []kernelEntry{
		{&k.f32ToBF16, "vla_f32_to_bf16"},
		{&k.f32ToF16, "vla_f32_to_f16"},
		{&k.toF32, "vla_to_f32"},
		{&k.rowsAtBF16, "vla_rows_at_bf16"},
		{&k.rowsAtF32, "vla_rows_at_f32"},
		{&k.addBias, "vla_add_bias"},
		{&k.add, "vla_add"},
		{&k.silu, "vla_silu"},
		{&k.siluMul, "vla_silu_mul"},
		{&k.argmax, "vla_argmax"},
		{&k.fourier, "vla_fourier"},
		{&k.eulerStep, "vla_euler_step"},
		{&k.resizeH, "vla_resize_h"},
		{&k.patchify, "vla_patchify"},
		{&k.gelu, "vla_gelu"},
		{&k.siluMul16[0], "vla_silu_mul_bf16"},
		{&k.siluMul16[1], "vla_silu_mul_f16"},
		{&k.addBias16[0], "vla_add_bias_bf16"},
		{&k.addBias16[1], "vla_add_bias_f16"},
		{&k.rmsNorm, "vla_rmsnorm"},
		{&k.rmsNorm16[0], "vla_rmsnorm_bf16"},
		{&k.rmsNorm16[1], "vla_rmsnorm_f16"},
		{&k.layerNorm, "vla_layernorm"},
		{&k.rmsNormRows, "vla_rmsnorm_rows"},
		{&k.layerNormRows, "vla_layernorm_rows"},
		{&k.rope, "vla_rope"},
		{&k.attention, "vla_attention"},
		{&k.embedding, "vla_embedding"},
		{&k.attnDecode, "vla_attn_decode"},
		{&k.attnDecodeBF16, "vla_attn_decode_bf16"},
		{&k.attnCombine, "vla_attn_combine"},
		{&k.attnCombineRows[0], "vla_attn_combine_rows_16"},
		{&k.attnCombineRows[1], "vla_attn_combine_rows_32"},
		{&k.attnDecodeBF16G[0], "vla_attn_decode_bf16_g1"},
		{&k.attnDecodeBF16G[1], "vla_attn_decode_bf16_g2"},
		{&k.attnDecodeBF16G[2], "vla_attn_decode_bf16_g4"},
		{&k.attnDecodeQK, "vla_attn_decode_bf16_g4_qk"},
		{&k.fillRandom, "vla_fill_random"},
		{&k.readStream, "vla_read_stream"},
		{&k.spin, "vla_spin"},
		{&k.kvToBF16, "vla_kv_to_bf16"},
		{&k.kvBF16ToBF16, "vla_kv_bf16_to_bf16"},
		{&k.gemv3[0], "vla_gemv3_bf16"},
		{&k.gemv3[1], "vla_gemv3_f16"},
		{&k.gemvSwiGLU[0], "vla_gemv_swiglu_bf16"},
		{&k.gemvSwiGLU[1], "vla_gemv_swiglu_f16"},
		{&k.gemvStream[0], "vla_gemv_stream_bf16"},
		{&k.gemvStream[1], "vla_gemv_stream_f16"},
		{&k.gemvStream[2], "vla_gemv_stream_bf16_xh"},
		{&k.gemvStream[3], "vla_gemv_stream_f16_xh"},
		{&k.gemmRows[0], "vla_gemm_rows_bf16"},
		{&k.gemmRows[1], "vla_gemm_rows_f16"},
		{&k.gemmRowsWG[0], "vla_gemm_rows_wg_bf16"},
		{&k.gemmRowsWG[1], "vla_gemm_rows_wg_f16"},
		{&k.flashWG[0], "vla_flash_wg_80"},
		{&k.flashWG[1], "vla_flash_wg_128"},
		{&k.addRMSNorm, "vla_add_rmsnorm"},
		{&k.qkNormRope, "vla_qk_norm_rope"},
		{&k.qkNormRopeCache, "vla_qk_norm_rope_cache"},
		{&k.biasResidual, "vla_bias_residual"},
		{&k.zDecode, "vla_z_decode"},
		{&k.zDecodeSerial, "vla_z_decode_serial"},
	}
	for t, name := range []string{"bf16", "f16"} {
		for m := 1; m <= gemvMaxM; m++ {
			e = append(e, kernelEntry{&k.gemv[t][m-1], fmt.Sprintf("vla_gemv_%s_%d", name, m)})
		}
	}
	for i := range k.layerNormReg {
		e = append(e, kernelEntry{&k.layerNormReg[i], fmt.Sprintf("vla_layernorm_reg_%d", layerNormRegMin+i)})
	}
	for i, hd := range flashHeadDims {
		e = append(e, kernelEntry{&k.flash[i], fmt.Sprintf("vla_flash_%d", hd)},
			kernelEntry{&k.flashPipe[i], fmt.Sprintf("vla_flash_pipe_%d", hd)})
	}
	return e
}

// load looks up every kernel in m.
func (k *kernelSet) load(d *driver.Driver, m driver.Module) error {
	for _, e := range k.entries() {
		f, err := d.Function(m, e.name)
		if err != nil {
			return fmt.Errorf("cuda: kernel: %w", err)
		}
		*e.f = f
	}
	return nil
}

// Launch shapes.
const (
	threadsPerBlock = 256     // of elementwise and row kernels
	maxGridBlocks   = 1 << 16 // grid-stride kernels loop past this
)

// elementwiseGrid is the grid of a grid-stride kernel over n items.
func elementwiseGrid(n int64) driver.Dim3 {
	blocks := min((n+threadsPerBlock-1)/threadsPerBlock, maxGridBlocks)
	return driver.Dim3{uint32(max(blocks, 1)), 1, 1}
}

// block1D is a one-dimensional block of t threads.
func block1D(t int) driver.Dim3 { return driver.Dim3{uint32(t), 1, 1} }

// launch queues f on the stream with the parameters in g.args, which the
// caller built after g.args.Reset().
func (g *gpu) launch(name string, f driver.Function, grid, block driver.Dim3, sharedBytes uint32) error {
	for _, s := range g.skipOps { // SetSkipOps: a diagnostic
		if strings.Contains(name, s) {
			return nil
		}
	}
	return g.traced(func() string { return fmt.Sprintf("%s grid %d×%d×%d", name, grid[0], grid[1], grid[2]) }, func() error {
		var err error
		if g.pdl { // every kernel of the module starts with vla_pdl_enter
			err = g.drv.LaunchPDL(f, grid, block, sharedBytes, g.stream, g.args)
		} else {
			err = g.drv.Launch(f, grid, block, sharedBytes, g.stream, g.args)
		}
		if err != nil {
			return fmt.Errorf("cuda: %s: %w", name, err)
		}
		return nil
	})
}

// elementwise launches a grid-stride kernel over n items.
func (g *gpu) elementwise(name string, f driver.Function, n int64) error {
	return g.launch(name, f, elementwiseGrid(n), block1D(threadsPerBlock), 0)
}
