package cpu

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// pool is a fixed set of worker goroutines that run the tasks of one
// parallel loop at a time. The goroutine that calls run is worker 0; the
// pool's goroutines are workers 1..n-1, so a worker index can select
// per-worker scratch memory.
type pool struct {
	mu      sync.Mutex   // serializes run: one loop at a time
	helpers []chan *loop // one per helper goroutine (worker i+1)
	stopped sync.WaitGroup
}

// loop is one parallel loop: tasks [0, n) handed out in order.
type loop struct {
	fn   func(worker, task int)
	n    int
	next atomic.Int64
	done sync.WaitGroup

	panicMu sync.Mutex
	panic   any // the first panic of a task, if any
}

// newPool starts threads-1 helper goroutines.
func newPool(threads int) *pool {
	p := &pool{helpers: make([]chan *loop, threads-1)}
	for i := range p.helpers {
		ch := make(chan *loop)
		p.helpers[i] = ch
		p.stopped.Add(1)
		go func(worker int) {
			defer p.stopped.Done()
			for l := range ch {
				l.work(worker)
				l.done.Done()
			}
		}(i + 1)
	}
	return p
}

// threads is the number of workers, the calling goroutine included.
func (p *pool) threads() int { return len(p.helpers) + 1 }

// close stops the helpers and waits for them.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range p.helpers {
		close(ch)
	}
	p.helpers = nil
	p.stopped.Wait()
}

// run calls fn(worker, task) for every task in [0, n) and returns when all
// are done. Tasks are taken in increasing order by whichever worker is free,
// so fn must not depend on which worker runs a task except to pick scratch.
// A panic in a task is returned as an error.
func (p *pool) run(n int, fn func(worker, task int)) error {
	if n <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	l := &loop{fn: fn, n: n}
	helpers := min(len(p.helpers), n-1)
	l.done.Add(helpers)
	for _, ch := range p.helpers[:helpers] {
		ch <- l
	}
	l.work(0)
	l.done.Wait()
	if l.panic != nil {
		return fmt.Errorf("cpu: internal error: %v", l.panic)
	}
	return nil
}

// work runs tasks until none are left.
func (l *loop) work(worker int) {
	defer func() {
		if r := recover(); r != nil {
			l.panicMu.Lock()
			if l.panic == nil {
				l.panic = r
			}
			l.panicMu.Unlock()
			l.next.Store(int64(l.n)) // stop handing out tasks
		}
	}()
	for {
		t := int(l.next.Add(1) - 1)
		if t >= l.n {
			return
		}
		l.fn(worker, t)
	}
}

// ranges splits [0, n) into at most maxTasks contiguous chunks of at least
// grain items and calls fn(worker, lo, hi) for each, in parallel.
func (p *pool) ranges(n, grain int, fn func(worker, lo, hi int)) error {
	if n <= 0 {
		return nil
	}
	grain = max(grain, 1)
	tasks := min((n+grain-1)/grain, tasksPerThread*p.threads())
	if tasks <= 1 {
		return p.run(1, func(w, _ int) { fn(w, 0, n) })
	}
	size := (n + tasks - 1) / tasks
	tasks = (n + size - 1) / size
	return p.run(tasks, func(w, t int) { fn(w, t*size, min(n, (t+1)*size)) })
}

// tasksPerThread is how many chunks per worker ranges makes, so that
// uneven workers still finish together.
const tasksPerThread = 4

// scratch is per-worker float32 memory, grown on demand. Worker w touches
// only its own slot, so no locking is needed inside a parallel loop.
type scratch struct {
	bufs [][]float32
}

func newScratch(threads int) *scratch { return &scratch{bufs: make([][]float32, threads)} }

// get returns worker w's buffer with at least n elements (contents undefined).
func (s *scratch) get(w, n int) []float32 {
	if cap(s.bufs[w]) < n {
		s.bufs[w] = make([]float32, n)
	}
	return s.bufs[w][:n]
}
