package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"

	"vlanode/tensor"
)

// writeBufSize is the buffer between the Writer and its file; tensors larger
// than it are written straight through.
const writeBufSize = 1 << 20

// Header describes one tensor to be written by a Writer.
type Header struct {
	Name  string
	DType tensor.DType
	Shape []int
}

// Writer streams a safetensors file whose header is known up front, so that
// a checkpoint larger than memory can be written one tensor at a time. Call
// Write once per tensor in the order of the headers, then Close.
type Writer struct {
	path    string
	f       *os.File
	w       *bufio.Writer
	headers []Header
	sizes   []int64 // bytes of each tensor
	next    int     // index of the next tensor to write
	err     error   // first write error; sticky
	closed  bool
}

// Create creates (or truncates) the file at path and writes its header:
// the tensors are laid out in the order of headers and metadata, if not
// empty, becomes the header's __metadata__.
func Create(path string, headers []Header, metadata map[string]string) (*Writer, error) {
	sizes, hdr, err := encodeHeader(headers, metadata)
	if err != nil {
		return nil, fmt.Errorf("safetensors: create %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	w := &Writer{
		path:    path,
		f:       f,
		w:       bufio.NewWriterSize(f, writeBufSize),
		headers: append([]Header(nil), headers...),
		sizes:   sizes,
	}
	var n [lenPrefix]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	w.write(n[:])
	w.write(hdr)
	if w.err != nil {
		err := w.err
		_ = f.Close()
		return nil, err
	}
	return w, nil
}

// write writes b unless an earlier write failed, keeping the first error.
func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("safetensors: write %s: %w", w.path, err)
	}
}

// Write writes the data of the next tensor, which must be the one named.
// data must hold exactly the tensor's bytes (little-endian).
func (w *Writer) Write(name string, data []byte) error {
	switch {
	case w.closed:
		return fmt.Errorf("safetensors: write %s: tensor %q: writer is closed", w.path, name)
	case w.err != nil:
		return w.err
	case w.next >= len(w.headers):
		return fmt.Errorf("safetensors: write %s: tensor %q: all %d tensors are already written", w.path, name, len(w.headers))
	}
	h := w.headers[w.next]
	if name != h.Name {
		return fmt.Errorf("safetensors: write %s: tensor %q out of order: tensor %d of %d is %q",
			w.path, name, w.next+1, len(w.headers), h.Name)
	}
	if int64(len(data)) != w.sizes[w.next] {
		return fmt.Errorf("safetensors: write %s: tensor %q: shape %v of %v needs %d bytes, got %d",
			w.path, name, h.Shape, h.DType, w.sizes[w.next], len(data))
	}
	w.write(data)
	if w.err != nil {
		return w.err
	}
	w.next++
	return nil
}

// Close flushes and closes the file. It reports an error if any tensor was
// not written, but leaves the incomplete file in place. Calling Close again
// does nothing.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.err
	if err == nil {
		if ferr := w.w.Flush(); ferr != nil {
			err = fmt.Errorf("safetensors: write %s: %w", w.path, ferr)
		}
	}
	if cerr := w.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("safetensors: close %s: %w", w.path, cerr)
	}
	if err == nil && w.next < len(w.headers) {
		err = fmt.Errorf("safetensors: close %s: only %d of %d tensors written; next was %q",
			w.path, w.next, len(w.headers), w.headers[w.next].Name)
	}
	return err
}

// headerEntry is one tensor of the JSON header as written.
type headerEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// encodeHeader validates headers and returns each tensor's byte size and
// the JSON header, padded with spaces to a multiple of 8 bytes as the
// reference implementation does.
func encodeHeader(headers []Header, metadata map[string]string) ([]int64, []byte, error) {
	sizes := make([]int64, len(headers))
	obj := make(map[string]any, len(headers)+1)
	var off int64
	for i, h := range headers {
		switch {
		case h.Name == "":
			return nil, nil, fmt.Errorf("tensor %d has no name", i)
		case h.Name == metadataKey:
			return nil, nil, fmt.Errorf("tensor %d: %q is reserved", i, metadataKey)
		case h.DType.Size() == 0:
			return nil, nil, fmt.Errorf("tensor %q: invalid dtype %v", h.Name, h.DType)
		}
		if _, dup := obj[h.Name]; dup {
			return nil, nil, fmt.Errorf("tensor %q: duplicate name", h.Name)
		}
		for _, d := range h.Shape {
			if d < 0 {
				return nil, nil, fmt.Errorf("tensor %q: negative dimension in shape %v", h.Name, h.Shape)
			}
		}
		n, ok := byteSize(h.DType, h.Shape)
		if !ok || off > math.MaxInt64-n {
			return nil, nil, fmt.Errorf("tensor %q: shape %v of %v overflows int64 bytes", h.Name, h.Shape, h.DType)
		}
		shape := append([]int{}, h.Shape...) // [] rather than null for a scalar
		obj[h.Name] = headerEntry{DType: h.DType.String(), Shape: shape, DataOffsets: [2]int64{off, off + n}}
		sizes[i] = n
		off += n
	}
	if len(metadata) > 0 {
		obj[metadataKey] = metadata
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, nil, err
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if pad := (lenPrefix - len(b)%lenPrefix) % lenPrefix; pad > 0 {
		b = append(b, bytes.Repeat([]byte(" "), pad)...)
	}
	if len(b) > MaxHeaderSize {
		return nil, nil, errors.New("header exceeds the maximum size")
	}
	return sizes, b, nil
}
