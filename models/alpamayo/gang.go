package alpamayo

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"vlanode/models"
)

// gang runs the passes of several sequences through one executor run, each
// unit once for all of them: each member (a sequence) runs its own code in
// its own goroutine, one member at a time (the baton), and its call to Do
// waits until every member still in the gang has called Do; the unit then
// runs once through the executor, its compute being every member's own
// compute, one after the other, each with the shapes it has alone. The
// members must call Do for the same units in the same order (the same
// stage of the same model); a member that is done leaves, and the others
// go on without it (a sequence whose decode ended).
//
// Lock order: baton, then mu.
type gang struct {
	exec  models.Runner // the executor's runner, which each unit goes through once
	baton sync.Mutex    // held by the member running its own code

	mu    sync.Mutex
	live  int         // members still in the gang
	calls []*gangCall // members waiting in Do, in arrival order
}

// gangCall is a member's call to Do, waiting for the others.
type gangCall struct {
	u    *models.Unit
	run  func() error
	err  error
	done chan struct{}
}

// Do queues run, the calling member's compute of u, and returns once u has
// run for every member (models.Runner). The caller holds the baton.
func (g *gang) Do(u *models.Unit, run func() error) error {
	c := &gangCall{u: u, run: run, done: make(chan struct{})}
	g.mu.Lock()
	g.calls = append(g.calls, c)
	full := len(g.calls) == g.live
	g.mu.Unlock()
	if full {
		g.flush()
	} else {
		g.baton.Unlock()
		<-c.done
		g.baton.Lock()
	}
	return c.err
}

// flush runs the waiting calls' unit once through the executor, every
// member's compute in it, and wakes them. Its caller holds the baton.
func (g *gang) flush() {
	g.mu.Lock()
	calls := g.calls
	g.calls = nil
	g.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("alpamayo: batch: internal error: %v\n%s", p, debug.Stack())
			for _, c := range calls {
				c.err = errors.Join(c.err, err)
			}
		}
		for _, c := range calls {
			close(c.done)
		}
	}()
	u := calls[0].u
	for _, c := range calls[1:] {
		if c.u != u {
			err := fmt.Errorf("alpamayo: batch: members out of step, at units %s and %s", u.Name, c.u.Name)
			for _, c := range calls {
				c.err = err
			}
			return
		}
	}
	err := g.exec.Do(u, func() error {
		for _, c := range calls {
			c.err = protect(c.run)
		}
		return nil // each member's own error is its own
	})
	if err != nil {
		for _, c := range calls {
			c.err = errors.Join(err, c.err)
		}
	}
}

// host runs fn, host-only work of the calling member (it holds the
// baton), with the baton released so that the other members run their own
// code meanwhile: a member's sampling of its next token (a sort of the
// vocabulary's probabilities) then overlaps the others' instead of adding
// to them while the device waits. fn must not use the backend.
func (g *gang) host(fn func()) {
	g.baton.Unlock()
	defer g.baton.Lock()
	fn()
}

// leave takes the calling member out of the gang, running the unit the
// others wait at when they all do, and hands the baton on.
func (g *gang) leave() {
	g.mu.Lock()
	g.live--
	full := g.live > 0 && len(g.calls) == g.live
	g.mu.Unlock()
	if full {
		g.flush()
	}
	g.baton.Unlock()
}

// run runs member(i) for i < n, each in its own goroutine as a member of
// the gang, and returns their errors once all are done.
func (g *gang) run(n int, member func(i int) error) []error {
	g.mu.Lock()
	g.live = n
	g.mu.Unlock()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			g.baton.Lock()
			defer g.leave()
			errs[i] = protect(func() error { return member(i) })
		})
	}
	wg.Wait()
	return errs
}

// protect runs fn, turning a panic into an error.
func protect(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("alpamayo: batch: internal error: %v\n%s", p, debug.Stack())
		}
	}()
	return fn()
}
