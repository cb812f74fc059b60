package node

import (
	"sync"
	"sync/atomic"
	"time"

	"vlanode/msgs"
)

// job is one accepted request, from admission to its one reply.
type job struct {
	req       *msgs.InferRequest
	to        answerTo      // where the one answer goes; nil for a job from the jobs queue (stored)
	received  time.Time     // when the node got the request
	admitted  time.Time     // when it entered the queue
	deadline  time.Time     // zero: none
	unmarshal time.Duration // decoding and checking the request
	timer     *time.Timer   // fires at the deadline while the job waits
	answered  atomic.Bool   // set by the one reply (Node.answer)
	stored    *storedJob    // a job from the jobs queue (jobs.go); nil for a request
}

// latest reports whether the job asks for the node's latest frames.
func (j *job) latest() bool { return j.req.UseLatest }

// Shed reasons, the label of vlanode_shed_total.
const (
	shedQueueFull  = "queue_full" // the queue held QueueBound requests
	shedSuperseded = "superseded" // a newer use_latest request took its place
	shedDeadline   = "deadline"   // the deadline passed before inference began
	shedShutdown   = "shutdown"   // the node stopped before inference began
)

// rejection is a job the scheduler will not run, and why.
type rejection struct {
	j      *job
	reason string // one of the shed reasons
	by     *job   // for shedSuperseded: the newer request
}

// scheduler is the queue in front of the engine: one job runs at a time
// (the worker's), at most bound wait. Its lock is a leaf: nothing else is
// locked while it is held, and replies are sent after it is released.
type scheduler struct {
	bound int
	ready chan struct{} // capacity 1: "the queue changed"

	mu      sync.Mutex
	waiting []*job // FIFO
	closed  bool
}

func newScheduler(bound int) *scheduler {
	return &scheduler{bound: bound, ready: make(chan struct{}, 1)}
}

// admit queues j. A use_latest job replaces a waiting use_latest job in its
// place in line (latest wins); otherwise a full queue rejects j. The
// returned rejections must be answered by the caller.
func (s *scheduler) admit(j *job) []rejection {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return []rejection{{j: j, reason: shedShutdown}}
	}
	if j.latest() {
		for i, w := range s.waiting {
			if w.latest() {
				s.waiting[i] = j
				s.signal()
				return []rejection{{j: w, reason: shedSuperseded, by: j}}
			}
		}
	}
	if len(s.waiting) >= s.bound {
		return []rejection{{j: j, reason: shedQueueFull}}
	}
	s.waiting = append(s.waiting, j)
	s.signal()
	return nil
}

func (s *scheduler) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// next blocks until a job is waiting and takes it, or returns nil once the
// scheduler is closed.
func (s *scheduler) next() *job {
	for {
		s.mu.Lock()
		if len(s.waiting) > 0 {
			j := s.waiting[0]
			s.waiting[0] = nil
			s.waiting = s.waiting[1:]
			s.mu.Unlock()
			return j
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil
		}
		<-s.ready
	}
}

// gather takes up to k more waiting jobs for a batch, oldest first: those
// waiting now, and, while fewer than k, those that arrive within wait.
func (s *scheduler) gather(k int, wait time.Duration) []*job {
	var out []*job
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		take := min(k-len(out), len(s.waiting))
		out = append(out, s.waiting[:take]...)
		clear(s.waiting[:take])
		s.waiting = s.waiting[take:]
		closed := s.closed
		s.mu.Unlock()
		if len(out) == k || wait <= 0 || closed {
			return out
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-s.ready:
		case <-timeout:
			s.mu.Lock()
			take := min(k-len(out), len(s.waiting))
			out = append(out, s.waiting[:take]...)
			clear(s.waiting[:take])
			s.waiting = s.waiting[take:]
			s.mu.Unlock()
			return out
		}
	}
}

// remove takes j out of the queue; it reports false when j was not waiting
// (the worker took it, or it was answered otherwise).
func (s *scheduler) remove(j *job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range s.waiting {
		if w == j {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// depth returns the number of waiting jobs.
func (s *scheduler) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// close stops admission and returns the jobs that were waiting; next
// returns nil from now on.
func (s *scheduler) close() []*job {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	out := s.waiting
	s.waiting = nil
	s.signal()
	return out
}
