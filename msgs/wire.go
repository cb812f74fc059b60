package msgs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxDepth bounds the nesting of arrays and maps in a message. Protocol v1
// nests four deep (plan → trajectory → xyz → waypoint); the margin leaves
// room for unknown keys.
const maxDepth = 32

// extValue stands for a msgpack extension value: no field of protocol v1 has
// one, so its bytes are skipped.
type extValue struct{}

// parse reads b as exactly one msgpack value that must be a map. Values come
// back as nil, bool, int64 (signed or fixnum encodings), uint64 (unsigned
// encodings), float64, string, []byte, []any, map[string]any or extValue.
// Entries with non-string keys are dropped: no protocol key can match them.
func parse(b []byte) (map[string]any, error) {
	if len(b) == 0 {
		return nil, &FieldError{Msg: "malformed msgpack: empty message", Code: CodeBadRequest}
	}
	br := bytes.NewReader(b)
	// A bytes.Reader is an io.ByteScanner, so the decoder reads it without
	// buffering and br.Len() is what is left of the message.
	r := &reader{br: br, d: msgpack.NewDecoder(br)}
	v, err := r.value(nil, 0)
	if err != nil {
		return nil, err
	}
	if n := br.Len(); n > 0 {
		return nil, badRequest("", "malformed msgpack: %d byte(s) after the end of the message", n)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, badRequest("", "message must be a map, got %s", typeName(v))
	}
	return m, nil
}

// pathNode is one step of the path to the value being read; paths are
// formatted only for errors.
type pathNode struct {
	parent *pathNode
	kind   stepKind
	key    string
	index  int
}

type stepKind uint8

const (
	keyStep      stepKind = iota // the value of a string key
	indexStep                    // an array element
	nonStringKey                 // the key or value of an entry whose key is not a string
)

func (p *pathNode) String() string {
	if p == nil {
		return ""
	}
	switch p.kind {
	case indexStep:
		return joinIndex(p.parent.String(), p.index)
	case nonStringKey:
		return p.parent.String() + "[<non-string key>]"
	}
	return joinKey(p.parent.String(), p.key)
}

type reader struct {
	br *bytes.Reader
	d  *msgpack.Decoder
}

// malformed reports a msgpack-level failure at p.
func (r *reader) malformed(p *pathNode, err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "msgpack: ")
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "unexpected end of data"
	}
	return badRequest(p.String(), "malformed msgpack: %s", msg)
}

// value reads the next value; depth is the number of arrays and maps that
// enclose it.
func (r *reader) value(p *pathNode, depth int) (any, error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return nil, r.malformed(p, err)
	}
	var v any
	switch {
	case c == msgpcode.Nil:
		err = r.d.DecodeNil()
	case c == msgpcode.False || c == msgpcode.True:
		v, err = r.d.DecodeBool()
	case msgpcode.IsFixedNum(c) || (c >= msgpcode.Int8 && c <= msgpcode.Int64):
		v, err = r.d.DecodeInt64()
	case c >= msgpcode.Uint8 && c <= msgpcode.Uint64:
		v, err = r.d.DecodeUint64()
	case c == msgpcode.Float || c == msgpcode.Double:
		v, err = r.d.DecodeFloat64()
	case msgpcode.IsString(c):
		var b []byte
		b, err = r.raw(p)
		v = string(b)
	case msgpcode.IsBin(c):
		v, err = r.raw(p)
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		return r.array(p, depth)
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		return r.mapping(p, depth)
	case msgpcode.IsExt(c):
		return r.ext(p)
	default:
		return nil, badRequest(p.String(), "malformed msgpack: invalid code 0x%02x", c)
	}
	if err != nil {
		if fe, ok := err.(*FieldError); ok {
			return nil, fe
		}
		return nil, r.malformed(p, err)
	}
	return v, nil
}

// raw reads a str or bin value's bytes, refusing a length longer than what
// is left of the message before allocating for it.
func (r *reader) raw(p *pathNode) ([]byte, error) {
	n, err := r.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if err := r.fits(p, n, 1, "bytes"); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.br, b); err != nil {
		return nil, err
	}
	return b, nil
}

// fits checks that n items of at least size bytes each can still be in the
// message.
func (r *reader) fits(p *pathNode, n, size int, what string) error {
	if left := r.br.Len(); n > left/size {
		return badRequest(p.String(), "malformed msgpack: %d %s announced, %d bytes left", n, what, left)
	}
	return nil
}

func (r *reader) nest(p *pathNode, depth int) error {
	if depth >= maxDepth {
		return badRequest(p.String(), "nested deeper than %d levels", maxDepth)
	}
	return nil
}

func (r *reader) array(p *pathNode, depth int) (any, error) {
	if err := r.nest(p, depth); err != nil {
		return nil, err
	}
	n, err := r.d.DecodeArrayLen()
	if err != nil {
		return nil, r.malformed(p, err)
	}
	if err := r.fits(p, n, 1, "array elements"); err != nil {
		return nil, err
	}
	a := make([]any, n)
	for i := range a {
		child := pathNode{parent: p, kind: indexStep, index: i}
		if a[i], err = r.value(&child, depth+1); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (r *reader) mapping(p *pathNode, depth int) (any, error) {
	if err := r.nest(p, depth); err != nil {
		return nil, err
	}
	n, err := r.d.DecodeMapLen()
	if err != nil {
		return nil, r.malformed(p, err)
	}
	if err := r.fits(p, n, 2, "map entries"); err != nil {
		return nil, err
	}
	m := make(map[string]any, n)
	for range n {
		c, err := r.d.PeekCode()
		if err != nil {
			return nil, r.malformed(p, err)
		}
		if !msgpcode.IsString(c) {
			// Not a protocol key: read and drop the entry.
			other := pathNode{parent: p, kind: nonStringKey}
			if _, err := r.value(&other, depth+1); err != nil {
				return nil, err
			}
			if _, err := r.value(&other, depth+1); err != nil {
				return nil, err
			}
			continue
		}
		kb, err := r.raw(p)
		if err != nil {
			if fe, ok := err.(*FieldError); ok {
				return nil, fe
			}
			return nil, r.malformed(p, err)
		}
		child := pathNode{parent: p, key: string(kb)}
		if _, dup := m[child.key]; dup {
			return nil, badRequest(child.String(), "duplicate key")
		}
		if m[child.key], err = r.value(&child, depth+1); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (r *reader) ext(p *pathNode) (any, error) {
	_, n, err := r.d.DecodeExtHeader()
	if err != nil {
		return nil, r.malformed(p, err)
	}
	if err := r.fits(p, n, 1, "bytes"); err != nil {
		return nil, err
	}
	if _, err := r.br.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, r.malformed(p, err)
	}
	return extValue{}, nil
}

// typeName names a parsed value's msgpack type for error messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case bool:
		return "bool"
	case int64, uint64:
		return "integer"
	case float64:
		return "float"
	case string:
		return "string"
	case []byte:
		return "bin"
	case []any:
		return "array"
	case map[string]any:
		return "map"
	case extValue:
		return "ext"
	}
	return fmt.Sprintf("%T", v)
}
