package qwen3vl

import (
	"context"
	"fmt"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/models/qwen3"
)

// Prompt is the first input of a session: token ids with image tokens
// (image_token_id) where the visual tokens go, and the images, either as
// pixels to encode or as features already encoded.
type Prompt struct {
	IDs []int32
	// TokenTypes is mm_token_type_ids (0 text, 1 image) for every id; nil
	// derives it from the ids. Given, it must mark exactly the image tokens.
	TokenTypes []int32
	// Images are encoded by the vision tower during Prefill.
	Images *Images
	// Features are used as they are (and stay the caller's) instead.
	Features *Features
}

// promptFeatures returns the prompt's visual features: encoded from its
// images (release frees them), or the caller's (release does nothing), or
// nil for a text-only prompt.
func (m *Model) promptFeatures(ctx context.Context, p Prompt, types []int32) (f *Features, release func(), err error) {
	release = func() {}
	switch {
	case p.Images != nil && p.Features != nil:
		return nil, release, fmt.Errorf("qwen3vl: a prompt takes images or features, not both: %w", models.ErrBadInput)
	case p.Features != nil:
		return p.Features, release, m.checkFeatures(p.Features)
	case p.Images == nil:
		return nil, release, nil
	}
	if err := CheckImages(&m.Config.Vision, p.Images); err != nil {
		return nil, release, err
	}
	if _, err := imageRuns(types, p.Images.Grids, m.Config.Vision.SpatialMergeSize); err != nil {
		return nil, release, err // before the encoder runs
	}
	if f, err = m.Vision.Encode(ctx, p.Images); err != nil {
		return nil, release, err
	}
	return f, func() { f.Free(m.be) }, nil
}

// embedPrompt embeds ids and puts the visual tokens in place of the image
// tokens (transformers' masked_scatter: image tokens in sequence order take
// the visual tokens in order).
func (m *Model) embedPrompt(ids []int32, runs []imageRun, f *Features) (backend.Tensor, error) {
	x, err := m.Text.EmbedTokens(ids)
	if err != nil || f == nil {
		return x, err
	}
	place := func(dst, _, src backend.Tensor) error { return m.be.Copy(dst, src) }
	if err := eachRun(m.be, runs, x, f.Embeds, place); err != nil {
		m.be.Free(x)
		return nil, fmt.Errorf("qwen3vl: placing visual tokens: %w", err)
	}
	return x, nil
}

// deepstackHook adds DeepStack feature k to the image tokens' hidden
// states after text layer k.
func (m *Model) deepstackHook(runs []imageRun, f *Features) qwen3.LayerHook {
	return func(layer int, x backend.Tensor) error {
		if f == nil || layer >= len(f.Deepstack) {
			return nil
		}
		return eachRun(m.be, runs, x, f.Deepstack[layer], m.be.Add)
	}
}

// checkTypes returns the prompt's token types, derived or checked against
// the ids.
func (m *Model) checkTypes(p Prompt) ([]int32, error) {
	if len(p.IDs) == 0 {
		return nil, fmt.Errorf("qwen3vl: no tokens: %w", models.ErrBadInput)
	}
	img := m.Config.ImageTokenID
	if p.TokenTypes == nil {
		return TokenTypes(p.IDs, img), nil
	}
	if len(p.TokenTypes) != len(p.IDs) {
		return nil, fmt.Errorf("qwen3vl: %d token types for %d tokens: %w", len(p.TokenTypes), len(p.IDs), models.ErrBadInput)
	}
	for i, t := range p.TokenTypes {
		if isImg := int(p.IDs[i]) == img; isImg != (t == ImageToken) {
			return nil, fmt.Errorf("qwen3vl: token %d (id %d) has type %d; image_token_id %d must have type %d and only it: %w",
				i, p.IDs[i], t, img, ImageToken, models.ErrBadInput)
		}
	}
	return p.TokenTypes, nil
}

// checkFeatures checks caller-given features against the config.
func (m *Model) checkFeatures(f *Features) error {
	c := m.Config
	if err := CheckGrids(&c.Vision, f.Grids); err != nil {
		return err
	}
	n := 0
	for _, g := range f.Grids {
		n += g.Tokens(c.Vision.SpatialMergeSize)
	}
	rows, cols := backend.Matrix(f.Embeds)
	if rows != n || cols != c.Text.HiddenSize {
		return fmt.Errorf("qwen3vl: features %v for %d visual tokens of %d: %w", f.Embeds.Shape(), n, c.Text.HiddenSize, models.ErrBadInput)
	}
	if len(f.Deepstack) != len(c.Vision.DeepstackVisualIndexes) {
		return fmt.Errorf("qwen3vl: %d deepstack features, the config has %d: %w", len(f.Deepstack), len(c.Vision.DeepstackVisualIndexes), models.ErrBadInput)
	}
	for k, d := range f.Deepstack {
		if r, cc := backend.Matrix(d); r != rows || cc != cols {
			return fmt.Errorf("qwen3vl: deepstack feature %d is %v, want [%d, %d]: %w", k, d.Shape(), rows, cols, models.ErrBadInput)
		}
	}
	return nil
}

// eachRun applies op(dst rows of run, dst rows, src rows) for every image
// run: x's rows [Start, Start+Len) and src's rows [Offset, Offset+Len).
func eachRun(be backend.Backend, runs []imageRun, x, src backend.Tensor, op func(dst, a, b backend.Tensor) error) error {
	for _, r := range runs {
		dst, err := be.Rows(x, r.Start, r.Len)
		if err != nil {
			return err
		}
		part, err := be.Rows(src, r.Offset, r.Len)
		if err != nil {
			return err
		}
		if err := op(dst, dst, part); err != nil {
			return err
		}
	}
	return nil
}
