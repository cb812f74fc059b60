package cuda

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"vlanode/cuda/driver"
)

// OpTime is the GPU time of one kind of operation while a trace ran: the
// kernels of one name and grid, or the GEMMs of one shape.
type OpTime struct {
	Op    string  // e.g. "gemm 3042×12288×4096 BF16", "rmsnorm grid 3042×1×1"
	Count int     // operations
	Ms    float64 // their summed GPU time
}

// opTrace records a pair of timing events around every kernel, GEMM and
// upload queued while it is on (Backend.StartTrace).
type opTrace struct {
	pool []driver.Event // events ready for reuse
	recs []opRec
}

type opRec struct {
	op         string
	start, end driver.Event
}

// StartTrace times every GPU operation queued from now on (kernels by name
// and grid, cuBLAS GEMMs by shape, uploads) with a pair of events each,
// until StopTrace. It is a developer's tool: each operation costs two more
// event records, and graphs replayed meanwhile are not looked into.
func (b *Backend) StartTrace() error {
	return b.run(func(g *gpu) error {
		if g.trace == nil {
			g.trace = &opTrace{}
		}
		return nil
	})
}

// StopTrace waits for the queued work, ends the trace and returns the GPU
// time of each kind of operation it saw, the longest first.
func (b *Backend) StopTrace() ([]OpTime, error) {
	var out []OpTime
	err := b.run(func(g *gpu) error {
		t := g.trace
		if t == nil {
			return errors.New("cuda: trace: not started")
		}
		g.trace = nil
		if err := g.drv.StreamSynchronize(g.stream); err != nil {
			return fmt.Errorf("cuda: trace: %w", err)
		}
		sum := map[string]*OpTime{}
		var errs []error
		for _, r := range t.recs {
			ms, err := g.drv.EventElapsed(r.start, r.end)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s := sum[r.op]
			if s == nil {
				s = &OpTime{Op: r.op}
				sum[r.op] = s
			}
			s.Count++
			s.Ms += float64(ms)
		}
		for _, e := range t.pool {
			errs = append(errs, g.drv.EventDestroy(e))
		}
		for _, r := range t.recs {
			errs = append(errs, g.drv.EventDestroy(r.start), g.drv.EventDestroy(r.end))
		}
		for _, s := range sum {
			out = append(out, *s)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Ms > out[j].Ms })
		return errors.Join(errs...)
	})
	return out, err
}

// WriteOpTimes prints a trace's operations as a table, with each one's
// share of the total.
func WriteOpTimes(w io.Writer, ops []OpTime) error {
	total := 0.0
	for _, o := range ops {
		total += o.Ms
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "ms\tshare\tcount\tµs each\t\top\n")
	for _, o := range ops {
		fmt.Fprintf(tw, "%.3f\t%.1f%%\t%d\t%.1f\t\t%s\n", o.Ms, 100*o.Ms/max(total, 1e-9), o.Count, 1000*o.Ms/float64(max(o.Count, 1)), o.Op)
	}
	fmt.Fprintf(tw, "%.3f\t100%%\t\t\t\ttotal GPU time\n", total)
	return tw.Flush()
}

// traced queues fn between two timing events when a trace is on (and no
// capture is), else just runs it.
func (g *gpu) traced(op func() string, fn func() error) error {
	t := g.trace
	if t == nil || g.capture != nil {
		return fn()
	}
	start, err := t.event(g.drv)
	if err != nil {
		return err
	}
	end, err := t.event(g.drv)
	if err != nil {
		return err
	}
	if err := g.drv.EventRecord(start, g.stream); err != nil {
		return fmt.Errorf("cuda: trace: %w", err)
	}
	if err := fn(); err != nil {
		t.pool = append(t.pool, start, end)
		return err
	}
	if err := g.drv.EventRecord(end, g.stream); err != nil {
		return fmt.Errorf("cuda: trace: %w", err)
	}
	t.recs = append(t.recs, opRec{op: op(), start: start, end: end})
	return nil
}

// event returns a timing event from the pool or a new one.
func (t *opTrace) event(d *driver.Driver) (driver.Event, error) {
	if n := len(t.pool); n > 0 {
		e := t.pool[n-1]
		t.pool = t.pool[:n-1]
		return e, nil
	}
	e, err := d.EventCreate(driver.EventDefault)
	if err != nil {
		return 0, fmt.Errorf("cuda: trace: %w", err)
	}
	return e, nil
}
