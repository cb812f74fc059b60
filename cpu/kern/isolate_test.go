package kern

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// threadMasks reads the affinity of every thread of the process.
func threadMasks(t *testing.T) map[int]unix.CPUSet {
	dir, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	out := map[int]unix.CPUSet{}
	for _, d := range dir {
		tid, err := strconv.Atoi(d.Name())
		require.NoError(t, err)
		var set unix.CPUSet
		if unix.SchedGetaffinity(tid, &set) == nil {
			out[tid] = set
		}
	}
	return out
}

// TestIsolate checks that a pool with Isolate leaves its workers' CPU to
// them (every other thread of the process is moved off it, the workers
// are pinned to it) and that Close gives the threads their masks back.
func TestIsolate(t *testing.T) {
	var orig unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &orig))
	if orig.Count() < 2 {
		t.Skip("SKIPPED: isolation needs at least two CPUs this process may use")
	}
	worker := -1
	for c := 0; worker < 0; c++ {
		if orig.IsSet(c) {
			worker = c
		}
	}
	p, err := NewPool(Options{CPUs: []int{worker}, Threads: 1, Isolate: true})
	require.NoError(t, err)
	pinned := 0
	for tid, set := range threadMasks(t) {
		if set.Count() == 1 && set.IsSet(worker) {
			pinned++ // the worker
			continue
		}
		assert.False(t, set.IsSet(worker), "thread %d may still run on the worker's CPU %d", tid, worker)
	}
	assert.Equal(t, 1, pinned, "one worker pinned to CPU %d", worker)
	// The pool works with the process moved.
	data := make([]uint16, 8*64)
	for i := range data {
		data[i] = 0x3f80 // 1.0
	}
	w, err := NewWeights(data, 8, 64)
	require.NoError(t, err)
	x := make([]float32, 64)
	for i := range x {
		x[i] = 1
	}
	y := make([]float32, 8)
	require.NoError(t, p.MatMul(GEMM{Y: y, X: x, M: 1, W: w}))
	assert.Equal(t, float32(64), y[0])
	require.NoError(t, p.Close())
	for tid, set := range threadMasks(t) {
		assert.Equal(t, orig, set, "thread %d after Close", tid)
	}
}
