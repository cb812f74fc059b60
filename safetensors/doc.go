// Package safetensors reads and writes Hugging Face safetensors checkpoints.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON mapping each tensor name to its dtype, shape and data_offsets (begin
// and end, relative to the data region), optionally a "__metadata__" object
// of strings, and then the data region itself.
//
// Files are memory-mapped read-only and tensors are returned as slices of the
// mapping (zero-copy): they stay valid until the File or Checkpoint is
// closed. Every header is validated when a file is opened, so a lookup never
// reads outside the file.
//
// Open reads a checkpoint directory, sharded (model.safetensors.index.json)
// or not; OpenFile reads one file. WriteFile writes a file from memory and
// Create streams one tensor at a time.
package safetensors
