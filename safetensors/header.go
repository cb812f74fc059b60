package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	"vlanode/tensor"
)

const (
	// lenPrefix is the size of the little-endian header length that starts
	// every safetensors file.
	lenPrefix = 8
	// MaxHeaderSize bounds the JSON header. The reference implementation
	// refuses headers over 100 MB; a larger length means a corrupt file.
	MaxHeaderSize = 100 << 20
	// metadataKey is the header key that holds free-form string metadata
	// instead of a tensor.
	metadataKey = "__metadata__"
)

// entry is one tensor of a parsed header. begin and end are relative to the
// start of the data region.
type entry struct {
	dtype      tensor.DType
	shape      []int
	begin, end int64
}

// header is a parsed and validated safetensors header.
type header struct {
	tensors  map[string]entry
	metadata map[string]string
	// dataStart is the file offset of the data region.
	dataStart int64
}

// rawEntry is a tensor as the JSON header spells it. Pointers tell a
// missing field from an empty one.
type rawEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// parseHeader validates the header of a safetensors file whose complete
// contents are buf. Every tensor's data is checked to lie inside buf.
func parseHeader(buf []byte) (*header, error) {
	size := int64(len(buf))
	if size < lenPrefix {
		return nil, fmt.Errorf("file is %d bytes, shorter than the %d-byte header length", size, lenPrefix)
	}
	n := binary.LittleEndian.Uint64(buf)
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d is absurd (limit %d): not a safetensors file?", n, MaxHeaderSize)
	}
	if int64(n) > size-lenPrefix {
		return nil, fmt.Errorf("truncated: header length %d but only %d bytes follow it", n, size-lenPrefix)
	}
	h := &header{dataStart: lenPrefix + int64(n), tensors: map[string]entry{}}
	raw := map[string]json.RawMessage{}
	js := buf[lenPrefix:h.dataStart]
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("invalid JSON header: %w", err)
	}
	if raw == nil { // the header was the JSON literal null
		return nil, errors.New("invalid JSON header: not an object")
	}
	dataLen := size - h.dataStart
	for name, msg := range raw {
		if name == metadataKey {
			if err := json.Unmarshal(msg, &h.metadata); err != nil {
				return nil, fmt.Errorf("%s: want an object of strings: %w", metadataKey, err)
			}
			continue
		}
		e, err := parseEntry(name, msg, dataLen)
		if err != nil {
			return nil, err
		}
		h.tensors[name] = e
	}
	if err := checkOverlap(h.tensors); err != nil {
		return nil, err
	}
	return h, nil
}

// parseEntry decodes and validates one tensor of the header against a data
// region of dataLen bytes.
func parseEntry(name string, msg json.RawMessage, dataLen int64) (entry, error) {
	var r rawEntry
	dec := json.NewDecoder(bytes.NewReader(msg))
	if err := dec.Decode(&r); err != nil {
		return entry{}, fmt.Errorf("tensor %q: invalid header entry: %w", name, err)
	}
	switch {
	case r.DType == nil:
		return entry{}, fmt.Errorf("tensor %q: header entry has no dtype", name)
	case r.Shape == nil:
		return entry{}, fmt.Errorf("tensor %q: header entry has no shape", name)
	case r.DataOffsets == nil:
		return entry{}, fmt.Errorf("tensor %q: header entry has no data_offsets", name)
	}
	dt, err := tensor.ParseDType(*r.DType)
	if err != nil {
		return entry{}, fmt.Errorf("tensor %q: %w", name, err)
	}
	shape := make([]int, len(*r.Shape))
	for i, d := range *r.Shape {
		if d < 0 {
			return entry{}, fmt.Errorf("tensor %q: negative dimension %d in shape %v", name, d, *r.Shape)
		}
		if int64(int(d)) != d {
			return entry{}, fmt.Errorf("tensor %q: dimension %d in shape %v is too large", name, d, *r.Shape)
		}
		shape[i] = int(d)
	}
	need, ok := byteSize(dt, shape)
	if !ok {
		return entry{}, fmt.Errorf("tensor %q: shape %v of %v overflows int64 bytes", name, shape, dt)
	}
	offs := *r.DataOffsets
	if len(offs) != 2 {
		return entry{}, fmt.Errorf("tensor %q: data_offsets %v, want [begin, end]", name, offs)
	}
	begin, end := offs[0], offs[1]
	if begin < 0 || end < begin {
		return entry{}, fmt.Errorf("tensor %q: invalid data_offsets [%d, %d]", name, begin, end)
	}
	if end-begin != need {
		return entry{}, fmt.Errorf("tensor %q: shape %v of %v needs %d bytes, offsets give %d", name, shape, dt, need, end-begin)
	}
	if end > dataLen {
		return entry{}, fmt.Errorf("truncated: tensor %q: data_offsets [%d, %d] end past the %d-byte data region", name, begin, end, dataLen)
	}
	return entry{dtype: dt, shape: shape, begin: begin, end: end}, nil
}

// checkOverlap reports two tensors whose data share bytes, which only a
// corrupt or hand-edited header produces.
func checkOverlap(tensors map[string]entry) error {
	names := make([]string, 0, len(tensors))
	for n, e := range tensors {
		if e.end > e.begin {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := tensors[names[i]], tensors[names[j]]
		if a.begin != b.begin {
			return a.begin < b.begin
		}
		return names[i] < names[j]
	})
	for i := 1; i < len(names); i++ {
		prev, cur := tensors[names[i-1]], tensors[names[i]]
		if cur.begin < prev.end {
			return fmt.Errorf("tensors %q [%d, %d] and %q [%d, %d] overlap",
				names[i-1], prev.begin, prev.end, names[i], cur.begin, cur.end)
		}
	}
	return nil
}

// byteSize is the number of bytes of a dense tensor of type dt and the given
// shape; ok is false on overflow or a negative dimension.
func byteSize(dt tensor.DType, shape []int) (n int64, ok bool) {
	n = int64(dt.Size())
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d == 0 {
			return 0, true
		}
	}
	for _, d := range shape {
		if n > math.MaxInt64/int64(d) {
			return 0, false
		}
		n *= int64(d)
	}
	return n, true
}
