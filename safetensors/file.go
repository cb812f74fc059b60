package safetensors

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"

	"vlanode/tensor"
)

// ErrNotFound is wrapped by the error of a lookup of a tensor that a file or
// checkpoint does not hold; test for it with errors.Is.
var ErrNotFound = errors.New("not found")

// File is one safetensors file, memory-mapped read-only. The tensor data
// returned by its lookups are slices of the mapping: zero-copy, read-only
// (writing to them faults), and invalid after Close. A File is safe for
// concurrent lookups; Close must not race with them.
type File struct {
	path string
	hdr  *header

	mu   sync.Mutex
	mmap []byte // the whole file; nil after Close
}

// OpenFile maps the safetensors file at path and validates its header: every
// tensor's dtype, shape and data offsets are checked against the file's
// size, so later lookups cannot fail on a malformed file.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s is not a regular file", path)
	}
	if st.Size() < lenPrefix {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, shorter than the %d-byte header length", path, st.Size(), lenPrefix)
	}
	m, err := mapFile(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	hdr, err := parseHeader(m)
	if err != nil {
		_ = unmapFile(m)
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return &File{path: path, hdr: hdr, mmap: m}, nil
}

// Path is the file's path as given to OpenFile.
func (f *File) Path() string { return f.path }

// Close unmaps the file. Every Info.Data obtained from it becomes invalid:
// touching one after Close crashes the process. Close is idempotent.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mmap == nil {
		return nil
	}
	err := unmapFile(f.mmap)
	f.mmap = nil
	if err != nil {
		return fmt.Errorf("safetensors %s: munmap: %w", f.path, err)
	}
	return nil
}

// Tensor returns the named tensor. A missing tensor gives an error that
// wraps ErrNotFound.
func (f *File) Tensor(name string) (Info, error) {
	e, ok := f.hdr.tensors[name]
	if !ok {
		return Info{}, fmt.Errorf("tensor %q %w in %s", name, ErrNotFound, f.path)
	}
	f.mu.Lock()
	m := f.mmap
	f.mu.Unlock()
	if m == nil {
		return Info{}, fmt.Errorf("tensor %q in %s: file is closed", name, f.path)
	}
	lo, hi := f.hdr.dataStart+e.begin, f.hdr.dataStart+e.end
	return Info{
		Name:  name,
		DType: e.dtype,
		Shape: append([]int{}, e.shape...),
		Data:  m[lo:hi:hi],
		File:  f.path,
	}, nil
}

// Has reports whether the file holds the named tensor.
func (f *File) Has(name string) bool {
	_, ok := f.hdr.tensors[name]
	return ok
}

// Names returns the names of all tensors, sorted.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.hdr.tensors))
	for n := range f.hdr.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Metadata returns a copy of the header's __metadata__ (empty if it has none).
func (f *File) Metadata() map[string]string {
	out := make(map[string]string, len(f.hdr.metadata))
	for k, v := range f.hdr.metadata {
		out[k] = v
	}
	return out
}

// Expect returns the named tensor after checking its dtype and shape; see
// Checkpoint.Expect for the rules.
func (f *File) Expect(name string, dt tensor.DType, shape ...int) (Info, error) {
	return expect(f, name, dt, shape)
}
