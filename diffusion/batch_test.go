package diffusion_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/diffusion"
	"vlanode/models"
	"vlanode/tensor"
)

// widePrefix is a copy of the case's prefix in caches with room for
// samples·Waypoints action tokens, its offset at offset.
func widePrefix(t *testing.T, rc *refCase, samples, offset int) diffusion.Prefix {
	t.Helper()
	p := rc.pre
	p.Offset = offset
	p.Cache = nil
	for _, kv := range rc.pre.Cache {
		var wide diffusion.KV
		for _, c := range []struct {
			dst *backend.Tensor
			src backend.Tensor
		}{{&wide.K, kv.K}, {&wide.V, kv.V}} {
			tt, err := rc.be.Alloc("kv-cache", tensor.F32, rc.pre.Len+samples*rc.ex.Waypoints(), rc.kvw)
			require.NoError(t, err)
			t.Cleanup(func() { rc.be.Free(tt) })
			src, err := rc.be.Rows(c.src, 0, rc.pre.Len)
			require.NoError(t, err)
			dst, err := rc.be.Rows(tt, 0, rc.pre.Len)
			require.NoError(t, err)
			require.NoError(t, rc.be.Copy(dst, src))
			*c.dst = tt
		}
		p.Cache = append(p.Cache, wide)
	}
	return p
}

// TestSampleBatchLoneIsSample: one Draws of one sample runs as Sample.
func TestSampleBatchLoneIsSample(t *testing.T) {
	rc := loadCase(t, "alpamayo-expert")
	ctx := context.Background()
	want, err := rc.ex.Sample(ctx, []diffusion.Prefix{rc.pre}, diffusion.SampleOptions{Seed: 5, Steps: 3})
	require.NoError(t, err)
	got, err := rc.ex.SampleBatch(ctx, []diffusion.Draws{{Prefix: rc.pre, Samples: 1, Seed: 5}}, 3)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Len(t, got[0], 1)
	assert.Equal(t, want[0], got[0][0])
}

// TestSampleBatchEqualsLoneSamples: K samples of one prefix and samples of
// another prefix, through each pass together. Each Draws' samples equal
// (bit for bit on the cpu backend) those of the Draws run alone; sample 0
// of K is the lone sample of the same seed, bit for bit; sample j > 0 is a
// lone sample of its own noise, bit for bit where the lone run hides rows
// of the cache too (its attention then sums the same blocks of keys), else
// within float32 rounding (the lone run's one block of keys is two here).
func TestSampleBatchEqualsLoneSamples(t *testing.T) {
	rc := loadCase(t, "alpamayo-expert")
	ctx := context.Background()
	const k, steps = 3, 3
	per := rc.ex.Waypoints() * diffusion.ActionDims
	a := widePrefix(t, rc, k, rc.pre.Offset)
	b := widePrefix(t, rc, 2, rc.pre.Len) // another prefix: nothing hidden
	noiseB := diffusion.GaussianNoise(99, 2*per)
	da := diffusion.Draws{Prefix: a, Samples: k, Seed: 5, Temperature: 0.8}
	db := diffusion.Draws{Prefix: b, Samples: 2, Noise: noiseB}
	got, err := rc.ex.SampleBatch(ctx, []diffusion.Draws{da, db}, steps)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Len(t, got[0], k)
	require.Len(t, got[1], 2)
	for i, d := range []diffusion.Draws{da, db} {
		alone, err := rc.ex.SampleBatch(ctx, []diffusion.Draws{d}, steps)
		require.NoError(t, err)
		assert.Equal(t, alone[0], got[i], "draws %d in a batch and alone", i)
	}

	lone := func(p diffusion.Prefix, noise []float32, temp float64) []float32 {
		out, err := rc.ex.Sample(ctx, []diffusion.Prefix{p}, diffusion.SampleOptions{Noise: noise, Steps: steps, Temperature: temp})
		require.NoError(t, err)
		return out[0]
	}
	noiseA := diffusion.GaussianNoise(5, k*per)
	for j := range k {
		assert.Equal(t, lone(a, noiseA[j*per:(j+1)*per], 0.8), got[0][j], "sample %d of the first prefix", j)
	}
	assert.Equal(t, lone(b, noiseB[:per], 0), got[1][0], "sample 0 of the second prefix")
	// one Euler step, so that the rounding is not amplified by the next
	one, err := rc.ex.SampleBatch(ctx, []diffusion.Draws{db}, 1)
	require.NoError(t, err)
	out, err := rc.ex.Sample(ctx, []diffusion.Prefix{b}, diffusion.SampleOptions{Noise: noiseB[per:], Steps: 1})
	require.NoError(t, err)
	assert.InDeltaSlice(t, out[0], one[0][1], 1e-5, "sample 1 of the second prefix, one step")
	assert.NotEqual(t, out[0], one[0][0])
	first, err := rc.ex.SampleBatch(ctx, []diffusion.Draws{{Prefix: a, Samples: 1, Seed: 5, Temperature: 0.8}}, steps)
	require.NoError(t, err)
	assert.Equal(t, first[0][0], got[0][0], "sample 0 of K is the lone sample of the seed")
	assert.NotEqual(t, got[0][0], got[0][1], "samples draw their own noise")
}

func TestSampleBatchRejects(t *testing.T) {
	rc := loadCase(t, "alpamayo-expert")
	ctx := context.Background()
	_, err := rc.ex.SampleBatch(ctx, []diffusion.Draws{{Prefix: rc.pre, Samples: 0}}, 1)
	assert.ErrorIs(t, err, models.ErrBadInput, "no samples")
	_, err = rc.ex.SampleBatch(ctx, []diffusion.Draws{{Prefix: rc.pre, Samples: 1, Noise: make([]float32, 3)}}, 1)
	assert.ErrorIs(t, err, models.ErrBadInput, "short noise")
	// the case's cache holds one sample's action tokens, not two
	_, err = rc.ex.SampleBatch(ctx, []diffusion.Draws{{Prefix: rc.pre, Samples: 2}}, 1)
	assert.ErrorIs(t, err, models.ErrBadInput, "a cache without room for the samples")
	// the Expert is usable alone afterwards
	_, err = rc.ex.SampleBatch(ctx, []diffusion.Draws{{Prefix: rc.pre, Samples: 1}}, 1)
	assert.NoError(t, err)
}
