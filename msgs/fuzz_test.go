package msgs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// The fuzz targets check that decoding never panics, that every failure is
// a *FieldError, and that whatever decodes re-encodes to bytes that decode
// to an equal value. Run them with
//
//	go test -run='^$' -fuzz=FuzzDecodeInferRequest -fuzztime=30s ./msgs
//	go test -run='^$' -fuzz=FuzzDecodeFrame -fuzztime=30s ./msgs
//
// Seeds are added below and kept under testdata/fuzz.

func FuzzDecodeInferRequest(f *testing.F) {
	small := msgs.InferRequest{ID: "r", Frames: []msgs.Frame{rawFrame("front_wide_120fov", t0, 2, 1)},
		EgoHistory: []msgs.EgoPose{{StampNs: t0, Rot: identity}}, DeadlineMs: 100}
	f.Add(mustMarshal(f, small))
	f.Add(mustMarshal(f, msgs.InferRequest{ID: "r", UseLatest: true, Prompt: "p"}))
	two := msgs.InferRequest{ID: "r2", Frames: []msgs.Frame{
		{Camera: "a", StampNs: 1, Encoding: msgs.EncodingMono8, Width: 1, Height: 2, Step: 2, Data: []byte{1, 2, 3, 4}},
		{Camera: "b", StampNs: 2, Encoding: msgs.EncodingPNG, Width: 9, Height: 9, Data: []byte{0x89}},
	}, EgoHistory: []msgs.EgoPose{{StampNs: 1, XYZ: [3]float64{-1.5, 0.25, 0}, Rot: identity}}, MaxReasoningTokens: 21}
	f.Add(mustMarshal(f, two))
	f.Add(encode(f, map[string]any{"v": 1, "id": "r", "use_latest": true, "ego_history": []any{
		map[string]any{"stamp_ns": uint64(5), "xyz": []any{float32(1), int8(2), 3.5}, "rot": []any{1, 0, 0, 0, 1, 0, 0, 0, 1}},
	}, "extra": map[string]any{"k": []any{nil, true}}}))
	f.Add([]byte{0x81, 0xa1, 'v', 0x01})
	f.Add([]byte{0xc1})
	// Unknown keys, skipped unread: containers, a non-string key, an ext.
	f.Add(withKey(f, mustMarshal(f, small), "junk", []byte{0x93, 0x80, 0x90, 0x81, 0x07, 0xd4, 0x01, 0x02}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := msgs.DecodeInferRequest(b)
		if err != nil {
			var fe *msgs.FieldError
			require.ErrorAs(t, err, &fe)
			require.Nil(t, r)
			return
		}
		again, err := msgs.DecodeInferRequest(mustMarshal(t, r))
		require.NoError(t, err)
		require.Equal(t, r, again)
	})
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(mustMarshal(f, rawFrame("front_wide_120fov", t0, 3, 2)))
	padded := rawFrame("cross_left_120fov", t0, 2, 2)
	padded.Encoding, padded.Step, padded.Data = msgs.EncodingMono8, 4, make([]byte, 8)
	f.Add(mustMarshal(f, padded))
	f.Add(mustMarshal(f, msgs.Frame{Camera: "front_tele_30fov", StampNs: t0, Seq: 9, Encoding: msgs.EncodingJPEG,
		Width: 1920, Height: 1080, Data: []byte{0xff, 0xd8, 0xff, 0xd9}}))
	f.Add(encode(f, map[string]any{"v": 1, "camera": "c", "stamp_ns": 1, "encoding": "png", "width": 1, "height": 1,
		"data": "not bin"}))
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := msgs.DecodeFrame(b)
		if err != nil {
			var fe *msgs.FieldError
			require.ErrorAs(t, err, &fe)
			require.Nil(t, fr)
			return
		}
		again, err := msgs.DecodeFrame(mustMarshal(t, fr))
		require.NoError(t, err)
		require.Equal(t, fr, again)
	})
}
