package cuda

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// This file is backend.TokenFeed: what lets a greedy decode step embed the
// token the step before it picked without the host in between, so that
// the host queues the next step while the device runs this one.

// fetchSlots is how many FetchI32 copies may be pending at once.
const fetchSlots = 64

// HostTable copies data, [rows, cols] of dt, into page-locked host memory
// mapped for the device and returns a read-only tensor over it
// (backend.TokenFeed): kernels read it in place over the bus, and it
// takes no device memory (none of the budget). Free releases it once the
// queued work has run.
func (b *Backend) HostTable(dt tensor.DType, rows, cols int, data []byte) (backend.Tensor, error) {
	if err := checkFloat("host table", dt); err != nil {
		return nil, err
	}
	n, err := checkShape("host table", []int{rows, cols})
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != n*int64(dt.Size()) {
		return nil, fmt.Errorf("cuda: host table: %v[%d %d] needs %d bytes, got %d", dt, rows, cols, n*int64(dt.Size()), len(data))
	}
	t := &Tensor{b: b, dt: dt, shape: []int{rows, cols}, root: true, readOnly: true}
	err = b.run(func(g *gpu) error {
		bytes := max(int64(len(data)), 1)
		p, err := g.drv.HostAlloc(bytes, driver.HostAllocDeviceMap)
		if err != nil {
			return fmt.Errorf("cuda: host table of %s: %w", formatBytes(bytes), err)
		}
		dp, err := g.drv.HostDevicePtr(p)
		if err != nil {
			return fmt.Errorf("cuda: host table: %w", errors.Join(err, g.drv.FreeHost(p)))
		}
		parallelCopyBytes(unsafe.Slice((*byte)(p), len(data)), data)
		t.blk = &block{ptr: dp, bytes: int64(len(data)), purpose: "host-table", live: true, host: p}
		t.ptr = dp
		if g.hostTables == nil {
			g.hostTables = map[*block]struct{}{}
		}
		g.hostTables[t.blk] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// freeHostTable releases a HostTable's memory once the queued work has
// run (kernels may still read it).
func (g *gpu) freeHostTable(blk *block) error {
	blk.live = false
	err := g.drv.StreamSynchronize(g.stream)
	return errors.Join(err, g.drv.FreeHost(blk.host))
}

// EmbeddingAt is Embedding with the ids read from device memory
// (backend.TokenFeed): ids an I32 tensor of one id a row of dst. An id
// outside the table gives a row of zeros.
func (b *Backend) EmbeddingAt(dst, table, ids backend.Tensor) error {
	const op = "embedding at"
	it, err := b.arg(op, "ids", ids)
	if err != nil {
		return err
	}
	R := int(it.elements())
	if it.dt != tensor.I32 {
		return fmt.Errorf("cuda: %s: ids %v must be I32, one a row of dst", op, it)
	}
	d, tt, err := b.embeddingArgs(op, dst, table, R)
	if err != nil {
		return err
	}
	H := tt.shape[1]
	if R == 0 || H == 0 {
		return nil
	}
	return b.run(func(g *gpu) error { return g.embedding(op, d, tt, it.ptr, R) })
}

// embedding queues vla_embedding: rows of table at the n ids at ids
// (device memory) into dst.
func (g *gpu) embedding(op string, dst, table *Tensor, ids driver.DevicePtr, n int) error {
	V, H := table.shape[0], table.shape[1]
	g.args.Reset()
	g.args.Ptr(dst.ptr).Ptr(table.ptr).I32(dtypeCode(table.dt)).Ptr(ids).U64(uint64(n)).U64(uint64(H)).U64(uint64(V))
	chunks := (int64(H) + embChunk - 1) / embChunk
	return g.launch(op, g.k.embedding, rowsGrid(int64(n)*chunks), block1D(threadsPerBlock), 0)
}

// ArgmaxAt is Argmax with the index written to dst, one I32, when the
// kernel runs (backend.TokenFeed): nothing waits, and it may be captured.
func (b *Backend) ArgmaxAt(dst, x backend.Tensor, maskLo, maskHi int) error {
	const op = "argmax at"
	xt, err := b.f32Arg(op, "x", x)
	if err != nil {
		return err
	}
	p, err := b.arg(op, "dst", dst)
	if err != nil {
		return err
	}
	if p.dt != tensor.I32 || p.elements() != 1 || p.readOnly {
		return fmt.Errorf("cuda: %s: dst %v must be one writable I32", op, p)
	}
	n := xt.elements()
	if n > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: %d values are too many", op, n)
	}
	if n == 0 {
		return fmt.Errorf("cuda: %s: no values", op)
	}
	lo, hi := argmaxMask(maskLo, maskHi, int(n))
	return b.run(func(g *gpu) error { return g.argmax(p.ptr, xt, lo, hi) })
}

// fetchPool is FetchI32's page-locked slots (FetchMax int32s each) and
// their events; a slot is free again once its Fetch is waited for or
// released (a later copy into it queues behind the earlier one).
type fetchPool struct {
	host   unsafe.Pointer // fetchSlots × FetchMax int32s
	events [fetchSlots]driver.Event
	busy   [fetchSlots]bool
	gen    [fetchSlots]uint64 // bumped as a slot is taken: a stale Fetch is refused
}

// fetch is one FetchI32 copy.
type fetch struct {
	b    *Backend
	slot int
	gen  uint64
	n    int
}

// FetchI32 queues a copy of src (I32, at most backend.FetchMax values)
// to page-locked host memory and an event after it (backend.TokenFeed).
func (b *Backend) FetchI32(src backend.Tensor) (backend.Fetch, error) {
	const op = "fetch"
	s, err := b.arg(op, "src", src)
	if err != nil {
		return nil, err
	}
	n := s.elements()
	if s.dt != tensor.I32 || n == 0 || n > backend.FetchMax {
		return nil, fmt.Errorf("cuda: %s: src %v must be 1 to %d I32 values", op, s, backend.FetchMax)
	}
	f := &fetch{b: b, n: int(n)}
	err = b.run(func(g *gpu) error {
		if err := g.inCapture(op); err != nil {
			return err
		}
		fp := &g.fetches
		if fp.host == nil {
			p, err := g.drv.HostAlloc(fetchSlots*backend.FetchMax*4, 0)
			if err != nil {
				return fmt.Errorf("cuda: %s: %w", op, err)
			}
			fp.host = p
		}
		slot := -1
		for i, busy := range fp.busy {
			if !busy {
				slot = i
				break
			}
		}
		if slot < 0 {
			return fmt.Errorf("cuda: %s: %d copies pending: wait for or release them", op, fetchSlots)
		}
		if fp.events[slot] == 0 {
			e, err := g.drv.EventCreate(driver.EventDisableTiming)
			if err != nil {
				return fmt.Errorf("cuda: %s: %w", op, err)
			}
			fp.events[slot] = e
		}
		if err := g.drv.CopyDtoHAsync(fp.at(slot), s.ptr, n*4, g.stream); err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		if err := g.drv.EventRecord(fp.events[slot], g.stream); err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		fp.busy[slot] = true
		fp.gen[slot]++
		f.slot, f.gen = slot, fp.gen[slot]
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// at is slot i's host memory.
func (fp *fetchPool) at(i int) unsafe.Pointer {
	return unsafe.Add(fp.host, i*backend.FetchMax*4)
}

// Wait waits for the copy's event and returns its values.
func (f *fetch) Wait() ([]int32, error) {
	var out []int32
	err := f.b.run(func(g *gpu) error {
		fp := &g.fetches
		if !fp.busy[f.slot] || fp.gen[f.slot] != f.gen {
			return errors.New("cuda: fetch: waited for after it was waited for or released")
		}
		fp.busy[f.slot] = false
		if err := g.drv.EventSynchronize(fp.events[f.slot]); err != nil {
			return fmt.Errorf("cuda: fetch: %w", err)
		}
		out = append(out, unsafe.Slice((*int32)(fp.at(f.slot)), f.n)...)
		return nil
	})
	return out, err
}

// Release frees the copy's slot without waiting for it.
func (f *fetch) Release() {
	_ = f.b.run(func(g *gpu) error {
		if fp := &g.fetches; fp.busy[f.slot] && fp.gen[f.slot] == f.gen {
			fp.busy[f.slot] = false
		}
		return nil
	})
}

// closeFetches destroys the pool's events and frees its memory (after
// the stream has run).
func (g *gpu) closeFetches() error {
	fp := &g.fetches
	var errs []error
	for i, e := range fp.events {
		if e != 0 {
			errs = append(errs, g.drv.EventDestroy(e))
			fp.events[i] = 0
		}
	}
	if fp.host != nil {
		errs = append(errs, g.drv.FreeHost(fp.host))
		fp.host = nil
	}
	return errors.Join(errs...)
}

var _ backend.TokenFeed = (*Backend)(nil)
