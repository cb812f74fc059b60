package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"vlanode/cuda/driver"
)

// staging is a page-locked host buffer that small transfers pass through
// (Upload, Download, Embedding's ids), so that copies are asynchronous and
// run at DMA speed. One event marks the last queued copy that touches it:
// the buffer is rewritten only after that copy has run.
type staging struct {
	host unsafe.Pointer // page-locked, from cuMemHostAlloc; nil before open
	size int64
	ev   driver.Event // recorded after the last copy from or to host
	busy bool         // ev marks a copy that may not have run yet
}

// stagingGrain rounds the buffer's size when it grows.
const stagingGrain = 1 << 20

// open allocates the buffer and its event.
func (s *staging) open(d *driver.Driver, size int64) (err error) {
	if s.ev, err = d.EventCreate(driver.EventDisableTiming); err != nil {
		return fmt.Errorf("cuda: staging: %w", err)
	}
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
	s.host, s.size = p, n
	return nil
}

// take waits until the buffer is idle and returns its first n bytes,
// growing it when needed. After queueing a copy that uses them, call
// queued.
func (s *staging) take(d *driver.Driver, n int64) ([]byte, error) {
	if s.busy {
		if err := d.EventSynchronize(s.ev); err != nil {
			return nil, fmt.Errorf("cuda: staging: %w", err)
		}
		s.busy = false
	}
	if n > s.size {
		if err := s.grow(d, n); err != nil {
			return nil, err
		}
	}
	return unsafe.Slice((*byte)(s.host), n), nil
}

// queued marks the buffer busy until the work queued on st so far has run.
func (s *staging) queued(d *driver.Driver, st driver.Stream) error {
	if err := d.EventRecord(s.ev, st); err != nil {
		return fmt.Errorf("cuda: staging: %w", err)
	}
	s.busy = true
	return nil
}

// idle notes that the stream was synchronized after the last copy.
func (s *staging) idle() { s.busy = false }

// close releases the buffer and the event.
func (s *staging) close(d *driver.Driver) error {
	var errs []error
	if s.host != nil {
		errs = append(errs, d.FreeHost(s.host))
		s.host, s.size = nil, 0
	}
	if s.ev != 0 {
		errs = append(errs, d.EventDestroy(s.ev))
		s.ev = 0
	}
	return errors.Join(errs...)
}
