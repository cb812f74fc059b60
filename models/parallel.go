package models

import (
	"runtime"
	"sync"
)

// ParallelFor calls fn on contiguous ranges [lo, hi) covering [0, n), over
// up to GOMAXPROCS goroutines, and waits. Ranges are at least minChunk
// long, so small n runs inline. fn must only write what its range owns:
// the result is the same as one call over [0, n).
func ParallelFor(n, minChunk int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), max(n/max(minChunk, 1), 1))
	if workers <= 1 {
		fn(0, n)
		return
	}
	per := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+per, n))
	}
	wg.Wait()
}
