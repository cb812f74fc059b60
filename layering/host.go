package layering

import (
	"fmt"
	"runtime"
	"time"

	"vlanode/backend"
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// Host is a Device for a backend whose tensors live in host memory (the
// cpu backend): slots are aligned host buffers that weights are bound to
// by aliasing (backend.Weight over SlotData), a copy is a memcpy done when
// it is queued, a compute runs when it is launched, and events read the
// wall clock. Everything is therefore in order, and the executor's
// protocol, slots and bindings run for real without a GPU, which lets CI
// check that a streamed model computes exactly what a resident one does.
type Host struct {
	slots  [][]byte
	events []hostEvent
	nextS  Stream
}

type hostEvent struct {
	name string
	at   time.Time
}

var (
	_ Device  = (*Host)(nil)
	_ Decoder = (*Host)(nil)
)

// NewHost returns a Host device.
func NewHost() *Host { return &Host{} }

// ComputeStream is stream 0.
func (h *Host) ComputeStream() Stream { return 0 }

// NewStream hands out a new stream handle; all streams run in host order.
func (h *Host) NewStream(string) (Stream, error) {
	h.nextS++
	return h.nextS, nil
}

// NewEvent makes an event.
func (h *Host) NewEvent(name string) (Event, error) {
	h.events = append(h.events, hostEvent{name: name})
	return Event(len(h.events) - 1), nil
}

func (h *Host) event(e Event) (*hostEvent, error) {
	if e < 0 || int(e) >= len(h.events) {
		return nil, fmt.Errorf("layering: host: no event %d", e)
	}
	return &h.events[e], nil
}

// Record stamps the event with the current time.
func (h *Host) Record(e Event, _ Stream) error {
	ev, err := h.event(e)
	if err != nil {
		return err
	}
	ev.at = time.Now()
	return nil
}

// Wait does nothing: the host runs everything in the order queued.
func (h *Host) Wait(Stream, Event) error { return nil }

// AllocSlot allocates an aligned host buffer.
func (h *Host) AllocSlot(bytes int64) (Slot, error) {
	b, err := weights.AlignedAlloc(bytes)
	if err != nil {
		return NoSlot, fmt.Errorf("layering: host slot: %w", err)
	}
	h.slots = append(h.slots, b)
	return Slot(len(h.slots) - 1), nil
}

// FreeSlot drops a slot's buffer.
func (h *Host) FreeSlot(s Slot) error {
	if s < 0 || int(s) >= len(h.slots) || h.slots[s] == nil {
		return fmt.Errorf("layering: host: no live slot %d", s)
	}
	h.slots[s] = nil
	return nil
}

// SlotData is a slot's bytes, to bind weight views to.
func (h *Host) SlotData(s Slot) ([]byte, error) {
	if s < 0 || int(s) >= len(h.slots) || h.slots[s] == nil {
		return nil, fmt.Errorf("layering: host: no slot %d", s)
	}
	return h.slots[s], nil
}

// WeightView returns the view function that binds a blob entry to be's
// weight over the slot's bytes: for a backend that aliases host memory
// (the cpu backend), the tensor reads whatever blob the slot holds.
func (h *Host) WeightView(be backend.Backend) func(Slot, weights.Entry) (backend.Tensor, error) {
	return func(s Slot, e weights.Entry) (backend.Tensor, error) {
		data, err := h.SlotData(s)
		if err != nil {
			return nil, err
		}
		if e.Offset < 0 || e.Size < 0 || e.Offset+e.Size > int64(len(data)) {
			return nil, fmt.Errorf("layering: host: %s at [%d, %d) is outside slot %d of %d bytes", e.Name, e.Offset, e.Offset+e.Size, s, len(data))
		}
		return be.Weight("dfb-view", e.DType, e.Shape, data[e.Offset:e.Offset+e.Size])
	}
}

// PinHost does nothing: host memory needs no pinning here.
func (h *Host) PinHost(*weights.Blob) error { return nil }

// CopyAsync copies the blob into the slot now.
func (h *Host) CopyAsync(dst Slot, src *weights.Blob, _ Stream) error {
	b, err := h.SlotData(dst)
	if err != nil {
		return err
	}
	if src.Size() > int64(len(b)) {
		return fmt.Errorf("layering: host: blob %s (%d bytes) does not fit slot %d (%d bytes)", src.Name, src.Size(), dst, len(b))
	}
	copy(b, src.Data)
	return nil
}

// CopyRectAsync copies rectangle r of the blob into the slot now.
func (h *Host) CopyRectAsync(dst Slot, src *weights.Blob, r weights.Rect, _ Stream) error {
	b, err := h.SlotData(dst)
	if err != nil {
		return err
	}
	if err := r.Check(src.Size(), int64(len(b))); err != nil {
		return fmt.Errorf("layering: host: blob %s into slot %d: %w", src.Name, dst, err)
	}
	for row := range r.Height {
		s, d := r.SrcOffset+row*r.SrcPitch, r.DstOffset+row*r.DstPitch
		copy(b[d:d+r.Width], src.Data[s:s+r.Width])
	}
	return nil
}

// Launch runs the compute now.
func (h *Host) Launch(_ Stream, c Compute) error {
	if c.Run == nil {
		return nil
	}
	return c.Run(c.Slot)
}

// Synchronize does nothing: the work is done when queued.
func (h *Host) Synchronize() error { return nil }

// Elapsed is the wall time between two recorded events, in ms.
func (h *Host) Elapsed(from, to Event) (float64, error) {
	a, err := h.event(from)
	if err != nil {
		return 0, err
	}
	b, err := h.event(to)
	if err != nil {
		return 0, err
	}
	if a.at.IsZero() || b.at.IsZero() {
		return 0, fmt.Errorf("layering: host: elapsed between %s and %s: not both recorded", a.name, b.name)
	}
	return float64(b.at.Sub(a.at)) / 1e6, nil
}

// AllocStaging allocates an aligned host buffer for compressed bytes.
func (h *Host) AllocStaging(bytes int64) (Slot, error) { return h.AllocSlot(bytes) }

// Decode decodes z now, on all cores, with the Go decoder (the CPU
// stands in for the GPU kernel): every tile's checksum is checked before
// it is written, and a failing tile is an error naming the unit, tensor
// and tile (wrapping bf16z.ErrCorrupt), the slot left as it was there.
func (h *Host) Decode(dst Slot, off int64, src Slot, z *bf16z.Unit, _ int, _ Stream) error {
	out, err := h.SlotData(dst)
	if err != nil {
		return err
	}
	in, err := h.SlotData(src)
	if err != nil {
		return err
	}
	if off < 0 || off+z.RawSize > int64(len(out)) {
		return fmt.Errorf("layering: host: unit %s decodes %d bytes at %d of slot %d (%d bytes)", z.Name, z.RawSize, off, dst, len(out))
	}
	if z.Size() > int64(len(in)) {
		return fmt.Errorf("layering: host: unit %s has %d compressed bytes, staging %d holds %d", z.Name, z.Size(), src, len(in))
	}
	// Decode what the copy put in staging, not z.Data: its header, tables
	// and jobs are checked again (CRC-32C, bounds), as the kernel checks
	// every job it reads.
	staged, err := bf16z.Parse(z.Name, in[:z.Size()], z.Entries, z.RawSize)
	if err != nil {
		return err
	}
	return staged.Decode(out[off:off+z.RawSize], runtime.GOMAXPROCS(0))
}

// DecodeStatus reports nothing: Decode returns its failures at once.
func (h *Host) DecodeStatus(Stream) (DecodeStatus, error) { return DecodeStatus{FirstJob: -1}, nil }
