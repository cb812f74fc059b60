package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"vlanode/cuda/driver"
)

// staging is a page-locked host buffer that small transfers pass through
// (Upload, Download, Embedding's ids), so that copies are asynchronous and
// run at DMA speed. It is used as a ring: each transfer takes the bytes
// after the last one's, and an event recorded after its copy marks them
// in use until the copy has run. A transfer waits only for the copies
// whose bytes it needs, so that a decode step's small uploads (its token,
// rotary tables and position) are queued one after another without a
// round trip to the GPU between them.
type staging struct {
	host unsafe.Pointer // page-locked, from cuMemHostAlloc; nil before open
	size int64
	off  int64          // where the next transfer's bytes start
	cur  span           // the bytes the last take returned
	pend []pendingCopy  // copies that may not have run yet, oldest first
	free []driver.Event // events of copies known to have run
}

// span is bytes [lo, hi) of the buffer.
type span struct{ lo, hi int64 }

// pendingCopy is a queued copy from or to bytes of the buffer, and the
// event recorded after it.
type pendingCopy struct {
	span
	ev driver.Event
}

// stagingGrain rounds the buffer's size when it grows; stagingAlign
// rounds each transfer's bytes; at most stagingMaxPending copies are
// pending (each holds an event).
const (
	stagingGrain      = 1 << 20
	stagingAlign      = 256
	stagingMaxPending = 64
)

// open allocates the buffer.
func (s *staging) open(d *driver.Driver, size int64) error {
	return s.grow(d, size)
}

// grow replaces the buffer by one of at least n bytes. The buffer must be
// idle.
func (s *staging) grow(d *driver.Driver, n int64) error {
	n = roundUp(max(n, 1), stagingGrain)
	if s.host != nil {
		if err := d.FreeHost(s.host); err != nil {
			return fmt.Errorf("cuda: staging: %w", err)
		}
		s.host, s.size = nil, 0
	}
	p, err := d.HostAlloc(n, 0)
	if err != nil {
		return fmt.Errorf("cuda: staging %s of pinned memory: %w", formatBytes(n), err)
	}
	s.host, s.size, s.off = p, n, 0
	return nil
}

// take returns n bytes of the buffer that no queued copy still uses (it
// waits for the oldest copies until that holds), growing the buffer when
// it is smaller than n. After queueing a copy that uses them, call queued.
func (s *staging) take(d *driver.Driver, n int64) ([]byte, error) {
	if n > s.size {
		if err := s.drain(d); err != nil {
			return nil, err
		}
		if err := s.grow(d, n); err != nil {
			return nil, err
		}
	}
	lo := s.off
	if lo+n > s.size {
		lo = 0 // wrap around
	}
	want := span{lo, min(lo+roundUp(max(n, 1), stagingAlign), s.size)}
	for len(s.pend) > 0 && (s.inUse(want) || len(s.pend) >= stagingMaxPending) {
		if err := s.retire(d); err != nil {
			return nil, err
		}
	}
	s.cur = want
	return unsafe.Slice((*byte)(unsafe.Add(s.host, lo)), n), nil
}

// inUse says whether a pending copy uses bytes of w.
func (s *staging) inUse(w span) bool {
	for _, p := range s.pend {
		if p.lo < w.hi && w.lo < p.hi {
			return true
		}
	}
	return false
}

// retire waits for the oldest pending copy.
func (s *staging) retire(d *driver.Driver) error {
	p := s.pend[0]
	if err := d.EventSynchronize(p.ev); err != nil {
		return fmt.Errorf("cuda: staging: %w", err)
	}
	s.pend = s.pend[1:]
	s.free = append(s.free, p.ev)
	return nil
}

// drain waits for every pending copy.
func (s *staging) drain(d *driver.Driver) error {
	if len(s.pend) == 0 {
		return nil
	}
	last := s.pend[len(s.pend)-1]
	if err := d.EventSynchronize(last.ev); err != nil {
		return fmt.Errorf("cuda: staging: %w", err)
	}
	s.idle()
	return nil
}

// queued marks the bytes of the last take in use until the work queued on
// st so far has run.
func (s *staging) queued(d *driver.Driver, st driver.Stream) error {
	var ev driver.Event
	if k := len(s.free); k > 0 {
		ev, s.free = s.free[k-1], s.free[:k-1]
	} else {
		var err error
		if ev, err = d.EventCreate(driver.EventDisableTiming); err != nil {
			return fmt.Errorf("cuda: staging: %w", err)
		}
	}
	if err := d.EventRecord(ev, st); err != nil {
		s.free = append(s.free, ev)
		return fmt.Errorf("cuda: staging: %w", err)
	}
	s.pend = append(s.pend, pendingCopy{s.cur, ev})
	s.off = s.cur.hi
	return nil
}

// idle notes that the stream was synchronized after the last copy: no copy
// is pending.
func (s *staging) idle() {
	for _, p := range s.pend {
		s.free = append(s.free, p.ev)
	}
	s.pend = s.pend[:0]
	s.off = 0
}

// close releases the buffer and the events.
func (s *staging) close(d *driver.Driver) error {
	var errs []error
	if s.host != nil {
		errs = append(errs, d.FreeHost(s.host))
		s.host, s.size = nil, 0
	}
	s.idle()
	for _, ev := range s.free {
		errs = append(errs, d.EventDestroy(ev))
	}
	s.free = nil
	return errors.Join(errs...)
}
