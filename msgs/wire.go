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

// skipped stands for an array or map that a shape did not ask for (one
// found where a number belongs, say): it was checked and skipped, and only
// its type is kept, for the error message.
type skipped string

// Element limit: the arrays' elements and the maps' entries a message may
// have kept, whatever its size; and one more for every elementBytes bytes
// of message. A kept element costs a few dozen bytes of memory where the
// wire may spend one, so this bounds the memory a message can cost at a
// small multiple of its size (a frame's data costs its own size). The
// protocol's messages hold a few thousand elements at most (a plan: 64
// waypoints of 3 + 9 numbers and 64 actions of 2).
const (
	baseElements = 1 << 16
	elementBytes = 64
)

// maxElements returns how many array elements and map entries a message of
// size bytes may hold in the fields a decoder reads.
func maxElements(size int) int { return baseElements + size/elementBytes }

// parse reads b as exactly one msgpack value, which must be a map, keeping
// what s asks for. Values come back as nil, bool, int64 (signed or fixnum
// encodings), uint64 (unsigned encodings), float64, string, []byte, []any,
// map[string]any, extValue or skipped. Entries with non-string keys are
// skipped: no protocol key can match them.
func parse(b []byte, s *shape) (map[string]any, error) {
	if len(b) == 0 {
		return nil, &FieldError{Msg: "malformed msgpack: empty message", Code: CodeBadRequest}
	}
	br := bytes.NewReader(b)
	// A bytes.Reader is an io.ByteScanner, so the decoder reads it without
	// buffering and br.Len() is what is left of the message.
	r := &reader{b: b, br: br, d: msgpack.NewDecoder(br), elems: maxElements(len(b))}
	v, err := r.value(nil, s, 0)
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

// String formats the path. It walks the chain without recursion and copies
// the keys, so that nothing of a pathNode outlives the call and the nodes
// stay on the parser's stack.
func (p *pathNode) String() string {
	var chain [maxDepth + 2]*pathNode
	n := 0
	for q := p; q != nil && n < len(chain); q = q.parent {
		chain[n] = q
		n++
	}
	path := ""
	for i := n - 1; i >= 0; i-- {
		switch q := chain[i]; {
		case q.kind == indexStep:
			path = joinIndex(path, q.index)
		case q.kind == nonStringKey:
			path += "[<non-string key>]"
		default:
			path = joinKey(path, strings.Clone(q.key))
		}
	}
	return path
}

type reader struct {
	b     []byte // the message
	br    *bytes.Reader
	d     *msgpack.Decoder
	elems int // elements the message may still keep (maxElements)
}

// malformed reports a msgpack-level failure at p.
func (r *reader) malformed(p *pathNode, err error) *FieldError {
	if fe, ok := err.(*FieldError); ok {
		return fe
	}
	msg := strings.TrimPrefix(err.Error(), "msgpack: ")
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "unexpected end of data"
	}
	return badRequest(p.String(), "malformed msgpack: %s", msg)
}

// container names the container type whose code is c, or "".
func container(c byte) string {
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		return "array"
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		return "map"
	}
	return ""
}

// value reads the next value as s asks; depth is the number of arrays and
// maps that enclose it.
func (r *reader) value(p *pathNode, s *shape, depth int) (any, error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return nil, r.malformed(p, err)
	}
	switch kind := container(c); {
	case kind == "array" && s.kind == arrayShape:
		return r.array(p, s, depth)
	case kind == "map" && (s.kind == objectShape || s.kind == dictShape):
		return r.mapping(p, s, depth)
	case kind != "":
		// Not what the decoder reads here: it will say so by the type.
		if err := r.skip(p, nil, depth); err != nil {
			return nil, err
		}
		return skipped(kind), nil
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
	case msgpcode.IsExt(c):
		err = r.ext(p)
		v = extValue{}
	default:
		return nil, badRequest(p.String(), "malformed msgpack: invalid code 0x%02x", c)
	}
	if err != nil {
		return nil, r.malformed(p, err)
	}
	return v, nil
}

// raw reads a str or bin value's bytes, refusing a length longer than what
// is left of the message before allocating for it.
func (r *reader) raw(p *pathNode) ([]byte, error) {
	b, err := r.span(p)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// span reads a str or bin header and returns its bytes, still inside the
// message (not copied).
func (r *reader) span(p *pathNode) ([]byte, error) {
	n, err := r.d.DecodeBytesLen()
	if err != nil {
		return nil, r.malformed(p, err)
	}
	if err := r.fits(p, n, 1, "bytes"); err != nil {
		return nil, err
	}
	at := len(r.b) - r.br.Len()
	if _, err := r.br.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, r.malformed(p, err)
	}
	return r.b[at : at+n : at+n], nil
}

// fits checks that n items of at least size bytes each can still be in the
// message.
func (r *reader) fits(p *pathNode, n, size int, what string) error {
	if left := r.br.Len(); n > left/size {
		return badRequest(p.String(), "malformed msgpack: %d %s announced, %d bytes left", n, what, left)
	}
	return nil
}

// keep charges n kept elements to the message's limit.
func (r *reader) keep(p *pathNode, n int) error {
	if n > r.elems {
		return badRequest(p.String(), "the message holds more than %d array elements and map entries in the fields read (%d, and 1 per %d bytes of message)",
			maxElements(len(r.b)), baseElements, elementBytes)
	}
	r.elems -= n
	return nil
}

func (r *reader) nest(p *pathNode, depth int) error {
	if depth >= maxDepth {
		return badRequest(p.String(), "nested deeper than %d levels", maxDepth)
	}
	return nil
}

