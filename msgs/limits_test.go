package msgs_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// withKey returns the encoded message b (a map of fewer than 15 keys, as
// msgs.Marshal writes them) with one more key holding the raw msgpack value.
func withKey(t testing.TB, b []byte, key string, value []byte) []byte {
	t.Helper()
	require.True(t, b[0] >= 0x80 && b[0] < 0x8f, "a fixmap with room for one more key")
	out := append([]byte{b[0] + 1}, b[1:]...)
	out = append(out, 0xd9, byte(len(key)))
	out = append(out, key...)
	return append(out, value...)
}

// repeated returns a msgpack array32 of n copies of the one-byte value v.
func repeated(n int, v byte) []byte {
	out := make([]byte, 5, 5+n)
	out[0] = 0xdd
	binary.BigEndian.PutUint32(out[1:], uint32(n))
	for range n {
		out = append(out, v)
	}
	return out
}

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The case (34, item 5): a 7.9 MB request whose unknown key holds
// 7.9M empty maps cost +940 MB of RSS; empty arrays +530 MB. Unknown keys
// are now skipped without being kept: decoding allocates what the known
// fields hold, whatever the unknown key carries.
func TestUnknownKeyCostsNothing(t *testing.T) {
	const n = 7_900_000
	valid := mustMarshal(t, sampleRequest())
	baseline := allocated(func() {
		_, err := msgs.DecodeInferRequest(valid)
		require.NoError(t, err)
	})
	for _, c := range []struct {
		name string
		elem byte
	}{{"empty maps", 0x80}, {"empty arrays", 0x90}, {"nils", 0xc0}} {
		t.Run(c.name, func(t *testing.T) {
			b := withKey(t, valid, "junk", repeated(n, c.elem))
			var got *msgs.InferRequest
			cost := allocated(func() {
				var err error
				got, err = msgs.DecodeInferRequest(b)
				require.NoError(t, err)
			})
			require.Equal(t, "req-1", got.ID)
			t.Logf("%d-byte request: %d bytes allocated (%d without the unknown key)", len(b), cost, baseline)
			require.Less(t, cost, baseline+64<<10, "the unknown key's value is not kept")
		})
	}
	// RequestID, which the node calls on a request it refuses, reads the
	// id alone.
	b := withKey(t, valid, "junk", repeated(n, 0x80))
	cost := allocated(func() { require.Equal(t, "req-1", msgs.RequestID(b)) })
	require.Less(t, cost, uint64(64<<10))
}

// A known key can hold only so many elements: the limit is checked before
// the array is allocated.
func TestElementLimit(t *testing.T) {
	const n = 7_900_000
	m := generic(t, mustMarshal(t, sampleRequest()))
	delete(m, "ego_history")
	b := withKey(t, encode(t, m), "ego_history", repeated(n, 0x80))
	cost := allocated(func() {
		_, err := msgs.DecodeInferRequest(b)
		requireFieldError(t, err, fmt.Sprintf("ego_history: the message holds more than %d array elements and map entries in the fields read (65536, and 1 per 64 bytes of message)",
			65536+len(b)/64), msgs.CodeBadRequest)
	})
	require.Less(t, cost, uint64(64<<10), "refused before allocating")
}

// The most a message can cost is bounded by a small multiple of its size:
// a request that holds as many empty maps in a known array as the limit
// allows, padded to 7.9 MB with an unknown key.
func TestWorstCaseCost(t *testing.T) {
	const size = 7_900_000
	m := generic(t, mustMarshal(t, sampleRequest()))
	delete(m, "ego_history")
	base := encode(t, m)
	room := 65536 + size/64 - 200 // the limit, less what the rest of the request keeps
	b := withKey(t, base, "ego_history", repeated(room, 0x80))
	pad := size - len(b) - 10
	b = withKey(t, b, "pad", append([]byte{0xc6, byte(pad >> 24), byte(pad >> 16), byte(pad >> 8), byte(pad)}, make([]byte, pad)...))
	require.InDelta(t, size, len(b), 100)
	cost := allocated(func() {
		_, err := msgs.DecodeInferRequest(b)
		requireFieldError(t, err, "ego_history[0].stamp_ns: required", msgs.CodeBadRequest)
	})
	t.Logf("%d-byte request with %d empty maps in ego_history: %d bytes allocated (%.1f× its size)", len(b), room, cost, float64(cost)/float64(len(b)))
	require.Less(t, cost, uint64(4*len(b)))
}

// A skipped value is still checked: malformed msgpack inside it is refused
// with its path, as anywhere else.
func TestSkippedValuesAreChecked(t *testing.T) {
	valid := mustMarshal(t, sampleRequest())
	cases := []struct {
		name  string
		value []byte
		want  string
	}{
		{"invalid code in an array", []byte{0x93, 0x01, 0x02, 0xc1}, "junk[2]: malformed msgpack: invalid code 0xc1"},
		{"short string in a map in a map", []byte{0x81, 0xa1, 'a', 0x81, 0xa1, 'b', 0xa5, 'x'},
			"junk.a.b: malformed msgpack: 5 bytes announced, 1 bytes left"},
		{"short value under a non-string key", []byte{0x81, 0x07, 0x92, 0x01},
			"junk[<non-string key>]: malformed msgpack: 2 array elements announced, 1 bytes left"},
		{"short key", []byte{0x81, 0xa4, 'k'}, "junk: malformed msgpack: 4 bytes announced, 1 bytes left"},
		{"huge map", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "junk: malformed msgpack: 4294967295 map entries announced, 0 bytes left"},
		{"truncated float", []byte{0x91, 0xcb, 0x01}, "junk[0]: malformed msgpack: unexpected end of data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := msgs.DecodeInferRequest(withKey(t, valid, "junk", c.value))
			requireFieldError(t, err, c.want, msgs.CodeBadRequest)
		})
	}
	// Well-formed values of every kind are skipped: nil, bool, ext, a map
	// with a bin key, a float.
	b := withKey(t, valid, "junk", []byte{0x94, 0xc0, 0xc3, 0xd4, 0x01, 0x02, 0x81, 0xc4, 0x01, 0x00, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0})
	got, err := msgs.DecodeInferRequest(b)
	require.NoError(t, err)
	require.Equal(t, "req-1", got.ID)
}
