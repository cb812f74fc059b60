package msgs_test

import (
	"testing"

	"vlanode/msgs"
)

// BenchmarkDecodeInferRequest decodes the standard workload's request with
// 16 JPEG frames of 200 kB each.
func BenchmarkDecodeInferRequest(b *testing.B) {
	r := sampleRequest()
	for i := range r.Frames {
		f := &r.Frames[i]
		f.Encoding, f.Width, f.Height, f.Data = msgs.EncodingJPEG, 1920, 1080, make([]byte, 200_000)
	}
	data := mustMarshal(b, r)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := msgs.DecodeInferRequest(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshalPlan encodes a 64-waypoint plan.
func BenchmarkMarshalPlan(b *testing.B) {
	p := samplePlan()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := msgs.Marshal(&p); err != nil {
			b.Fatal(err)
		}
	}
}
