package vision

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// identityConfig is a small processor whose normalization keeps byte
// values (rescale 1, mean 0, std 1) and that does not resize 8×12 images.
func identityConfig() Config {
	return Config{
		PatchSize: 2, TemporalPatchSize: 3, MergeSize: 2,
		MinPixels: 16, MaxPixels: 1000,
		RescaleFactor: 1, ImageStd: [3]float64{1, 1, 1},
	}
}

// transformersOrder lays out pixel values the way transformers does, by
// walking the permuted view (grid_t, H/(mP), W/(mP), m, m, C, Tp, P, P) of
// the (T, C, H, W) stack in row-major order.
func transformersOrder(img *Image, c Config) []float32 {
	P, m, tp := c.PatchSize, c.MergeSize, c.TemporalPatchSize
	gh, gw := img.Height/P, img.Width/P
	var out []float32
	for bh := range gh / m {
		for bw := range gw / m {
			for mh := range m {
				for mw := range m {
					for ch := range 3 {
						for range tp { // every frame of the temporal patch is the image
							for py := range P {
								for px := range P {
									y, x := (bh*m+mh)*P+py, (bw*m+mw)*P+px
									out = append(out, float32(img.Pix[3*(y*img.Width+x)+ch]))
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

func TestPatchifyOrder(t *testing.T) {
	c := identityConfig()
	p, err := NewProcessor(c)
	require.NoError(t, err)
	img := testImage(12, 8, 3)
	got, g, err := p.Preprocess(img)
	require.NoError(t, err)
	assert.Equal(t, Grid{T: 1, H: 4, W: 6}, g)
	assert.Equal(t, 3*3*2*2, p.RowSize())
	assert.Equal(t, transformersOrder(img, c), got)

	// BGR pixels with bgr set give the same values.
	swapped := NewImage(img.Width, img.Height)
	copyRGB(swapped.Pix, img.Pix, true)
	bgr := make([]float32, len(got))
	_, err = p.preprocess(bgr, swapped, true, new(imageScratch), 1)
	require.NoError(t, err)
	assert.Equal(t, got, bgr)
}

// TestPatchifyOrderAlignment checks the layout with a patch size whose
// rows ntstore.Patch writes with non-temporal stores (a multiple of 4 values)
// into an aligned output, and with plain copies into a misaligned one.
func TestPatchifyOrderAlignment(t *testing.T) {
	c := identityConfig()
	c.PatchSize, c.TemporalPatchSize, c.MinPixels = 4, 2, 64
	p, err := NewProcessor(c, WithWorkers(2))
	require.NoError(t, err)
	img := testImage(24, 16, 9)
	want := transformersOrder(img, c)
	buf := make([]float32, len(want)+4)
	for off := range 4 {
		dst := buf[off : off+len(want)]
		clear(buf)
		g, err := p.PreprocessInto(dst, img)
		require.NoError(t, err)
		assert.Equal(t, Grid{T: 1, H: 4, W: 6}, g)
		assert.Equal(t, want, dst, "output offset by %d values", off)
	}
}

func TestNormalization(t *testing.T) {
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	for c := range 3 {
		assert.Equal(t, float32(-1), p.lut[c][0])
		assert.Equal(t, float32(1), p.lut[c][255])
		for v := range 256 {
			assert.Equal(t, (float32(v)-127.5)/127.5, p.lut[c][v])
		}
	}
}

func TestPreprocessIntoChecks(t *testing.T) {
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	_, err = p.PreprocessInto(make([]float32, 10), testImage(512, 384, 1))
	assert.ErrorContains(t, err, "10 output values, need 1179648")
	_, err = p.PreprocessInto(nil, &Image{Width: 2, Height: 2})
	assert.Error(t, err)
	_, _, err = p.Preprocess(testImage(201, 1, 1))
	assert.Error(t, err)
}

func TestConfigValidate(t *testing.T) {
	assert.NoError(t, AlpamayoConfig().Validate())
	bad := []func(*Config){
		func(c *Config) { c.PatchSize = 0 },
		func(c *Config) { c.MinPixels = c.MaxPixels + 1 },
		func(c *Config) { c.MaxPixels = 100 },
		func(c *Config) { c.RescaleFactor = 0 },
		func(c *Config) { c.ImageStd[1] = 0 },
	}
	for i, edit := range bad {
		c := AlpamayoConfig()
		edit(&c)
		assert.Error(t, c.Validate(), "case %d", i)
		_, err := NewProcessor(c)
		assert.Error(t, err, "case %d", i)
	}
	c := AlpamayoConfig()
	assert.Equal(t, 32, c.Factor())
	assert.Equal(t, 1536, c.RowSize())
}
