package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCompareClose(t *testing.T) {
	want := []float32{10, -1, 0.5}
	got := []float32{10.3, -1, 0.5}
	// scale: max |diff| 0.3 against a fraction of max |ref| 10
	c, err := compareClose(got, want, tolerance{scale: 0.04})
	require.NoError(t, err)
	assert.True(t, c.ok)
	assert.InDelta(t, 0.3, c.maxAbs, 1e-5)
	assert.Equal(t, 10.0, c.maxRef)
	assert.Equal(t, 0, c.worst)
	c, _ = compareClose(got, want, tolerance{scale: 0.02})
	assert.False(t, c.ok)

	// elementwise: 0.3 <= 0.1 + 0.03·10 passes, the small elements must match closely
	c, _ = compareClose(got, want, tolerance{atol: 0.1, rtol: 0.03})
	assert.True(t, c.ok)
	c, _ = compareClose([]float32{10, -1.2, 0.5}, want, tolerance{atol: 0.1, rtol: 0.03})
	assert.False(t, c.ok, "0.2 > 0.1 + 0.03·1")
	assert.Equal(t, 1, c.worst)

	c, _ = compareClose([]float32{10, float32(math.NaN()), 0.5}, want, tolerance{scale: 1})
	assert.False(t, c.ok, "NaN")
	_, err = compareClose(got[:2], want, tolerance{scale: 1})
	assert.ErrorContains(t, err, "2 values, reference has 3")
}
