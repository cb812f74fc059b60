package qwen3vl_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/cuda/cudatest"
	"vlanode/models/qwen3vl"
	"vlanode/safetensors"
)

// gpuVisionTol bounds the cuda backend's visual tokens against transformers'
// float32 ones, as a fraction of the case's largest magnitude: every
// product's inputs are rounded to bf16 there (as in
// models/alpamayo.TestCUDAVisionMatchesCPU), and the vision MLP's first
// product is stored in bf16 from cuBLASLt's bias+GELU epilogue.
const gpuVisionTol = 0.02

// TestCUDAVisionMatchesTransformers encodes the reference cases' images on
// the GPU, with the biases and the tanh GELU in cuBLASLt's epilogues and
// with kernels of ours instead, and checks the visual tokens and the
// deepstack features against transformers' outputs.
func TestCUDAVisionMatchesTransformers(t *testing.T) {
	be := cudatest.Open(t)
	for _, c := range referenceCases(t) {
		for _, epi := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/epilogues=%v", c, epi), func(t *testing.T) {
				require.NoError(t, be.SetEpilogues(epi))
				defer be.SetEpilogues(true)
				ck, err := safetensors.Open(c.dir)
				require.NoError(t, err)
				defer ck.Close()
				m, err := qwen3vl.Load(be, c.dir, ck)
				require.NoError(t, err)
				defer m.Close()
				f, err := m.Vision.Encode(context.Background(), c.prompt.Images)
				require.NoError(t, err)
				defer f.Free(be)
				check := func(what string, got, want []float32) {
					require.Len(t, got, len(want), what)
					var diff, scale float64
					for i := range want {
						diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
						scale = math.Max(scale, math.Abs(float64(want[i])))
					}
					t.Logf("%s: max |cuda - transformers| = %.3g = %.2f%% of max %.3g", what, diff, 100*diff/scale, scale)
					require.LessOrEqual(t, diff, gpuVisionTol*scale, what)
				}
				want, _ := expectedF32(t, c, "image_embeds")
				check("image_embeds", download(t, be, f.Embeds), want)
				ds, shape := expectedF32(t, c, "deepstack_embeds")
				n := shape[1] * shape[2]
				_, mergers := m.Config.Vision.DeepstackOrder()
				require.Len(t, f.Deepstack, len(mergers))
				for k, j := range mergers {
					check(fmt.Sprintf("deepstack %d", k), download(t, be, f.Deepstack[k]), ds[j*n:(j+1)*n])
				}
			})
		}
	}
}
