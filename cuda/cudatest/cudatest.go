// Package cudatest opens the cuda backend for the GPU tests of the packages
// that use it (as net/http/httptest serves net/http's users), skipping the
// test loudly where there is no driver or GPU, so that scripts/gpu-test.sh
// counts it as skipped, never as passed.
package cudatest

import (
	"testing"

	"vlanode/cuda"
)

// Open returns a cuda backend closed when tb ends, or skips tb with a
// SKIPPED line naming why CUDA is not available.
func Open(tb testing.TB) *cuda.Backend {
	tb.Helper()
	if err := cuda.Available(); err != nil {
		tb.Skipf("SKIPPED: no CUDA driver/GPU on this machine: %v", err)
	}
	be, err := cuda.New()
	if err != nil {
		tb.Fatalf("cuda.New: %v", err)
	}
	tb.Cleanup(func() { be.Close() })
	return be
}
