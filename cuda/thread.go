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

// thread runs closures one at a time on a goroutine locked to its OS
// thread: a CUDA context is current per OS thread, so every CUDA call of a
// Backend runs there. The goroutine exits without unlocking, which ends
// the OS thread and its context binding with it.
type thread struct {
	calls chan func()
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func newThread() *thread {
	t := &thread{calls: make(chan func()), quit: make(chan struct{}), done: make(chan struct{})}
	go t.loop()
	return t
}

func (t *thread) loop() {
	runtime.LockOSThread()
	defer close(t.done)
	for {
		select {
		case f := <-t.calls:
			f()
		case <-t.quit:
			return
		}
	}
}

// do runs fn on the thread and returns its error. A panic in fn becomes an
// error. It must not be called from fn (it would wait on itself).
func (t *thread) do(fn func() error) error {
	res := make(chan error, 1)
	call := func() { res <- protect(fn) }
	select {
	case t.calls <- call:
	case <-t.done:
		return ErrClosed
	}
	return <-res // the thread runs a call it took to the end
}

// stop ends the thread after the call in progress.
func (t *thread) stop() {
	t.once.Do(func() { close(t.quit) })
	<-t.done
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
