package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// ErrClosed is returned by every call on a closed Backend.
var ErrClosed = errors.New("cuda: backend closed")

// thread runs a Backend's closures one at a time on the calling
// goroutine, with its OS thread locked for the closure and the backend's
// context made current on that OS thread first: a CUDA context is current
// per OS thread, and cuCtxSetCurrent is cheap, where handing each call to
// one dedicated OS thread cost two thread wake-ups (about 20 µs a call on
// the GPU machine, more than the launch itself).
type thread struct {
	mu      sync.Mutex
	stopped bool
	bind    func() error // makes the context current here; nil until there is one
}

func newThread() *thread { return &thread{} }

// setBind installs the function that makes the context current.
func (t *thread) setBind(bind func() error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bind = bind
}

// do runs fn with the context current, after any call in progress, and
// returns its error. A panic in fn becomes an error. It must not be called
// from fn (it would wait on itself).
func (t *thread) do(fn func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return ErrClosed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if t.bind != nil {
		if err := t.bind(); err != nil {
			return fmt.Errorf("cuda: making the context current: %w", err)
		}
	}
	return protect(fn)
}

// stop refuses every later call, after the call in progress.
func (t *thread) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
}

// protect runs fn, turning a panic into an error.
func protect(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cuda: internal error: %v\n%s", r, debug.Stack())
		}
	}()
	return fn()
}
