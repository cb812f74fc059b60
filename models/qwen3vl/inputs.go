package qwen3vl

import (
	"fmt"

	"vlanode/backend"
	"vlanode/configs"
	"vlanode/models"
	"vlanode/tensor"
)

// Grid is one image's patch grid, a row of transformers' image_grid_thw:
// T frames (of temporal_patch_size each) of H×W patches.
type Grid struct{ T, H, W int }

// Patches is the number of patches (pixel_values rows) of the grid.
func (g Grid) Patches() int { return g.T * g.H * g.W }

// Tokens is the number of visual tokens the grid becomes after the
// merge×merge patch merger.
func (g Grid) Tokens(merge int) int { return g.Patches() / (merge * merge) }

// Images is a batch of images preprocessed as transformers' Qwen3-VL
// processor does: Pixels is pixel_values, [sum of patches, PatchDim]
// row-major, each image's patches in merge-block order (rows of a
// merge×merge block are consecutive), images in prompt order.
type Images struct {
	Pixels []float32
	Grids  []Grid
	// Device, when set, holds the pixel values on the model's backend
	// already ([Patches, PatchDim] F32, e.g. from vision.DeviceProcessor),
	// and Pixels is not read. Done, when set, is called once the vision
	// embedding has queued its last read of them, so that their memory can
	// go before the rest of the model runs.
	Device backend.Tensor
	Done   func()
}

// Patches is the total patch count of the grids.
func (im *Images) Patches() int {
	n := 0
	for _, g := range im.Grids {
		n += g.Patches()
	}
	return n
}

// CheckGrids validates grids against the vision config: positive sizes,
// heights and widths divisible by the merge size.
func CheckGrids(v *configs.Qwen3VLVision, grids []Grid) error {
	if len(grids) == 0 {
		return fmt.Errorf("qwen3vl: no images: %w", models.ErrBadInput)
	}
	m := v.SpatialMergeSize
	for i, g := range grids {
		if g.T <= 0 || g.H <= 0 || g.W <= 0 {
			return fmt.Errorf("qwen3vl: image %d has grid (t, h, w) = (%d, %d, %d); all must be positive: %w", i, g.T, g.H, g.W, models.ErrBadInput)
		}
		if g.H%m != 0 || g.W%m != 0 {
			return fmt.Errorf("qwen3vl: image %d has a %d×%d patch grid, not divisible by spatial_merge_size %d: %w", i, g.H, g.W, m, models.ErrBadInput)
		}
	}
	return nil
}

// CheckImages validates a batch of images: its grids, and a pixel count of
// exactly the grids' patches times PatchDim.
func CheckImages(v *configs.Qwen3VLVision, im *Images) error {
	if err := CheckGrids(v, im.Grids); err != nil {
		return err
	}
	if im.Device != nil {
		if r, c := backend.Matrix(im.Device); im.Device.DType() != tensor.F32 || r != im.Patches() || c != v.PatchDim() {
			return fmt.Errorf("qwen3vl: pixel values on the device are %v%v, want F32 [%d %d] (the grids' patches, in_channels·temporal_patch_size·patch_size²): %w",
				im.Device.DType(), im.Device.Shape(), im.Patches(), v.PatchDim(), models.ErrBadInput)
		}
		return nil
	}
	if want := im.Patches() * v.PatchDim(); len(im.Pixels) != want {
		if len(im.Pixels)%v.PatchDim() == 0 {
			return fmt.Errorf("qwen3vl: pixel values hold %d patches, the grids (t·h·w summed) %d: %w", len(im.Pixels)/v.PatchDim(), im.Patches(), models.ErrBadInput)
		}
		return fmt.Errorf("qwen3vl: %d pixel values are not rows of %d (in_channels·temporal_patch_size·patch_size²): %w", len(im.Pixels), v.PatchDim(), models.ErrBadInput)
	}
	return nil
}

// frameSegments returns the cumulative boundaries of the frames of grids
// (transformers' cu_seqlens): every frame of every image attends only to
// itself in the vision encoder.
func frameSegments(grids []Grid) []int {
	seg := []int{0}
	for _, g := range grids {
		for range g.T {
			seg = append(seg, seg[len(seg)-1]+g.H*g.W)
		}
	}
	return seg
}