func (r *reader) array(p *pathNode, s *shape, depth int) (any, error) {
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
	if err := r.keep(p, n); err != nil {
		return nil, err
	}
	a := make([]any, n)
	for i := range a {
		child := pathNode{parent: p, kind: indexStep, index: i}
		if a[i], err = r.value(&child, s.elem, depth+1); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (r *reader) mapping(p *pathNode, s *shape, depth int) (any, error) {
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
	m := map[string]any{} // no size hint: n counts the keys that are skipped too
	for range n {
		c, err := r.d.PeekCode()
		if err != nil {
			return nil, r.malformed(p, err)
		}
		if !msgpcode.IsString(c) {
			// Not a protocol key: skip the entry.
			other := pathNode{parent: p, kind: nonStringKey}
			if err := r.skip(&other, nil, depth+1); err != nil {
				return nil, err
			}
			if err := r.skip(&other, nil, depth+1); err != nil {
				return nil, err
			}
			continue
		}
		kb, err := r.span(p)
		if err != nil {
			return nil, err
		}
		child := pathNode{parent: p}
		elem := s.elem
		if s.kind == objectShape {
			f, known := s.fields[string(kb)]
			if !known {
				if err := r.skip(p, kb, depth+1); err != nil {
					return nil, err
				}
				continue
			}
			child.key, elem = f.name, f.shape
		} else {
			child.key = string(kb)
		}
		if _, dup := m[child.key]; dup {
			return nil, badRequest(child.String(), "duplicate key")
		}
		if err := r.keep(&child, 1); err != nil {
			return nil, err
		}
		if m[child.key], err = r.value(&child, elem, depth+1); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ext skips an extension value's bytes.
func (r *reader) ext(p *pathNode) error {
	_, n, err := r.d.DecodeExtHeader()
	if err != nil {
		return err
	}
	if err := r.fits(p, n, 1, "bytes"); err != nil {
		return err
	}
	_, err = r.br.Seek(int64(n), io.SeekCurrent)
	return err
}

// skip checks that the next value, at p (under key when it is not nil), is
// well-formed msgpack nested no deeper than maxDepth, and moves past it
// without keeping anything: it walks the value with a fixed stack of its
// own, so that skipping allocates nothing but an error. Duplicate keys
// inside the value are not looked for: nothing reads them.
func (r *reader) skip(p *pathNode, key []byte, depth int) error {
	var open [maxDepth]skipLevel // the containers being skipped, outermost first
	top := 0
	for {
		c, err := r.d.PeekCode()
		if err != nil {
			return r.skipErr(p, key, open[:top], err)
		}
		if top > 0 && open[top-1].atKey() {
			// A map's key: a string names the value's path; anything else
			// is skipped as a value of its own.
			l := &open[top-1]
			l.key = nil
			if msgpcode.IsString(c) {
				if l.key, err = r.span(nil); err != nil {
					return r.skipErr(p, key, open[:top-1], err)
				}
				l.left--
				continue
			}
		}
		kind := container(c)
		switch {
		case kind != "":
			if depth+top >= maxDepth {
				return r.skipErr(p, key, open[:top], badRequest("", "nested deeper than %d levels", maxDepth))
			}
			size, what, n := 1, "array elements", 0
			if kind == "map" {
				size, what = 2, "map entries"
				n, err = r.d.DecodeMapLen()
			} else {
				n, err = r.d.DecodeArrayLen()
			}
			if err == nil {
				err = r.fits(nil, n, size, what)
			}
			if err != nil {
				return r.skipErr(p, key, open[:top], err)
			}
			if n > 0 {
				open[top] = skipLevel{n: n * size, left: n * size, isMap: kind == "map"}
				top++
				continue
			}
		case msgpcode.IsString(c) || msgpcode.IsBin(c):
			_, err = r.span(nil)
		case msgpcode.IsExt(c):
			err = r.ext(nil)
		case c == msgpcode.Nil || c == msgpcode.False || c == msgpcode.True || msgpcode.IsFixedNum(c) ||
			(c >= msgpcode.Int8 && c <= msgpcode.Int64) || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64) ||
			c == msgpcode.Float || c == msgpcode.Double:
			err = r.d.Skip()
		default:
			err = badRequest("", "malformed msgpack: invalid code 0x%02x", c)
		}
		if err != nil {
			return r.skipErr(p, key, open[:top], err)
		}
		// A value is done: it may complete the containers around it.
		for ; top > 0; top-- {
			if open[top-1].left--; open[top-1].left > 0 {
				break
			}
		}
		if top == 0 {
			return nil
		}
	}
}

// skipLevel is one container that skip is inside.
type skipLevel struct {
	n, left int // items in all and still to skip (a map's keys and values count apart)
	isMap   bool
	key     []byte // a map: the key of the value being skipped; nil for a key that is not a string
}

// atKey reports whether the next item of a map is a key.
func (l *skipLevel) atKey() bool { return l.isMap && l.left%2 == 0 }

// skipErr returns err, a failure inside a value skipped at p (under key),
// with the path of the item being read in the innermost of levels.
func (r *reader) skipErr(p *pathNode, key []byte, levels []skipLevel, err error) error {
	fe := r.malformed(nil, err)
	path := p.String()
	if key != nil {
		path = joinKey(path, string(key))
	}
	for _, l := range levels {
		switch {
		case !l.isMap:
			path = joinIndex(path, l.n-l.left)
		case l.key == nil:
			path += "[<non-string key>]"
		default:
			path = joinKey(path, string(l.key))
		}
	}
	fe.Path = path
	return fe
}

// typeName names a parsed value's msgpack type for error messages.
func typeName(v any) string {
	switch x := v.(type) {
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
	case skipped:
		return string(x)
	}
	return fmt.Sprintf("%T", v)
}
