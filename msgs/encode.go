package msgs

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// Marshal encodes a Frame, InferRequest, Plan, Error, Status, ControlRequest or
// ControlReply (a value or a
// pointer) as msgpack, with "v" set to Version on the message and on every
// frame inside it. It does not modify v and does not validate it: call
// Validate first where the message comes from outside. Required arrays that
// are nil are encoded as empty arrays, never as nil. The encoding is
// deterministic: the keys of Status.Counters are sorted.
func Marshal(v any) ([]byte, error) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, fmt.Errorf("msgs: Marshal(nil %T)", v)
	}
	var msg any
	switch m := v.(type) {
	case Frame:
		msg = m.wire()
	case *Frame:
		msg = m.wire()
	case InferRequest:
		msg = m.wire()
	case *InferRequest:
		msg = m.wire()
	case Plan:
		msg = m.wire()
	case *Plan:
		msg = m.wire()
	case Error:
		msg = m.wire()
	case *Error:
		msg = m.wire()
	case Status:
		msg = m.wire()
	case *Status:
		msg = m.wire()
	case ControlRequest:
		msg = m.wire()
	case *ControlRequest:
		msg = m.wire()
	case ControlReply:
		msg = m.wire()
	case *ControlReply:
		msg = m.wire()
	default:
		return nil, fmt.Errorf("msgs: Marshal of %T, which is not a protocol message", v)
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(msg); err != nil {
		return nil, fmt.Errorf("msgs: Marshal %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// The wire methods return a copy of a message ready to encode: versioned,
// with nil required slices made empty.

func (f Frame) wire() *Frame {
	f.V = Version
	if f.Data == nil {
		f.Data = []byte{}
	}
	return &f
}

func (r InferRequest) wire() *InferRequest {
	r.V = Version
	if r.Frames != nil {
		frames := make([]Frame, len(r.Frames))
		for i := range r.Frames {
			frames[i] = *r.Frames[i].wire()
		}
		r.Frames = frames
	}
	if r.EgoHistory == nil {
		r.EgoHistory = []EgoPose{}
	}
	return &r
}

func (p Plan) wire() *Plan {
	p.V = Version
	if p.Trajectory.XYZ == nil {
		p.Trajectory.XYZ = [][3]float64{}
	}
	if p.Trajectory.Rot == nil {
		p.Trajectory.Rot = [][9]float64{}
	}
	if p.Actions == nil {
		p.Actions = [][2]float64{}
	}
	return &p
}

func (e Error) wire() *Error {
	e.V = Version
	return &e
}

func (s Status) wire() *Status {
	s.V = Version
	return &s
}

// EncodeMsgpack encodes the counters with their keys sorted, so that a
// Status always encodes to the same bytes.
func (c Counters) EncodeMsgpack(enc *msgpack.Encoder) error {
	if c == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeMapLen(len(c)); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.EncodeUint(c[k]); err != nil {
			return err
		}
	}
	return nil
}
