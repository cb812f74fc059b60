package vision

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/safetensors"
	"vlanode/tensor"
)

// referenceDir holds the outputs of scripts/reference/vision_reference.py:
// transformers 5.17's Qwen2VLImageProcessor (torchvision backend) with
// Alpamayo's settings, on images that the script generates.
const referenceDir = "../testdata/vision"

// oneLevel is one uint8 step after normalization with mean = std = 0.5:
// 1 / 127.5. The tolerance of TestProcessorReference is that step, but the
// Go processor is expected to, and does, match bit for bit.
const oneLevel = 1 / 127.5

// skipWithoutReference skips the test, loudly, when the reference outputs
// are missing.
func skipWithoutReference(t *testing.T, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(referenceDir, pattern))
	require.NoError(t, err)
	if len(paths) == 0 {
		t.Skipf("SKIPPED: no %s in %s. Make them on a machine with torch, torchvision, transformers and PIL "+
			"(the GPU machine): python3 scripts/reference/vision_reference.py --out testdata/vision", pattern, referenceDir)
	}
	return paths
}

func TestSmartResizeReference(t *testing.T) {
	skipWithoutReference(t, "smart_resize.safetensors")
	f, err := safetensors.OpenFile(filepath.Join(referenceDir, "smart_resize.safetensors"))
	require.NoError(t, err)
	defer f.Close()
	info, err := f.Expect("sizes", tensor.I64, -1, 7)
	require.NoError(t, err)
	rows, err := info.I64()
	require.NoError(t, err)
	for i := 0; i < len(rows); i += 7 {
		r := rows[i : i+7]
		h, w, factor, lo, hi := int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])
		rh, rw, err := SmartResize(h, w, factor, lo, hi)
		if r[5] < 0 {
			assert.Error(t, err, "smart_resize(%d, %d, factor %d) raises in transformers", h, w, factor)
			continue
		}
		if assert.NoError(t, err, "h=%d w=%d factor=%d", h, w, factor) {
			assert.Equal(t, [2]int{int(r[5]), int(r[6])}, [2]int{rh, rw}, "h=%d w=%d factor=%d min=%d max=%d", h, w, factor, lo, hi)
		}
	}
	t.Logf("%d sizes agree with transformers' smart_resize", len(rows)/7)
}

// TestProcessorReference runs the processor on each reference image and
// compares with transformers:
//   - the grid with image_grid_thw;
//   - the resized uint8 image with the one recovered from transformers'
//     pixel_values (exact fraction, largest difference in levels);
//   - a few whole rows of pixel_values (patch order, normalization);
//   - the SHA-256 of the whole pixel_values, which holds only if every one
//     of its float32 values is the same bits.
func TestProcessorReference(t *testing.T) {
	paths := skipWithoutReference(t, "*.expected.safetensors")
	p, err := NewProcessor(AlpamayoConfig())
	require.NoError(t, err)
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".expected.safetensors")
		t.Run(name, func(t *testing.T) { checkReferenceCase(t, p, path, name) })
	}
}

