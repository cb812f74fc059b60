package cuda

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"vlanode/backend"
	"vlanode/backend/handoff"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// This file is backend.HostExchange on the GPU.
//
// Send queues, on the Backend's stream, a copy of src into page-locked
// Out and the record of a blocking-sync event (CU_EVENT_BLOCKING_SYNC).
// A waiter goroutine of the exchange, locked to an OS thread of its own
// with the context current there, waits for those events in Send order
// (cuEventSynchronize: the thread sleeps in the driver, no spinning) and
// marks each ticket landed; Wait sleeps on the book until then, so it
// never takes the Backend's lock and never holds up the goroutine that
// queues ops.
//
// Post stores the ticket in a word of device-mapped page-locked memory;
// Receive queues cuStreamWaitValue32 (word ≥ ticket) ahead of the copy of
// In (or, for a small result it adds, ahead of the add kernel, which
// reads In through the mapping: see xMappedAdd), so the stream, not the
// host, waits (DeviceWaits). Where the device
// cannot (no V2 stream memory operations, no mapped host memory: see
// probeExchange), Receive waits for the Post on the host, then queues the
// copy (HostWaits).
//
// The stream holds about a thousand queued entries: queueing far ahead of
// a Receive whose Post has not come blocks the queueing goroutine until
// the engine posts (an engine that needs nothing from that goroutine
// always can).

// Layout of an exchange's page-locked memory, one allocation: the posted
// and landed words on cache lines of their own, then Out, then In.
const (
	xPostedAt  = 0   // uint32: the last ticket posted (the device waits on it)
	xLandedAt  = 128 // uint32: the last ticket landed (spin benchmarks: the device writes it)
	xOutAt     = 256 // Out [out]float32
	xAlign     = 256 // In starts at the next multiple
	xSpinCheck = 1 << 10
	// xMappedAdd bounds the results an adding Receive reads through the
	// device mapping (DeviceWaits): the add kernel reads In over PCIe
	// itself, where a copy on the compute stream would queue behind the
	// copy engine's transfer of a layer's weights on the copy stream (on
	// the H200 a 16 KB copy of a decode step's result landed 1.1 ms after
	// the Post while 150 MB shares crossed: bench/results/budgets.md run
	// 28). Larger results are copied (the copy engine is faster for them).
	xMappedAdd = 1 << 20
)

// exchange is one backend.Exchange of a Backend.
type exchange struct {
	b    *Backend
	book *handoff.Book
	path backend.ExchangePath
	spin bool // benchmarks: Send writes the landed word and Wait spins on it (no events, no waiter)

	host                 unsafe.Pointer   // the page-locked allocation (layout above)
	posted, landed       *uint32          // its words
	postedDev, landedDev driver.DevicePtr // their device addresses (DeviceWaits)
	inDev                driver.DevicePtr // In's device address (DeviceWaits)
	out, in              []float32        // Out [out], In [in]
	scratch              *block           // [in]float32 on the device: In's copy that an adding Receive adds
	released             bool             // touched only inside Backend.run

	// Send's events and the waiter goroutine that waits for them.
	qmu    sync.Mutex
	qcond  *sync.Cond
	queue  []sentEvent    // recorded, not waited for yet, in Send order
	free   []driver.Event // waited for, ready to record again
	events []driver.Event // every event made: close destroys them
	stop   bool           // the waiter ends once queue is empty
	done   chan struct{}  // closed when the waiter has ended
}

// sentEvent is the event recorded after ticket t's copy.
type sentEvent struct {
	t  backend.Ticket
	ev driver.Event
}

var _ backend.HostExchange = (*Backend)(nil)

// NewExchange makes an exchange of out values to the host and in values
// back (backend.HostExchange); its Path is the one DeviceInfo.HostExchange
// names. Out, In and the two words are one page-locked allocation (not
// counted in the device budget); an adding Receive's copy of In takes in
// float32s of device scratch (PurposeScratch).
func (b *Backend) NewExchange(out, in int) (backend.Exchange, error) {
	return b.newExchange(out, in, false, false)
}

