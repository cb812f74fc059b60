package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFitCPURate: a tier's rate comes from the difference between the whole
// share and its half, its cost per call from what is left, and the fitted
// model gives back both measured times; times that do not grow with the
// share leave no cost per call.
func TestFitCPURate(t *testing.T) {
	const bytes, flops = 300e6, 1.2e9 // 300 MB, 2 FLOPs a weight at 2 rows
	// 0.5 ms a call, 60 GB/s: whole 5.5 ms, half 3 ms.
	r := fitCPURate(2, bytes, flops, 5.5, 3)
	assert.Equal(t, 2, r.Rows)
	assert.InDelta(t, 60, r.GBps, 0.05)
	assert.InDelta(t, 0.24, r.TFLOPs, 0.0005)
	assert.InDelta(t, 0.5, r.CallMs, 1e-9)
	model := func(b, f float64) float64 { return r.CallMs + max(b/(r.GBps*1e9), f/(r.TFLOPs*1e12))*1e3 }
	assert.InDelta(t, 5.5, model(bytes, flops), 0.01)
	assert.InDelta(t, 3, model(bytes/2, flops/2), 0.01)

	// The half took longer than the whole, less than half of it, or so
	// nearly as long that a call would cost over a quarter of the whole
	// (the H200's 4-row measurement): noise; the whole share's rate and no
	// cost per call.
	for _, half := range []float64{6, 2, 4.3} {
		r = fitCPURate(1, bytes, flops, 5, half)
		assert.InDelta(t, 60, r.GBps, 0.05, "half %g", half)
		assert.Zero(t, r.CallMs, "half %g", half)
	}
	// A cost just under a quarter of the call stays.
	r = fitCPURate(1, bytes, flops, 5, 3.1)
	assert.InDelta(t, 1.2, r.CallMs, 1e-9)
	assert.InDelta(t, 78.9, r.GBps, 0.05)
}
