package msgs

import (
	"iter"
	"maps"
	"math"
	"slices"
)

// Extraction of typed fields from a parsed message. An extractor keeps the
// first error; once it has one, every further lookup is a no-op, so decoders
// read as a plain list of fields and check the error once at the end.

type extractor struct{ err error }

func (x *extractor) fail(err error) {
	if x.err == nil {
		x.err = err
	}
}

// object is one parsed map and its path in the message.
type object struct {
	x    *extractor
	path string
	m    map[string]any
}

// required and optional say whether a key must be present.
const (
	required = true
	optional = false
)

// converter turns the parsed value at path into a T.
type converter[T any] func(path string, v any) (T, error)

// lookup returns the value of key and whether it is present and not nil. A
// missing or nil required key records an error; a nil optional key counts
// as absent.
func (o object) lookup(key string, req bool) (any, bool) {
	if o.x.err != nil {
		return nil, false
	}
	v, ok := o.m[key]
	if v == nil {
		if req && ok {
			o.x.fail(badRequest(joinKey(o.path, key), "required, got nil"))
		} else if req {
			o.x.fail(badRequest(joinKey(o.path, key), "required"))
		}
		return nil, false
	}
	return v, true
}

// field returns the value of key converted by conv, or T's zero value.
func field[T any](o object, key string, req bool, conv converter[T]) T {
	var zero T
	v, ok := o.lookup(key, req)
	if !ok {
		return zero
	}
	t, err := conv(joinKey(o.path, key), v)
	if err != nil {
		o.x.fail(err)
		return zero
	}
	return t
}

// list returns the array at key with each element converted by conv; an
// empty or absent array is nil.
func list[T any](o object, key string, req bool, conv converter[T]) []T {
	a := field(o, key, req, asArray)
	if len(a) == 0 {
		return nil
	}
	path := joinKey(o.path, key)
	out := make([]T, len(a))
	for i, v := range a {
		t, err := conv(joinIndex(path, i), v)
		if err != nil {
			o.x.fail(err)
			return nil
		}
		out[i] = t
	}
	return out
}

// child returns the map at key as an object; ok is false when it is absent
// or failed.
func child(o object, key string, req bool) (c object, ok bool) {
	m := field(o, key, req, asMap)
	if m == nil {
		return object{}, false
	}
	return object{x: o.x, path: joinKey(o.path, key), m: m}, true
}

// children yields the maps of the array at key as objects, in order, and
// stops at the first error: a long array of bad elements costs one.
func children(o object, key string, req bool) iter.Seq[object] {
	return func(yield func(object) bool) {
		a := field(o, key, req, asArray)
		path := joinKey(o.path, key)
		for i, v := range a {
			if o.x.err != nil {
				return
			}
			at := joinIndex(path, i)
			m, err := asMap(at, v)
			if err != nil {
				o.x.fail(err)
				return
			}
			if !yield(object{x: o.x, path: at, m: m}) {
				return
			}
		}
	}
}

// Converters, one for each wire type.

func wrongType(path, want string, v any) error {
	return badRequest(path, "want %s, got %s", want, typeName(v))
}

func asString(path string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", wrongType(path, "string", v)
	}
	return s, nil
}

func asBool(path string, v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, wrongType(path, "bool", v)
	}
	return b, nil
}

// asInt64 accepts any msgpack integer encoding that fits an int64.
func asInt64(path string, v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case uint64:
		if n > math.MaxInt64 {
			return 0, badRequest(path, "integer %d out of range", n)
		}
		return int64(n), nil
	}
	return 0, wrongType(path, "integer", v)
}

// asInt accepts any msgpack integer encoding that fits an int.
func asInt(path string, v any) (int, error) {
	n, err := asInt64(path, v)
	if err != nil {
		return 0, err
	}
	if n < math.MinInt || n > math.MaxInt {
		return 0, badRequest(path, "integer %d out of range", n)
	}
	return int(n), nil
}

// asUint64 accepts any msgpack integer encoding of a non-negative number.
func asUint64(path string, v any) (uint64, error) {
	switch n := v.(type) {
	case uint64:
		return n, nil
	case int64:
		if n < 0 {
			return 0, badRequest(path, "want non-negative integer, got %d", n)
		}
		return uint64(n), nil
	}
	return 0, wrongType(path, "integer", v)
}

// asFloat accepts a float32, a float64 or an integer.
func asFloat(path string, v any) (float64, error) {
	switch n := v.(type) {
	case float64:
		return n, nil
	case int64:
		return float64(n), nil
	case uint64:
		return float64(n), nil
	}
	return 0, wrongType(path, "number", v)
}

// asBin accepts only bin: a str is refused, since msgpack libraries that
// put bytes in a str mangle them.
func asBin(path string, v any) ([]byte, error) {
	switch b := v.(type) {
	case []byte:
		if len(b) == 0 {
			return nil, nil
		}
		return b, nil
	case string:
		return nil, badRequest(path, "want bin, got string (send bytes as msgpack bin, not str)")
	}
	return nil, wrongType(path, "bin", v)
}

func asArray(path string, v any) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, wrongType(path, "array", v)
	}
	return a, nil
}

func asMap(path string, v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, wrongType(path, "map", v)
	}
	return m, nil
}

// fillNumbers reads an array of exactly len(dst) numbers into dst.
func fillNumbers(path string, v any, dst []float64) error {
	a, ok := v.([]any)
	if !ok {
		return badRequest(path, "want array of %d numbers, got %s", len(dst), typeName(v))
	}
	if len(a) != len(dst) {
		return badRequest(path, "want %d numbers, got %d", len(dst), len(a))
	}
	for i, e := range a {
		f, err := asFloat(joinIndex(path, i), e)
		if err != nil {
			return err
		}
		dst[i] = f
	}
	return nil
}

func asVec2(path string, v any) ([2]float64, error) {
	var out [2]float64
	err := fillNumbers(path, v, out[:])
	return out, err
}

func asVec3(path string, v any) ([3]float64, error) {
	var out [3]float64
	err := fillNumbers(path, v, out[:])
	return out, err
}

func asMat3(path string, v any) ([9]float64, error) {
	var out [9]float64
	err := fillNumbers(path, v, out[:])
	return out, err
}

// asCounters reads a map of non-negative integers; an empty map is nil.
func asCounters(path string, v any) (Counters, error) {
	m, err := asMap(path, v)
	if err != nil || len(m) == 0 {
		return nil, err
	}
	out := make(Counters, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) { // sorted: the same input reports the same error
		n, err := asUint64(joinKey(path, k), m[k])
		if err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, nil
}