// newExchange makes an exchange; hostWaits forces the host-side path
// (tests), spin the spinning Wait (benchmarks, with DeviceWaits).
func (b *Backend) newExchange(out, in int, hostWaits, spin bool) (*exchange, error) {
	book, err := handoff.New("cuda: exchange", out, in)
	if err != nil {
		return nil, err
	}
	x := &exchange{b: b, book: book, spin: spin, done: make(chan struct{})}
	x.qcond = sync.NewCond(&x.qmu)
	inAt := xOutAt + (int64(out)*4+xAlign-1)/xAlign*xAlign
	size := inAt + int64(in)*4
	err = b.run(func(g *gpu) error {
		if err := g.inCapture("exchange"); err != nil {
			return err
		}
		x.path = g.xpath
		if hostWaits {
			x.path = backend.HostWaits
		}
		if spin && x.path != backend.DeviceWaits {
			return errors.New("cuda: exchange: a spinning Wait needs the device to wait (stream memory operations)")
		}
		var flags uint
		if x.path == backend.DeviceWaits {
			flags = driver.HostAllocDeviceMap
		}
		p, err := g.drv.HostAlloc(size, flags)
		if err != nil {
			return fmt.Errorf("cuda: exchange of %d and %d values: %w", out, in, err)
		}
		x.host = p
		if x.path == backend.DeviceWaits {
			dp, err := g.drv.HostDevicePtr(p)
			if err != nil {
				return fmt.Errorf("cuda: exchange: %w", errors.Join(err, g.drv.FreeHost(p)))
			}
			x.postedDev, x.landedDev = dp+xPostedAt, dp+xLandedAt
			x.inDev = dp + driver.DevicePtr(inAt)
		}
		if x.scratch, err = g.mem.alloc(PurposeScratch, int64(in)*4); err != nil {
			return errors.Join(err, g.drv.FreeHost(p))
		}
		clear(unsafe.Slice((*byte)(p), size)) // page-locked memory comes uninitialized
		x.posted = (*uint32)(unsafe.Add(p, xPostedAt))
		x.landed = (*uint32)(unsafe.Add(p, xLandedAt))
		x.out = unsafe.Slice((*float32)(unsafe.Add(p, xOutAt)), out)
		x.in = unsafe.Slice((*float32)(unsafe.Add(p, inAt)), in)
		if g.exchanges == nil {
			g.exchanges = map[*exchange]struct{}{}
		}
		g.exchanges[x] = struct{}{}
		if spin {
			close(x.done)
		} else {
			go x.waiter(g.drv, g.ctx)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// Send queues the copy of src into Out and the event the waiter waits for.
func (x *exchange) Send(src backend.Tensor) (backend.Ticket, error) {
	const op = "exchange send"
	s, err := x.b.f32Arg(op, "src", src)
	if err != nil {
		return 0, err
	}
	n := s.elements()
	t, err := x.book.BeginSend(int(n))
	if err != nil {
		return 0, err
	}
	err = x.b.run(func(g *gpu) error {
		if err := x.usable(g, op); err != nil {
			return err
		}
		if err := g.drv.CopyDtoHAsync(unsafe.Pointer(unsafe.SliceData(x.out)), s.ptr, n*4, g.stream); err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		if x.spin {
			if err := g.drv.StreamWriteValue32(g.stream, x.landedDev, uint32(t), driver.WriteValueDefault); err != nil {
				return fmt.Errorf("cuda: %s: %w", op, err)
			}
			return nil
		}
		ev, err := x.takeEvent(g)
		if err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		if err := g.drv.EventRecord(ev, g.stream); err != nil {
			x.putEvent(ev)
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		x.qmu.Lock()
		x.queue = append(x.queue, sentEvent{t, ev})
		x.qmu.Unlock()
		x.qcond.Signal()
		return nil
	})
	x.book.EndSend(t, err == nil)
	if err != nil {
		return 0, err
	}
	return t, nil
}

// usable refuses to queue inside a capture or after Close (which may have
// run between the book's check and here). Inside Backend.run.
func (x *exchange) usable(g *gpu, op string) error {
	if x.released {
		return fmt.Errorf("cuda: %s: %w", op, backend.ErrExchangeClosed)
	}
	return g.inCapture(op)
}

// takeEvent returns an event to record: a free one, or a new one.
func (x *exchange) takeEvent(g *gpu) (driver.Event, error) {
	x.qmu.Lock()
	defer x.qmu.Unlock()
	if n := len(x.free); n > 0 {
		ev := x.free[n-1]
		x.free = x.free[:n-1]
		return ev, nil
	}
	ev, err := g.drv.EventCreate(driver.EventBlockingSync | driver.EventDisableTiming)
	if err != nil {
		return 0, err
	}
	x.events = append(x.events, ev)
	return ev, nil
}

// putEvent makes an event free again.
func (x *exchange) putEvent(ev driver.Event) {
	x.qmu.Lock()
	x.free = append(x.free, ev)
	x.qmu.Unlock()
}

// waiter runs on an OS thread of its own with ctx current: it waits for
// each Send's event in turn and marks its ticket landed. It
// never takes the Backend's lock. After an error every later ticket
// fails with it.
func (x *exchange) waiter(drv *driver.Driver, ctx driver.Context) {
	defer close(x.done)
	runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
	err := drv.SetCurrent(ctx)
	if err != nil {
		err = fmt.Errorf("making the context current on the waiter's thread: %w", err)
	}
	for {
		x.qmu.Lock()
		for len(x.queue) == 0 && !x.stop {
			x.qcond.Wait()
		}
		if len(x.queue) == 0 {
			x.qmu.Unlock()
			break
		}
		p := x.queue[0]
		x.queue = x.queue[1:]
		x.qmu.Unlock()
		if err == nil {
			err = drv.EventSynchronize(p.ev)
		}
		x.putEvent(p.ev)
		x.book.Landed(p.t, err)
	}
	_ = drv.SetCurrent(0)
}

// Wait returns once ticket t's copy has landed in Out.
func (x *exchange) Wait(ctx context.Context, t backend.Ticket) error {
	if x.spin {
		if st := x.book.State(); !st.Closed && t == st.Posted+1 {
			for i := 0; int32(atomic.LoadUint32(x.landed)-uint32(t)) < 0; i++ {
				if i%xSpinCheck == 0 && ctx.Err() != nil {
					break
				}
			}
			if int32(atomic.LoadUint32(x.landed)-uint32(t)) >= 0 {
				x.book.Landed(t, nil)
			}
		}
	}
	return x.book.Wait(ctx, t)
}

// Out is the page-locked buffer Send copies into.
func (x *exchange) Out() []float32 { return x.out }

// In is the page-locked buffer Receive copies from.
func (x *exchange) In() []float32 { return x.in }

// Post stores t in the posted word (DeviceWaits: the device sees it; the
// store is sequentially consistent, so the writes to In come first), or
// wakes the Receive that waits for it (HostWaits).
func (x *exchange) Post(t backend.Ticket) error {
	return x.book.Post(t, func() {
		if x.path == backend.DeviceWaits {
			atomic.StoreUint32(x.posted, uint32(t))
		}
	})
}

// Receive queues the wait for ticket t's Post and the copy of In into
// dst (or its sum into dst); HostWaits waits for the Post first.
func (x *exchange) Receive(dst backend.Tensor, t backend.Ticket, add bool) (err error) {
	const op = "exchange receive"
	d, err := x.b.dstArg(op, "dst", dst)
	if err != nil {
		return err
	}
	n := d.elements()
	if err := x.book.BeginReceive(int(n), t); err != nil {
		return err
	}
	defer func() { x.book.EndReceive(t, err == nil) }()
	if x.path == backend.HostWaits {
		if err := x.book.WaitPosted(t); err != nil {
			return err
		}
	}
	return x.b.run(func(g *gpu) error {
		if err := x.usable(g, op); err != nil {
			return err
		}
		if x.path == backend.DeviceWaits {
			if err := g.drv.StreamWaitValue32(g.stream, x.postedDev, uint32(t), driver.WaitValueGEQ); err != nil {
				return fmt.Errorf("cuda: %s: %w", op, err)
			}
		}
		if add && x.path == backend.DeviceWaits && n*4 <= xMappedAdd {
			// The kernel reads In where the host wrote it, after the wait.
			s := &Tensor{b: x.b, blk: x.scratch, ptr: x.inDev, dt: tensor.F32, shape: []int{int(n)}}
			return g.add(d, d, s)
		}
		in := unsafe.Pointer(unsafe.SliceData(x.in))
		if !add {
			if err := g.drv.CopyHtoDAsync(d.ptr, in, n*4, g.stream); err != nil {
				return fmt.Errorf("cuda: %s: %w", op, err)
			}
			return nil
		}
		if err := g.drv.CopyHtoDAsync(x.scratch.ptr, in, n*4, g.stream); err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		s := &Tensor{b: x.b, blk: x.scratch, ptr: x.scratch.ptr, dt: tensor.F32, shape: []int{int(n)}}
		return g.add(d, d, s)
	})
}

// Path says who waits for a Post.
func (x *exchange) Path() backend.ExchangePath { return x.path }

// Close releases the device's waits for Posts that never came, waits for
// the stream, ends the waiter and frees everything. Like Backend.Sync it
// waits for the Posts of other exchanges' Receives queued before its
// last use. After the Backend's Close (which closes every exchange) it
// returns nil.
func (x *exchange) Close() error {
	err := x.b.run(func(g *gpu) error {
		if x.released {
			return nil
		}
		return errors.Join(x.unblock(), x.release(g))
	})
	if errors.Is(err, ErrClosed) {
		x.book.Close() // the Backend's Close released it
		return nil
	}
	return err
}

// unblock closes the book (waking the calls blocked on it) and, where the
// device waits, lets every wait it has queued pass: a Receive whose Post
// never came then copies whatever In held, which the error reports.
// Inside Backend.run, before release.
func (x *exchange) unblock() error {
	st, _ := x.book.Close()
	if x.path != backend.DeviceWaits || st.Received <= st.Posted {
		return nil
	}
	atomic.StoreUint32(x.posted, uint32(st.Sent))
	return st.Unposted("cuda: exchange")
}

// release frees x once the stream has passed its last use; x is
// unblocked. Inside Backend.run.
func (x *exchange) release(g *gpu) error {
	if x.released {
		return nil
	}
	x.released = true
	delete(g.exchanges, x)
	var errs []error
	if err := g.drv.StreamSynchronize(g.stream); err != nil {
		errs = append(errs, fmt.Errorf("cuda: exchange: close: %w", err))
	}
	x.qmu.Lock()
	x.stop = true
	x.qmu.Unlock()
	x.qcond.Broadcast()
	<-x.done // every event it still waits for has been reached: the stream is idle
	for _, ev := range x.events {
		errs = append(errs, g.drv.EventDestroy(ev))
	}
	x.events, x.free, x.queue = nil, nil, nil
	errs = append(errs, g.mem.free(x.scratch), g.drv.FreeHost(x.host))
	x.host, x.out, x.in = nil, nil, nil
	return errors.Join(errs...)
}

// closeExchanges closes every exchange not closed yet (Backend.Close),
// before the stream is synchronized: every device wait is let pass first,
// since each exchange's release waits for the whole stream.
func (g *gpu) closeExchanges() error {
	var errs []error
	for x := range g.exchanges {
		errs = append(errs, x.unblock())
	}
	for x := range g.exchanges {
		errs = append(errs, x.release(g))
	}
	return errors.Join(errs...)
}

// probeExchange picks HostExchange's path: DeviceWaits where the driver
// has the V2 stream memory operations, the device maps host memory and a
// wait on a mapped word queues and runs; else HostWaits, with the reason
// in DeviceInfo.HostExchange. Only a failure of the stream itself is an
// error.
func (g *gpu) probeExchange() error {
	v1 := "CAN_USE_STREAM_MEM_OPS_V1 = "
	if a, err := g.drv.Attribute(g.dev, driver.AttrCanUseStreamMemOpsV1); err != nil {
		v1 += err.Error()
	} else {
		v1 += fmt.Sprint(a)
	}
	hostWaits := func(why string) error {
		g.xpath = backend.HostWaits
		g.info.HostExchange = fmt.Sprintf("%s: %s (%s)", backend.HostWaits, why, v1)
		return nil
	}
	if !g.drv.CanWaitValue() {
		return hostWaits("the driver has no cuStreamWaitValue32_v2")
	}
	if ok, err := g.drv.Attribute(g.dev, driver.AttrCanMapHostMemory); err != nil || ok == 0 {
		return hostWaits(fmt.Sprintf("the device cannot map host memory (%d, %v)", ok, err))
	}
	p, err := g.drv.HostAlloc(xOutAt, driver.HostAllocDeviceMap)
	if err != nil {
		return hostWaits(fmt.Sprintf("mapped host memory: %v", err))
	}
	why, err := g.probeWait(p)
	if err = errors.Join(err, g.drv.FreeHost(p)); err != nil {
		return fmt.Errorf("cuda: probing stream memory operations: %w", err)
	}
	if why != "" {
		return hostWaits(why)
	}
	g.xpath = backend.DeviceWaits
	g.info.HostExchange = fmt.Sprintf("%s: cuStreamWaitValue32_v2 on device-mapped page-locked memory (%s)", backend.DeviceWaits, v1)
	return nil
}

// probeWait queues a wait on a mapped word of p that holds already and
// synchronizes: why says what failed short of the stream itself.
func (g *gpu) probeWait(p unsafe.Pointer) (why string, err error) {
	dp, err := g.drv.HostDevicePtr(p)
	if err != nil {
		return fmt.Sprintf("mapped host memory: %v", err), nil
	}
	atomic.StoreUint32((*uint32)(p), 1)
	if err := g.drv.StreamWaitValue32(g.stream, dp, 1, driver.WaitValueGEQ); err != nil {
		return err.Error(), nil
	}
	return "", g.drv.StreamSynchronize(g.stream)
}
