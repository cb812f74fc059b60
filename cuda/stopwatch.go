package cuda

import (
	"errors"
	"fmt"
	"time"

	"vlanode/backend"
	"vlanode/cuda/driver"
)

// Mark records a timing event on the stream (backend.Stopwatch): reached
// once the work queued before it has run. The events live until
// ReleaseMark or Close.
func (b *Backend) Mark() (backend.Mark, error) {
	var m backend.Mark
	err := b.run(func(g *gpu) error {
		if err := g.inCapture("mark"); err != nil {
			return err
		}
		e, err := g.drv.EventCreate(driver.EventDefault)
		if err != nil {
			return fmt.Errorf("cuda: mark: %w", err)
		}
		if err := g.drv.EventRecord(e, g.stream); err != nil {
			return fmt.Errorf("cuda: mark: %w", errors.Join(err, g.drv.EventDestroy(e)))
		}
		if g.marks == nil {
			g.marks = map[driver.Event]struct{}{}
		}
		g.marks[e] = struct{}{}
		m = backend.Mark(e)
		return nil
	})
	return m, err
}

// Elapsed waits until to is reached and returns the device's time from
// from to to (backend.Stopwatch).
func (b *Backend) Elapsed(from, to backend.Mark) (time.Duration, error) {
	var d time.Duration
	err := b.run(func(g *gpu) error {
		f, t := driver.Event(from), driver.Event(to)
		_, okf := g.marks[f]
		_, okt := g.marks[t]
		if !okf || !okt {
			return fmt.Errorf("cuda: elapsed: a mark not made by Mark, or released (%d, %d)", from, to)
		}
		if err := g.drv.EventSynchronize(t); err != nil {
			return fmt.Errorf("cuda: elapsed: %w", err)
		}
		ms, err := g.drv.EventElapsed(f, t)
		if err != nil {
			return fmt.Errorf("cuda: elapsed: %w", err)
		}
		d = time.Duration(float64(ms) * float64(time.Millisecond))
		return nil
	})
	return d, err
}

// ReleaseMark destroys the event of m (backend.Stopwatch); a zero Mark
// is ignored.
func (b *Backend) ReleaseMark(m backend.Mark) error {
	if m == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		e := driver.Event(m)
		if _, ok := g.marks[e]; !ok {
			return fmt.Errorf("cuda: release mark: %d was not made by Mark, or is released", m)
		}
		delete(g.marks, e)
		if err := g.drv.EventDestroy(e); err != nil {
			return fmt.Errorf("cuda: release mark: %w", err)
		}
		return nil
	})
}

// closeMarks destroys the events of the marks not released.
func (g *gpu) closeMarks() error {
	var errs []error
	for e := range g.marks {
		errs = append(errs, g.drv.EventDestroy(e))
		delete(g.marks, e)
	}
	return errors.Join(errs...)
}
