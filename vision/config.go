package vision

import "fmt"

// Config holds the settings of the Qwen2-VL/Qwen3-VL image processor, named
// after transformers' Qwen2VLImageProcessor keyword arguments. Resizing
// (bicubic, antialiased), rescaling and normalizing are always on, as in
// every Qwen-VL checkpoint.
type Config struct {
	PatchSize         int        // patch_size: side of a square patch, pixels
	TemporalPatchSize int        // temporal_patch_size: frames a patch spans; a still image is repeated to fill them
	MergeSize         int        // merge_size: patches merged into one token along each side
	MinPixels         int        // min_pixels (size.shortest_edge): fewest pixels after resizing
	MaxPixels         int        // max_pixels (size.longest_edge): most pixels after resizing
	RescaleFactor     float64    // rescale_factor: multiplies the 0..255 values
	ImageMean         [3]float64 // image_mean, per channel (R, G, B), after rescaling
	ImageStd          [3]float64 // image_std, per channel (R, G, B), after rescaling
}

// AlpamayoConfig returns the processor settings Alpamayo-R1 uses: the
// Qwen3-VL processor (patch 16, temporal patch 2, merge 2, mean and std 0.5)
// with min_pixels 163840 and max_pixels 196608, which turn a 1920×1080
// frame into 576×320 pixels, 720 patches and 180 tokens.
func AlpamayoConfig() Config {
	return Config{
		PatchSize:         16,
		TemporalPatchSize: 2,
		MergeSize:         2,
		MinPixels:         163840,
		MaxPixels:         196608,
		RescaleFactor:     1.0 / 255,
		ImageMean:         [3]float64{0.5, 0.5, 0.5},
		ImageStd:          [3]float64{0.5, 0.5, 0.5},
	}
}

// Factor is the multiple both resized sides are rounded to:
// PatchSize × MergeSize.
func (c Config) Factor() int { return c.PatchSize * c.MergeSize }

// RowSize is the length of one row of pixel values, one patch:
// 3 channels × TemporalPatchSize × PatchSize².
func (c Config) RowSize() int { return 3 * c.TemporalPatchSize * c.PatchSize * c.PatchSize }

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.PatchSize < 1 || c.TemporalPatchSize < 1 || c.MergeSize < 1:
		return fmt.Errorf("vision: config: patch %d, temporal patch %d and merge %d must be positive", c.PatchSize, c.TemporalPatchSize, c.MergeSize)
	case c.MinPixels < 0 || c.MaxPixels < c.MinPixels:
		return fmt.Errorf("vision: config: need 0 ≤ min_pixels %d ≤ max_pixels %d", c.MinPixels, c.MaxPixels)
	case c.MaxPixels < c.Factor()*c.Factor():
		return fmt.Errorf("vision: config: max_pixels %d is below one %d×%d block", c.MaxPixels, c.Factor(), c.Factor())
	case !(c.RescaleFactor > 0):
		return fmt.Errorf("vision: config: rescale factor %g must be positive", c.RescaleFactor)
	}
	for i, s := range c.ImageStd {
		if !(s > 0) {
			return fmt.Errorf("vision: config: image_std[%d] = %g must be positive", i, s)
		}
	}
	return nil
}

// Grid is an image's image_grid_thw: its size in patches along time, height
// and width.
type Grid struct{ T, H, W int }

// Patches is the number of patches, the rows of the image's pixel values.
func (g Grid) Patches() int { return g.T * g.H * g.W }
