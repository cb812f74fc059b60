package vision

import "sync"

// parallel calls fn(chunk, lo, hi) for chunks = min(workers, n) contiguous,
// disjoint chunks covering [0, n), concurrently, and waits for them; chunk
// numbers run from 0, so fn can index per-worker scratch. workers < 1 counts
// as 1.
func parallel(n, workers int, fn func(chunk, lo, hi int)) {
	chunks := min(max(workers, 1), n)
	if chunks <= 1 {
		fn(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for i := 1; i < chunks; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, i*n/chunks, (i+1)*n/chunks)
		}()
	}
	fn(0, 0, n/chunks)
	wg.Wait()
}
