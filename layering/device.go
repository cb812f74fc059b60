package layering

import (
	"vlanode/weights"
	"vlanode/weights/bf16z"
)

// Stream, Event and Slot are handles a Device hands out; they mean
// nothing to another Device.
type (
	// Stream is an in-order queue of device work.
	Stream int
	// Event marks a point in a stream's queue.
	Event int
	// Slot is a DFB slot: one device buffer a streamed unit's blob is
	// copied into.
	Slot int
)

// NoSlot is the slot of a resident unit: its weights live in VRAM of their
// own.
const NoSlot Slot = -1

// SlotPurpose is the budget purpose DFB slots are counted under.
const SlotPurpose = "dfb-slots"

// Compute is one unit's work on the compute stream.
type Compute struct {
	// Unit names the unit, for timelines and errors.
	Unit string
	// Slot is where the unit's weights are: a DFB slot, a home's arena
	// (from Offset on), or NoSlot for a resident unit.
	Slot   Slot
	Offset int64
	// Run queues the unit's ops on the compute stream (for cuda: calls
	// backend ops, which the Backend queues on its stream). It may be nil.
	Run func(slot Slot) error
}

// Device is what the executor needs of a GPU. Work queued on one stream
// runs in order; Wait is the only ordering across streams. A Device
// serves one goroutine at a time, and owns everything it hands out:
// its Close releases streams, events, slots and pinned memory.
type Device interface {
	// ComputeStream is the stream the compute backend queues its ops on.
	ComputeStream() Stream
	// NewStream makes a stream of its own, e.g. for copies.
	NewStream(name string) (Stream, error)
	// NewEvent makes an event that can be recorded and timed.
	NewEvent(name string) (Event, error)
	// Record marks e at the current end of s's queue (re-recording moves
	// it).
	Record(e Event, s Stream) error
	// Wait makes work queued on s after this call wait until e's latest
	// record (at the time of the call) has been reached.
	Wait(s Stream, e Event) error
	// AllocSlot allocates a DFB slot of bytes, counted under SlotPurpose,
	// aligned to weights.Align.
	AllocSlot(bytes int64) (Slot, error)
	// FreeSlot releases a slot once no queued work uses it (call it after
	// Synchronize); its handle is not reused.
	FreeSlot(s Slot) error
	// PinHost page-locks a blob's host bytes, once, so copies from them are
	// asynchronous DMA.
	PinHost(b *weights.Blob) error
	// CopyAsync queues a copy of src's whole blob into slot dst on s.
	CopyAsync(dst Slot, src *weights.Blob, s Stream) error
	// CopyRectAsync queues a copy of rectangle r of src's blob into slot
	// dst on s (r.Check: inside both).
	CopyRectAsync(dst Slot, src *weights.Blob, r weights.Rect, s Stream) error
	// Launch queues c on s.
	Launch(s Stream, c Compute) error
	// Synchronize waits until every stream's work has run.
	Synchronize() error
	// Elapsed is the time in milliseconds between two recorded events
	// that have been reached.
	Elapsed(from, to Event) (float64, error)
}

// StagingPurpose is the budget purpose the staging buffers of compressed
// streaming are counted under: the compressed bytes of a unit land there
// before a decode expands them into its slot or home.
const StagingPurpose = "z-staging"

// Decoder is implemented by a Device that streams compressed units
// (bf16z, docs/compression.md): the copy engine moves a unit's compressed
// bytes into a staging buffer, and a decode on a stream of its own expands
// them into the unit's slot or home, where every tensor lands at its raw
// blob's offset. The executor orders the three with events like every
// other turn.
type Decoder interface {
	// AllocStaging allocates a staging buffer of bytes, counted under
	// StagingPurpose, aligned to weights.Align. CopyAsync copies a
	// compressed unit's bytes (as a blob) into it; FreeSlot frees it.
	AllocStaging(bytes int64) (Slot, error)
	// Decode queues on s the decode of z, whose Data lies at the start of
	// staging buffer src, into dst from offset off on (z.RawSize bytes).
	// base numbers its jobs in the failure report (DecodeStatus): the jobs
	// decoded before it since the last report. A device that decodes at
	// once (Host) returns a failure here, naming the unit and tile.
	Decode(dst Slot, off int64, src Slot, z *bf16z.Unit, base int, s Stream) error
	// DecodeStatus waits for the decodes queued on s and returns what
	// failed since the last call, then clears it.
	DecodeStatus(s Stream) (DecodeStatus, error)
}

// DecodeStatus is what the decodes since the last report found wrong.
type DecodeStatus struct {
	// Failed counts the jobs (tiles) that failed; 0 when all decoded.
	Failed int
	// FirstJob is the lowest failing job, numbered as Decoder.Decode's
	// base says; Why says what failed (a checksum, a stream, a job out of
	// bounds).
	FirstJob int
	Why      string
}
