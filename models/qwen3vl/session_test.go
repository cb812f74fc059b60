package qwen3vl_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/models/qwen3vl"
	"vlanode/tensor"
)

// mainCase loads the several-images case of the untied checkpoint.
func mainCase(t *testing.T) (*qwen3vl.Model, backend.Backend, qwen3vl.Prompt) {
	t.Helper()
	dir := filepath.Join(referenceDir, "qwen3vl-d4-untied")
	p, err := qwen3vl.ReadPrompt(filepath.Join(dir, "inputs.safetensors"))
	require.NoError(t, err)
	m, be := loadModel(t, dir)
	return m, be, p
}

func prefill(t *testing.T, m *qwen3vl.Model, p qwen3vl.Prompt, extra int) (*qwen3vl.Session, []float32, error) {
	t.Helper()
	s, err := m.NewSession(len(p.IDs) + extra)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	logits, err := s.Prefill(context.Background(), p, true)
	return s, logits, err
}

func TestPrefillWithFeaturesEqualsImages(t *testing.T) {
	m, be, p := mainCase(t)
	_, want, err := prefill(t, m, p, 0)
	require.NoError(t, err)
	f, err := m.Vision.Encode(context.Background(), p.Images)
	require.NoError(t, err)
	defer f.Free(be)
	assert.Equal(t, 15, f.Tokens())
	q := p
	q.Images, q.Features = nil, f
	_, got, err := prefill(t, m, q, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	q.TokenTypes = nil // derived from image_token_id
	_, got, err = prefill(t, m, q, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// TestVisionDevicePixels embeds pixel values already on the backend
// (Images.Device, as vision.DeviceProcessor makes them): the same features
// as from Pixels, Done called once, and a tensor of the wrong shape
// refused as bad input.
func TestVisionDevicePixels(t *testing.T) {
	m, be, p := mainCase(t)
	want, err := m.Vision.Encode(context.Background(), p.Images)
	require.NoError(t, err)
	defer want.Free(be)
	dim := len(p.Images.Pixels) / p.Images.Patches()
	px, err := be.Alloc("activations", tensor.F32, p.Images.Patches(), dim)
	require.NoError(t, err)
	defer be.Free(px)
	require.NoError(t, be.Upload(px, p.Images.Pixels))
	done := 0
	im := &qwen3vl.Images{Grids: p.Images.Grids, Device: px, Done: func() { done++ }}
	got, err := m.Vision.Encode(context.Background(), im)
	require.NoError(t, err)
	defer got.Free(be)
	assert.Equal(t, 1, done)
	assert.Equal(t, download(t, be, want.Embeds), download(t, be, got.Embeds))
	for k := range want.Deepstack {
		assert.Equal(t, download(t, be, want.Deepstack[k]), download(t, be, got.Deepstack[k]), "deepstack %d", k)
	}

	short, err := be.Rows(px, 0, p.Images.Patches()-1)
	require.NoError(t, err)
	_, err = m.Vision.Encode(context.Background(), &qwen3vl.Images{Grids: p.Images.Grids, Device: short})
	assert.ErrorIs(t, err, models.ErrBadInput)
	assert.ErrorContains(t, err, "pixel values on the device are F32")
}

func TestKVCacheAccess(t *testing.T) {
	m, _, p := mainCase(t)
	s, _, err := prefill(t, m, p, 4)
	require.NoError(t, err)
	c := m.Config.Text
	T := len(p.IDs)
	assert.Equal(t, T, s.Len())
	assert.Equal(t, T+4, s.Cap())
	assert.Equal(t, -7, s.RopeDelta())
	assert.Equal(t, T-7, s.NextPosition())
	for l := range c.NumHiddenLayers {
		k, v := s.Cache(l)
		assert.Equal(t, []int{T + 4, c.NumKeyValueHeads * c.HeadDim}, k.Shape())
		assert.Equal(t, k.Shape(), v.Shape())
	}
	// Decoding, truncating and decoding the same token again gives the same
	// logits: the rows past Len() are overwritten.
	ctx := context.Background()
	a, err := s.Decode(ctx, []int32{5, 6}, true)
	require.NoError(t, err)
	require.NoError(t, s.Truncate(T))
	b, err := s.Decode(ctx, []int32{5, 6}, true)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.Error(t, s.Truncate(T+3))
}

func TestPrefillErrors(t *testing.T) {
	m, _, p := mainCase(t)
	img := int32(m.Config.ImageTokenID)
	first := slices.Index(p.IDs, img)
	cases := []struct {
		name string
		edit func(p *qwen3vl.Prompt)
		want string
	}{
		{"types disagree with ids", func(p *qwen3vl.Prompt) {
			p.TokenTypes = slices.Clone(p.TokenTypes)
			p.TokenTypes[0] = qwen3vl.ImageToken
		}, "must have type 1"},
		{"one image token short", func(p *qwen3vl.Prompt) {
			p.IDs = slices.Delete(slices.Clone(p.IDs), first, first+1)
			p.TokenTypes = slices.Delete(slices.Clone(p.TokenTypes), first, first+1)
		}, "image 0 has 5 image tokens"},
		{"types of another length", func(p *qwen3vl.Prompt) { p.TokenTypes = p.TokenTypes[1:] }, "token types for"},
		{"pixels short of a patch", func(p *qwen3vl.Prompt) {
			im := *p.Images
			im.Pixels = im.Pixels[:len(im.Pixels)-m.Config.Vision.PatchDim()]
			p.Images = &im
		}, "pixel values hold 59 patches, the grids (t·h·w summed) 60"},
		{"odd grid", func(p *qwen3vl.Prompt) {
			im := *p.Images
			im.Grids = slices.Clone(im.Grids)
			im.Grids[0] = qwen3vl.Grid{T: 1, H: 3, W: 8}
			p.Images = &im
		}, "not divisible by spatial_merge_size 2"},
		{"image tokens without images", func(p *qwen3vl.Prompt) { p.Images = nil }, "has no image"},
		{"both images and features", func(p *qwen3vl.Prompt) { p.Features = &qwen3vl.Features{} }, "not both"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := p
			c.edit(&q)
			_, _, err := prefill(t, m, q, 0)
			assert.ErrorIs(t, err, models.ErrBadInput)
			assert.ErrorContains(t, err, c.want)
		})
	}
	t.Run("prefill twice", func(t *testing.T) {
		s, _, err := prefill(t, m, p, len(p.IDs))
		require.NoError(t, err)
		_, err = s.Prefill(context.Background(), p, false)
		assert.ErrorContains(t, err, "holds")
	})
}

func TestVisionPassOrder(t *testing.T) {
	m, _, p := mainCase(t)
	pass, err := m.Vision.Begin(p.Images)
	require.NoError(t, err)
	defer pass.Close()
	_, err = pass.Finish()
	assert.ErrorContains(t, err, "after 0 of 4 blocks")
	for pass.Next() < m.Config.Vision.Depth {
		require.NoError(t, pass.RunBlock(context.Background()))
	}
	assert.ErrorContains(t, pass.RunBlock(context.Background()), "no vision block left")
	assert.Equal(t, []int{1, 2, 3}, m.Vision.DeepstackBlocks())
}

func TestUnitsInExecutionOrder(t *testing.T) {
	m, _, _ := mainCase(t)
	var names []string
	for _, u := range m.Units() {
		names = append(names, u.Name)
	}
	want := []string{"patch_embed.0", "vision.0.attn", "vision.0.mlp", "vision.1.attn", "vision.1.mlp", "deepstack.0",
		"vision.2.attn", "vision.2.mlp", "deepstack.1", "vision.3.attn", "vision.3.mlp", "deepstack.2", "merger.0",
		"embedding.0", "vlm.0.attn", "vlm.0.mlp", "vlm.1.attn", "vlm.1.mlp", "vlm.2.attn", "vlm.2.mlp", "vlm.3.attn",
		"vlm.3.mlp", "lm_head.0"}
	assert.Equal(t, want, names)
}

func TestPrefillFeatureAndCapacityErrors(t *testing.T) {
	m, be, p := mainCase(t)
	f, err := m.Vision.Encode(context.Background(), p.Images)
	require.NoError(t, err)
	defer f.Free(be)
	q := p
	q.Images = nil
	q.Features = &qwen3vl.Features{Grids: f.Grids, Embeds: f.Embeds, Deepstack: f.Deepstack[:2]}
	_, _, err = prefill(t, m, q, 0)
	assert.ErrorContains(t, err, "2 deepstack features, the config has 3")
	q.Features = &qwen3vl.Features{Grids: f.Grids[:2], Embeds: f.Embeds, Deepstack: f.Deepstack}
	_, _, err = prefill(t, m, q, 0)
	assert.ErrorContains(t, err, "for 14 visual tokens")

	s, err := m.NewSession(len(p.IDs) - 1)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Prefill(context.Background(), p, false)
	assert.ErrorContains(t, err, "does not fit")
}
