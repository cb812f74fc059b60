package qwen3vl

import (
	"fmt"
	"math"

	"vlanode/models"
	"vlanode/safetensors"
	"vlanode/tensor"
)

// ReadPrompt reads a prompt from a safetensors file with the inputs of
// transformers' Qwen3VLForConditionalGeneration: input_ids (int64 [1, T]),
// optional mm_token_type_ids (int64 [1, T]) and optional pixel_values
// (float32 [patches, PatchDim]) with image_grid_thw (int64 [images, 3]),
// which come together. Shapes are checked here; Prefill checks the rest
// against the model.
func ReadPrompt(path string) (Prompt, error) {
	f, err := safetensors.OpenFile(path)
	if err != nil {
		return Prompt{}, err
	}
	defer f.Close()
	var p Prompt
	ids, err := readTokenRow(f, "input_ids", "token id", -1)
	if err != nil {
		return Prompt{}, err
	}
	p.IDs = ids
	if f.Has("mm_token_type_ids") {
		if p.TokenTypes, err = readTokenRow(f, "mm_token_type_ids", "token type", len(ids)); err != nil {
			return Prompt{}, err
		}
	}
	hasPix, hasGrid := f.Has("pixel_values"), f.Has("image_grid_thw")
	if hasPix != hasGrid {
		return Prompt{}, fmt.Errorf("%s: pixel_values and image_grid_thw come together (pixel_values %v, image_grid_thw %v): %w", path, hasPix, hasGrid, models.ErrBadInput)
	}
	if !hasPix {
		return p, nil
	}
	im := &Images{}
	gi, err := f.Tensor("image_grid_thw")
	if err != nil {
		return Prompt{}, err
	}
	if (gi.DType != tensor.I64 && gi.DType != tensor.I32) || len(gi.Shape) != 2 || gi.Shape[1] != 3 || gi.Shape[0] == 0 {
		return Prompt{}, fmt.Errorf("%s: image_grid_thw is %v%v, want int64 [images, 3]: %w", path, gi.DType, gi.Shape, models.ErrBadInput)
	}
	g, err := gi.I64()
	if err != nil {
		return Prompt{}, err
	}
	for i := 0; i < len(g); i += 3 {
		for _, v := range g[i : i+3] {
			if v <= 0 || v > math.MaxInt32 {
				return Prompt{}, fmt.Errorf("%s: image_grid_thw[%d] = %v must be positive: %w", path, i/3, g[i:i+3], models.ErrBadInput)
			}
		}
		im.Grids = append(im.Grids, Grid{T: int(g[i]), H: int(g[i+1]), W: int(g[i+2])})
	}
	pi, err := f.Tensor("pixel_values")
	if err != nil {
		return Prompt{}, err
	}
	if !pi.DType.IsFloat() || len(pi.Shape) != 2 {
		return Prompt{}, fmt.Errorf("%s: pixel_values is %v%v, want float32 [patches, channels·temporal_patch·patch²]: %w", path, pi.DType, pi.Shape, models.ErrBadInput)
	}
	if pi.Shape[0] != im.Patches() {
		return Prompt{}, fmt.Errorf("%s: pixel_values has %d patches, image_grid_thw's t·h·w add up to %d: %w", path, pi.Shape[0], im.Patches(), models.ErrBadInput)
	}
	if im.Pixels, err = pi.F32(); err != nil {
		return Prompt{}, err
	}
	p.Images = im
	return p, nil
}

// readTokenRow reads an integer tensor [1, T] (T = want unless want < 0)
// as int32 values.
func readTokenRow(f *safetensors.File, name, what string, want int) ([]int32, error) {
	info, err := f.Tensor(name)
	if err != nil {
		return nil, err
	}
	if info.DType != tensor.I64 && info.DType != tensor.I32 {
		return nil, fmt.Errorf("%s: %s has dtype %v, want I64: %w", f.Path(), name, info.DType, models.ErrBadInput)
	}
	if len(info.Shape) != 2 || info.Shape[0] != 1 || info.Shape[1] == 0 || want >= 0 && info.Shape[1] != want {
		exp := "[1, T] with T > 0"
		if want >= 0 {
			exp = fmt.Sprintf("[1, %d] like input_ids", want)
		}
		return nil, fmt.Errorf("%s: %s has shape %v, want %s: %w", f.Path(), name, info.Shape, exp, models.ErrBadInput)
	}
	raw, err := info.I64()
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(raw))
	for i, v := range raw {
		if v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("%s: %s[0][%d] = %d is not a %s: %w", f.Path(), name, i, v, what, models.ErrBadInput)
		}
		out[i] = int32(v)
	}
	return out, nil
}