func checkReferenceCase(t *testing.T, p *Processor, path, name string) {
	f, err := safetensors.OpenFile(path)
	require.NoError(t, err)
	defer f.Close()
	meta := f.Metadata()
	gridInfo, err := f.Expect("image_grid_thw", tensor.I64, 1, 3)
	require.NoError(t, err)
	wantGrid, err := gridInfo.I64()
	require.NoError(t, err)
	rowsInfo, err := f.Expect("sample_rows", tensor.I64, -1)
	require.NoError(t, err)
	sampleRows, err := rowsInfo.I64()
	require.NoError(t, err)
	valuesInfo, err := f.Expect("sample_values", tensor.F32, len(sampleRows), p.RowSize())
	require.NoError(t, err)
	sampleValues, err := valuesInfo.F32()
	require.NoError(t, err)

	img := readPNG(t, filepath.Join(referenceDir, name+".png"))
	got, grid, err := p.Preprocess(img)
	require.NoError(t, err)
	require.Equal(t, []int64{int64(grid.T), int64(grid.H), int64(grid.W)}, wantGrid, "image_grid_thw")
	rowSize := p.RowSize()

	// The resized uint8 image, against the one transformers normalized.
	_, rw, rh, err := p.Grid(img.Width, img.Height)
	require.NoError(t, err)
	wantResized := readPNG(t, filepath.Join(referenceDir, name+".resized.png"))
	gotResized := img
	if rw != img.Width || rh != img.Height {
		gotResized, err = Resize(img, rw, rh)
		require.NoError(t, err)
	}
	exact, maxLevels := compareBytes(gotResized.Pix, wantResized.Pix)
	t.Logf("resize %d×%d → %d×%d: %.6f of %d bytes exact, largest difference %d levels",
		img.Width, img.Height, rw, rh, exact, len(wantResized.Pix), maxLevels)
	assert.LessOrEqual(t, maxLevels, 1, "resized image differs by more than one level")

	// Every pixel value, against transformers' resized image normalized and
	// patchified; the sample rows below check that step against
	// transformers itself.
	want, _, err := p.Preprocess(wantResized)
	require.NoError(t, err)
	exactV, maxDiff := compareFloats(got, want)
	t.Logf("pixel_values %d×%d: %.6f of %d values exact, largest difference %.3g (tolerance %.4g = 1/127.5)",
		grid.Patches(), rowSize, exactV, len(want), maxDiff, oneLevel)
	assert.LessOrEqual(t, maxDiff, oneLevel*(1+1e-6))

	for i, r := range sampleRows {
		gotRow := got[int(r)*rowSize : (int(r)+1)*rowSize]
		wantRow := sampleValues[i*rowSize : (i+1)*rowSize]
		_, d := compareFloats(gotRow, wantRow)
		assert.LessOrEqual(t, d, oneLevel*(1+1e-6), "row %d", r)
		_, d = compareFloats(want[int(r)*rowSize:(int(r)+1)*rowSize], wantRow)
		assert.Zero(t, d, "row %d of transformers' resized image, normalized and patchified here", r)
	}

	sum := sha256.New()
	buf := make([]byte, 4*rowSize)
	for r := range grid.Patches() {
		for i, v := range got[r*rowSize : (r+1)*rowSize] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		sum.Write(buf)
	}
	assert.Equal(t, meta["pixel_values_sha256"], hex.EncodeToString(sum.Sum(nil)), "pixel_values are not bit-identical to transformers'")
}

// compareBytes returns the fraction of equal bytes and the largest absolute
// difference.
func compareBytes(a, b []uint8) (exact float64, maxDiff int) {
	if len(a) != len(b) {
		return 0, math.MaxInt
	}
	same := 0
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d == 0 {
			same++
		}
		maxDiff = max(maxDiff, d, -d)
	}
	return float64(same) / float64(len(a)), maxDiff
}

// compareFloats returns the fraction of bit-identical values and the
// largest absolute difference.
func compareFloats(a, b []float32) (exact float64, maxDiff float64) {
	if len(a) != len(b) {
		return 0, math.Inf(1)
	}
	same := 0
	for i := range a {
		if math.Float32bits(a[i]) == math.Float32bits(b[i]) {
			same++
		}
		maxDiff = max(maxDiff, math.Abs(float64(a[i])-float64(b[i])))
	}
	return float64(same) / float64(len(a)), maxDiff
}

// TestReferenceFilesPresent fails when the reference folder is only half
// there: PNGs without expectations or the other way round.
func TestReferenceFilesPresent(t *testing.T) {
	paths := skipWithoutReference(t, "*.expected.safetensors")
	for _, p := range paths {
		base := strings.TrimSuffix(p, ".expected.safetensors")
		for _, suffix := range []string{".png", ".resized.png"} {
			_, err := os.Stat(base + suffix)
			assert.NoError(t, err)
		}
	}
}
