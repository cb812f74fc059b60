package vision

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// goldenDir holds JPEG and PNG files of every kind the decoders take and
// expected.json, the SHA-256 of the RGB pixels OpenCV 4.6's imdecode
// gives for each: written and checked against OpenCV by
// TestFramesGoldenAreOpenCVs in the default build.
const goldenDir = "../testdata/vision/frames"

// goldenEntry is one file of expected.json.
type goldenEntry struct {
	File      string        `json:"file"`
	Encoding  msgs.Encoding `json:"encoding"`
	Width     int           `json:"width"`
	Height    int           `json:"height"`
	RGBSHA256 string        `json:"rgb_sha256"`
}

// readGolden reads expected.json.
func readGolden(t *testing.T) []goldenEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(goldenDir, "expected.json"))
	require.NoError(t, err)
	var m []goldenEntry
	require.NoError(t, json.Unmarshal(data, &m))
	require.NotEmpty(t, m)
	return m
}

// TestFramesGolden decodes every golden file and compares its pixels with
// OpenCV's (expected.json). It runs in every build: a binary without
// OpenCV (tag nogocv) decodes JPEG and PNG to the same values as one with
// it.
func TestFramesGolden(t *testing.T) {
	for _, e := range readGolden(t) {
		t.Run(e.File, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(goldenDir, e.File))
			require.NoError(t, err)
			f := msgs.Frame{V: msgs.Version, Camera: "front_wide_120fov", Encoding: e.Encoding, Width: e.Width, Height: e.Height, Data: data}
			require.NoError(t, CheckFrame(&f))
			img, err := Decode(&f)
			require.NoError(t, err)
			sum := sha256.Sum256(img.Pix)
			assert.Equal(t, e.RGBSHA256, hex.EncodeToString(sum[:]), "pixels differ from OpenCV's")
		})
	}
}
