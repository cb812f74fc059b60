package diffusion_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/cpu"
	"vlanode/diffusion"
	"vlanode/models"
	"vlanode/safetensors"
	"vlanode/tensor"
)

func TestVelocityRejectsBadInputs(t *testing.T) {
	rc := loadCase(t, "alpamayo-expert")
	ctx := context.Background()
	x := make([]float32, 2*rc.ex.Waypoints())
	bad := func(p diffusion.Prefix, x []float32, tt float32) error {
		_, err := rc.ex.Velocity(ctx, p, x, tt)
		return err
	}
	assert.ErrorIs(t, bad(rc.pre, x[:10], 0), models.ErrBadInput, "short action state")
	assert.ErrorIs(t, bad(rc.pre, x, float32(math.NaN())), models.ErrBadInput, "NaN time")

	p := rc.pre
	p.Cache = p.Cache[:1]
	assert.ErrorIs(t, bad(p, x, 0), models.ErrBadInput, "cache of too few layers")
	p = rc.pre
	p.Offset = p.Len + 2
	assert.ErrorIs(t, bad(p, x, 0), models.ErrBadInput, "offset past the sequence")

	// the cache must have room for the 64 action tokens after L
	p = rc.pre
	small, err := rc.be.Alloc("kv-cache", tensor.F32, p.Len+10, rc.kvw)
	require.NoError(t, err)
	p.Cache = append([]diffusion.KV{{K: small, V: p.Cache[0].V}}, p.Cache[1:]...)
	err = bad(p, x, 0)
	assert.ErrorIs(t, err, models.ErrBadInput)
	assert.ErrorContains(t, err, "action tokens")

	// a host cache of the wrong size, or an offset past the sequence
	kvw := rc.kvw * rc.cfg.Expert.NumHiddenLayers
	_, err = rc.ex.HostPrefix(make([]float32, kvw*p.Len-1), make([]float32, kvw*p.Len), p.Len, p.Offset, 0)
	assert.ErrorIs(t, err, models.ErrBadInput, "short host cache")
	_, err = rc.ex.HostPrefix(make([]float32, kvw*p.Len), make([]float32, kvw*p.Len), p.Len, p.Len+2, 0)
	assert.ErrorIs(t, err, models.ErrBadInput, "host prefix with its offset past the sequence")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = rc.ex.Velocity(cancelled, rc.pre, x, 0)
	assert.ErrorIs(t, err, context.Canceled)
}

// TestVelocityIgnoresHiddenRows: rows [offset, L) of the cache (what the VLM
// generated after <|traj_future_start|>) must not change the velocity, and
// the rows the expert writes are overwritten, never appended: repeating a
// call gives the same result.
func TestVelocityIgnoresHiddenRows(t *testing.T) {
	rc := loadCase(t, "alpamayo-expert")
	require.Less(t, rc.pre.Offset, rc.pre.Len, "the case must hide some rows")
	ctx := context.Background()
	x := diffusion.GaussianNoise(7, 2*rc.ex.Waypoints())
	before, err := rc.ex.Velocity(ctx, rc.pre, x, 0.3)
	require.NoError(t, err)
	for _, kv := range rc.pre.Cache {
		rows, err := rc.be.Rows(kv.K, rc.pre.Offset, rc.pre.Len-rc.pre.Offset)
		require.NoError(t, err)
		require.NoError(t, rc.be.Copy(rows, filled(t, rc, backend.Elements(rows), 1e3)))
	}
	after, err := rc.ex.Velocity(ctx, rc.pre, x, 0.3)
	require.NoError(t, err)
	assert.Equal(t, before, after)

	// unhiding them does change it
	p := rc.pre
	p.Offset = p.Len
	changed, err := rc.ex.Velocity(ctx, p, x, 0.3)
	require.NoError(t, err)
	assert.NotEqual(t, before, changed)
}

// filled is a new F32 tensor of n elements, all v.
func filled(t *testing.T, rc *refCase, n int, v float32) backend.Tensor {
	t.Helper()
	tt, err := rc.be.Alloc("test", tensor.F32, n)
	require.NoError(t, err)
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = v
	}
	require.NoError(t, rc.be.Upload(tt, buf))
	return tt
}

// TestLoadChecksShapes: a config that does not match the checkpoint fails
// at load with the tensor's name.
func TestLoadChecksShapes(t *testing.T) {
	dir := filepath.Join(referenceDir, "alpamayo-expert")
	alp, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	vlm, err := os.ReadFile(filepath.Join(dir, "vlm_config.json"))
	require.NoError(t, err)
	cfg, err := diffusion.ParseConfig(alp, vlm)
	require.NoError(t, err)
	cfg.Expert.IntermediateSize++
	be, err := cpu.New(cpu.WithThreads(1))
	require.NoError(t, err)
	defer be.Close()
	ck, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	defer ck.Close()
	_, err = diffusion.Load(models.NewLoader(be, ck), cfg)
	require.Error(t, err)
	assert.True(t, errors.Is(err, safetensors.ErrMismatch), "%v", err)
	assert.ErrorContains(t, err, "expert.layers.0.mlp.gate_proj.weight")
}

func TestClosedExpert(t *testing.T) {
	rc := loadCase(t, "alpamayo-expert")
	rc.ex.Close()
	rc.ex.Close() // idempotent
	_, err := rc.ex.Velocity(context.Background(), rc.pre, make([]float32, 128), 0)
	assert.Error(t, err)
	_, err = rc.ex.Embed(make([]float32, 128), 0)
	assert.Error(t, err)
}
