package synth

import (
	"context"
	"encoding/csv"
	"image/jpeg"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteClip(t *testing.T) {
	dir := t.TempDir()
	o := DefaultClip([]string{"a", "b"})
	o.Seconds, o.Width, o.Height = 0.5, 64, 36
	n, err := WriteClip(context.Background(), dir, o)
	require.NoError(t, err)
	assert.Equal(t, 10, n)
	files, err := filepath.Glob(filepath.Join(dir, "b", "*.jpg"))
	require.NoError(t, err)
	require.Len(t, files, 5)
	f, err := os.Open(files[0])
	require.NoError(t, err)
	defer f.Close()
	cfg, err := jpeg.DecodeConfig(f)
	require.NoError(t, err)
	assert.Equal(t, 64, cfg.Width)

	// The ego path is a circle of the requested curvature at the requested speed.
	raw, err := os.Open(filepath.Join(dir, "ego.csv"))
	require.NoError(t, err)
	defer raw.Close()
	rows, err := csv.NewReader(raw).ReadAll()
	require.NoError(t, err)
	require.Greater(t, len(rows), 20)
	prev := rows[1]
	for _, r := range rows[2:] {
		dx := atof(t, r[1]) - atof(t, prev[1])
		dy := atof(t, r[2]) - atof(t, prev[2])
		assert.InDelta(t, o.Speed*0.1, math.Hypot(dx, dy), 1e-3)
		prev = r
	}
	// Reproducible.
	dir2 := t.TempDir()
	_, err = WriteClip(context.Background(), dir2, o)
	require.NoError(t, err)
	a, _ := os.ReadFile(files[0])
	b, _ := os.ReadFile(filepath.Join(dir2, "b", filepath.Base(files[0])))
	assert.Equal(t, a, b)

	_, err = WriteClip(context.Background(), t.TempDir(), ClipOptions{})
	assert.ErrorContains(t, err, "bad options")
}

func atof(t *testing.T, s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return v
}
