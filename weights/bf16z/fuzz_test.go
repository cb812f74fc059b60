package bf16z

import (
	"testing"

	"vlanode/tensor"
)

// fuzzUnit is the small unit whose data seeds the fuzzers: a coded tensor
// of three warp-streams and a raw one.
func fuzzUnit(t testing.TB) *Unit {
	b := blob(t, "fuzz", 31, []spec{
		{"w", tensor.BF16, []int{40, 500}, normal(0, 0.05)},
		{"v", tensor.BF16, []int{3, 7}, normal(0, 1)},
	})
	u, err := Encode(b, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !u.Tensors[0].Coded || u.Tensors[1].Coded {
		t.Fatalf("fuzz unit: want w coded and v raw: %+v", u.Tensors)
	}
	return u
}

// FuzzDecode decodes hostile data against a fixed raw layout. The
// metadata checksum is recomputed first, so that mutations of the header,
// records and jobs reach Parse's checks and the decoder. Parse and Decode
// may fail, never panic (a slice out of range would).
//
//	go test ./weights/bf16z -run '^$' -fuzz FuzzDecode -fuzztime 60s
func FuzzDecode(f *testing.F) {
	u := fuzzUnit(f)
	f.Add(u.Data)
	f.Add(u.Data[:len(u.Data)/2])
	entries, rawSize := u.Entries, u.RawSize
	f.Fuzz(func(t *testing.T, data []byte) {
		data = append([]byte(nil), data...)
		resum(data)
		v, err := Parse("fuzz", data, entries, rawSize)
		if err != nil {
			return
		}
		dst := make([]byte, rawSize)
		_ = v.Decode(dst, 1)
	})
}

// FuzzJob decodes one hostile job from valid data into a small
// destination: checkJob must keep every read and write in bounds.
func FuzzJob(f *testing.F) {
	u := fuzzUnit(f)
	for _, j := range u.Jobs {
		f.Add(uint64(j.Src), uint64(j.Dst), uint64(j.LUT), uint32(j.Rows), uint32(j.Cols), uint32(j.Pitch), uint32(j.Kind), j.Sum, uint32(j.Bytes))
	}
	f.Fuzz(func(t *testing.T, src, dst, lut uint64, rows, cols, pitch, kind, sum, nbytes uint32) {
		// The fields as getJob reads them from a job table.
		j := Job{Src: int64(src), Dst: int64(dst), LUT: int64(lut), Rows: int(rows), Cols: int(cols),
			Pitch: int64(pitch), Kind: Kind(kind), Sum: sum, Bytes: int64(nbytes)}
		out := make([]byte, u.RawSize)
		_ = decodeJob(u.Data, j, out, &decScratch{})
	})
}

// TestFuzzUnitDecodes keeps the fuzzers' seed meaningful.
func TestFuzzUnitDecodes(t *testing.T) {
	u := fuzzUnit(t)
	dst := make([]byte, u.RawSize)
	if err := u.Decode(dst, 1); err != nil {
		t.Fatal(err)
	}
}
