package kern

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// isolation is the process's threads moved off the workers' CPUs while a
// pool runs (Options.Isolate): the Go runtime's threads, the CUDA driver's
// and any other share the CPUs the workers leave, so that none of them
// preempts a worker in the middle of a job, where every other worker
// would wait for it at the job's end or its next barrier. Threads started
// later are started by moved threads and inherit their mask.
type isolation struct {
	orig unix.CPUSet // the process's mask before (restored by undo)
}

// isolate moves every thread of the process to allowed minus workers.
// It returns nil (nothing moved) when no CPU would be left.
func isolate(workers []int) (*isolation, error) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return nil, fmt.Errorf("kern: reading the process's CPU affinity: %w", err)
	}
	rest := orig
	for _, c := range workers {
		rest.Clear(c)
	}
	if rest.Count() == 0 {
		return nil, nil
	}
	// Twice: a thread started during the first sweep by a thread not yet
	// moved has the old mask.
	for range 2 {
		if err := setAll(&rest); err != nil {
			return nil, errors.Join(err, setAll(&orig))
		}
	}
	return &isolation{orig: orig}, nil
}

// undo gives every thread of the process its mask from before.
func (is *isolation) undo() error {
	if is == nil {
		return nil
	}
	return setAll(&is.orig)
}

// setAll sets the affinity of every thread of the process to set.
func setAll(set *unix.CPUSet) error {
	dir, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("kern: listing the process's threads: %w", err)
	}
	for _, d := range dir {
		tid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		// A thread that has exited since the listing is no error.
		if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kern: moving thread %d: %w", tid, err)
		}
	}
	return nil
}
