// Package layering is the executor of demand layering (paper 1, §IV-B and
// §IV-C; DESIGN.md, "Executor"): it runs a model's units in passes, each
// unit either resident in VRAM or streamed from pinned host memory through
// the Double Flat Buffer (DFB), two VRAM slots sized to the largest
// streamed unit.
//
// The executor drives a Device, a small interface over streams, events,
// slots and asynchronous copies. The cuda package implements it on a GPU
// (cuda.DFBDevice); Fake simulates a copy engine and a compute engine with
// given durations and records a timeline, so the protocol is tested here
// without a GPU.
//
// The protocol, for streamed turn j (counted across every pass of a Run)
// in slot s = j mod 2:
//
//	copy stream:    wait compute-done[s]; copy the unit's blob into slot s; record dma-done[s]
//	compute stream: wait dma-done[s];     run the unit;                      record compute-done[s]
//
// One event per (stream, slot). The copy of turn j+2 is queued right after
// the compute of turn j, so the copies of the next pass's first units are
// queued, and overlap, while the current pass's last units compute.
//
// A compressed unit (Unit.Z, Unit.ZShares: bf16z) adds a decode stream and
// staging buffers, a ring of their own in copy order (protocol.go, copyZ;
// docs/compression.md): the copy moves the compressed bytes into staging k
// once its last decode has read it, the decode expands them into the slot
// once the slot's last user has run and records dma-done[s], which the
// compute waits for as before. Decode failures are read at the end of a
// run and fail it, naming the unit and tile.
package layering
