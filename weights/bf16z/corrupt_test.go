package bf16z

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

// smallUnit is a unit with two coded tensors of several tiles and
// warp-streams and a raw one.
func smallUnit(t testing.TB) (*Unit, []byte) {
	t.Helper()
	b := blob(t, "layers.3", 21, []spec{
		{"a", tensor.BF16, []int{40, 4000}, normal(0, 0.02)}, // 3 tiles (16 rows each)
		{"norm", tensor.BF16, []int{4000}, normal(1, 0.05)},  // raw
		{"b", tensor.BF16, []int{30000}, normal(0, 0.3)},     // 1 tile, 4 streams
	})
	u, err := Encode(b, Options{Workers: 1})
	require.NoError(t, err)
	require.True(t, u.Tensors[0].Coded && !u.Tensors[1].Coded && u.Tensors[2].Coded)
	return u, b.Data
}

// resum rewrites the metadata checksum of data (after a change to its
// header, records or job table), so that the change reaches the decoder.
func resum(data []byte) {
	if len(data) < HeaderBytes {
		return
	}
	h := getHeader(data)
	end := h.jobsOff + int64(h.jobs)*JobBytes
	if h.jobsOff < 16 || end < h.jobsOff || end > int64(len(data)) {
		return
	}
	binary.LittleEndian.PutUint32(data[12:], metaSum(data, end))
}

// decodeCopy parses a copy of u's data with change applied and decodes it
// into a buffer of 0xAA bytes.
func decodeCopy(u *Unit, change func(d []byte)) ([]byte, error) {
	d := append([]byte(nil), u.Data...)
	change(d)
	v, err := Parse(u.Name, d, u.Entries, u.RawSize)
	if err != nil {
		return nil, err
	}
	out := bytes.Repeat([]byte{0xAA}, int(u.RawSize))
	return out, v.Decode(out, 1)
}

// TestBitFlipsDetected flips single bits all over a unit: each flip is
// either reported (ErrCorrupt, naming the unit) or harmless (a padding
// bit, an unused table entry: the output is exact).
func TestBitFlipsDetected(t *testing.T) {
	u, raw := smallUnit(t)
	r := rand.New(rand.NewPCG(1, 1))
	reported, harmless := 0, 0
	for trial := 0; trial < 400; trial++ {
		pos := r.IntN(len(u.Data))
		bit := byte(1) << r.IntN(8)
		out, err := decodeCopy(u, func(d []byte) { d[pos] ^= bit })
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt, "byte %d bit %#x", pos, bit)
			require.Contains(t, err.Error(), `unit "layers.3"`)
			reported++
			continue
		}
		require.True(t, bytes.Equal(raw, out), "flip of byte %d bit %#x went unreported and changed the output", pos, bit)
		harmless++
	}
	t.Logf("%d flips reported, %d harmless", reported, harmless)
}

// TestPayloadFlipsDetected flips bits of one coded tile's payload
// (every bit of its stream offsets and of its first stream words, and a
// sample of the rest: sign-and-mantissa bytes, words), past the metadata
// checksum: the tile's checksum or its structure must catch each one that
// changes an element, and the message names the tensor and tile.
func TestPayloadFlipsDetected(t *testing.T) {
	u, raw := smallUnit(t)
	j := u.Jobs[u.Tensors[2].FirstJob]
	require.Equal(t, KindCoded, j.Kind)
	n := j.Rows * j.Cols
	words := j.Src + int64(offsetBytes(n)+smBytes(n))
	var bits []int64 // bit indices from j.Src
	for b := int64(0); b < 8*int64(offsetBytes(n)); b++ {
		bits = append(bits, b)
	}
	for b := 8 * (words - j.Src); b < 8*(words-j.Src+128); b++ {
		bits = append(bits, b)
	}
	r := rand.New(rand.NewPCG(2, 2))
	for i := 0; i < 3000; i++ {
		bits = append(bits, r.Int64N(8*j.Bytes))
	}
	v := *u
	v.Data = append([]byte(nil), u.Data...)
	e := u.Entries[2]
	out := make([]byte, u.RawSize)
	reported := 0
	for _, b := range bits {
		pos, mask := j.Src+b/8, byte(1)<<(b%8)
		v.Data[pos] ^= mask
		err := v.DecodeJobs(out, []Job{j}, 1)
		v.Data[pos] ^= mask
		if err == nil {
			require.True(t, bytes.Equal(raw[e.Offset:e.Offset+e.Size], out[e.Offset:e.Offset+e.Size]),
				"flip of payload bit %d went unreported", b)
			continue
		}
		reported++
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), `tensor "b" tile 0`)
	}
	t.Logf("%d of %d flips reported, the others harmless", reported, len(bits))
}

// TestFailingTileNotWritten: the tile that fails keeps the destination's
// bytes; the others decode.
func TestFailingTileNotWritten(t *testing.T) {
	u, raw := smallUnit(t)
	tt := u.Tensors[0]
	j := u.Jobs[tt.FirstJob+1]
	n := int64(j.Rows * j.Cols)
	out, err := decodeCopy(u, func(d []byte) { d[j.Src+int64(offsetBytes(int(n)))+1000] ^= 0x40 }) // a sign-and-mantissa byte of tile 1
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), `tensor "a" tile 1 (rows [16, 32), cols [0, 4000))`)
	var ce *CorruptError
	require.True(t, errors.As(err, &ce))
	for r := 0; r < j.Rows; r++ {
		row := out[j.Dst+int64(r)*j.Pitch : j.Dst+int64(r)*j.Pitch+int64(2*j.Cols)]
		require.Equal(t, bytes.Repeat([]byte{0xAA}, len(row)), row, "row %d of the failing tile was written", r)
	}
	e := u.Entries[0]
	assert.Equal(t, raw[e.Offset:j.Dst], out[e.Offset:j.Dst], "tile 0")
	end := j.Dst + int64(j.Rows)*j.Pitch
	assert.Equal(t, raw[end:e.Offset+e.Size], out[end:e.Offset+e.Size], "tile 2")
}

// TestMetadataCorruption: a changed header, record or job is refused by
// Parse (its checksum); with the checksum recomputed, by Parse's checks or
// the tile checksum, which covers every job field.
func TestMetadataCorruption(t *testing.T) {
	u, raw := smallUnit(t)
	jobAt := func(i int, field int) int { return int(u.JobsOffset) + i*JobBytes + field }
	for _, tc := range []struct {
		name string
		pos  int
	}{
		{"magic", 0}, {"version", 8}, {"raw size", 16}, {"tensor count", 24}, {"job count", 28},
		{"data size", 32}, {"job table offset", 40}, {"payload offset", 48}, {"steps", 56},
		{"record entry", HeaderBytes}, {"record kind", HeaderBytes + 4}, {"record rows", HeaderBytes + 8},
		{"record tile rows", HeaderBytes + 16}, {"record first job", HeaderBytes + TensorBytes + 24},
		{"record table", HeaderBytes + 32}, {"record offset", HeaderBytes + 48},
		{"job src", jobAt(1, 0)}, {"job dst", jobAt(1, 8)}, {"job table", jobAt(1, 16)}, {"job rows", jobAt(1, 24)},
		{"job cols", jobAt(1, 28)}, {"job pitch", jobAt(1, 32)}, {"job kind", jobAt(1, 36)},
		{"job sum", jobAt(1, 40)}, {"job bytes", jobAt(1, 44)}, {"raw job sum", jobAt(3, 40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeCopy(u, func(d []byte) { d[tc.pos] ^= 0x10 })
			require.ErrorIs(t, err, ErrCorrupt)
			out, err := decodeCopy(u, func(d []byte) { d[tc.pos] ^= 0x10; resum(d) })
			if err == nil {
				assert.True(t, bytes.Equal(raw, out))
				t.Fatalf("changed %s decoded without an error", tc.name)
			}
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// TestJobFieldsInChecksum: a job changed after parsing (as a copy to the
// GPU might change it) fails its tile's checksum, field by field, and a
// job moved by Job.Moved does not.
func TestJobFieldsInChecksum(t *testing.T) {
	u, _ := smallUnit(t)
	j := u.Jobs[1]
	dst := make([]byte, u.RawSize+4096)
	for _, change := range []func(k *Job){
		func(k *Job) { k.Dst += 2 },
		func(k *Job) { k.Pitch += 2 },
		func(k *Job) { k.Sum++ },
		func(k *Job) { k.Rows-- },
		func(k *Job) { k.Cols-- },
		func(k *Job) { k.LUT += 16 },
		func(k *Job) { k.Bytes += 2 },
	} {
		k := j
		change(&k)
		err := u.DecodeJobs(dst, []Job{k}, 1)
		require.ErrorIs(t, err, ErrCorrupt, "%+v", k)
	}
	require.NoError(t, u.DecodeJobs(dst, []Job{j.Moved(j.Dst+4096, j.Pitch)}, 1))
}

// TestTruncated: every truncation of Data is refused, and so is a
// payload cut short after parsing.
func TestTruncated(t *testing.T) {
	u, _ := smallUnit(t)
	for _, n := range []int{0, 10, HeaderBytes, HeaderBytes + 5, int(u.JobsOffset) + 7, len(u.Data) / 2, len(u.Data) - 16, len(u.Data) - 1} {
		_, err := Parse(u.Name, u.Data[:n], u.Entries, u.RawSize)
		require.ErrorIs(t, err, ErrCorrupt, "%d of %d bytes", n, len(u.Data))
	}
	_, err := Parse(u.Name, append(append([]byte(nil), u.Data...), 0), u.Entries, u.RawSize)
	require.ErrorIs(t, err, ErrCorrupt, "one byte too many")

	// A unit parsed whole whose bytes are then cut (a short copy).
	short := &Unit{}
	*short = *u
	last := u.Jobs[len(u.Jobs)-1]
	short.Data = u.Data[:last.Src+last.Bytes/2]
	err = short.Decode(make([]byte, u.RawSize), 1)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), `tensor "b"`)
}

// TestParseRefusesForeignLayout: data decoded against the wrong entries.
func TestParseRefusesForeignLayout(t *testing.T) {
	u, _ := smallUnit(t)
	other := append(u.Entries[:0:0], u.Entries...)
	other[1].Offset += 256
	_, err := Parse(u.Name, u.Data, other, u.RawSize)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = Parse(u.Name, u.Data, u.Entries, u.RawSize+256)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = Parse(u.Name, u.Data, u.Entries[:2], u.RawSize)
	require.ErrorIs(t, err, ErrCorrupt)
}

// TestEmptyWarpStream: stream offsets that give a warp-stream no words
// (found by the kernels' hostile test: the Go decoder read past them).
func TestEmptyWarpStream(t *testing.T) {
	u, _ := smallUnit(t)
	j := u.Jobs[u.Tensors[2].FirstJob]
	for _, k := range []int{0, 1, 3} {
		v := *u
		v.Data = append([]byte(nil), u.Data...)
		w := binary.LittleEndian.Uint32(v.Data[j.Src+int64(4*k):])
		binary.LittleEndian.PutUint32(v.Data[j.Src+int64(4*k+4):], w) // stream k ends where it starts
		err := v.DecodeJobs(make([]byte, u.RawSize), []Job{j}, 1)
		require.ErrorIs(t, err, ErrCorrupt, "warp-stream %d", k)
		require.Contains(t, err.Error(), `tensor "b" tile 0`)
	}
}

// TestDecodeStreamHostile: random words, bytes and tables never make the
// stream decoder read or write out of bounds.
func TestDecodeStreamHostile(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	var lut [1 << MaxCodeLen]uint16
	for trial := 0; trial < 200; trial++ {
		for i := range lut {
			lut[i] = uint16(r.Uint32())
			if r.IntN(2) == 0 {
				lut[i] = lut[i]&0xff | uint16(1+r.IntN(MaxCodeLen))<<8
			}
		}
		n := 1 + r.IntN(StreamElems)
		words := make([]uint16, 1+r.IntN(4000)) // the last is the zero after the words
		for i := range words[:len(words)-1] {
			words[i] = uint16(r.Uint32())
		}
		sm := make([]byte, smBytes(n))
		out := make([]uint16, n)
		_, _ = decodeStream(out, sm, words, &lut, 0) // any outcome but a panic
	}
}

func ExampleCorruptError() {
	err := &CorruptError{Where: `unit "vlm.layers.3" tensor "mlp.down_proj.weight" tile 7 (rows [0, 5), cols [0, 12288))`, Reason: "checksum 0x1234abcd, stored 0x0badf00d"}
	fmt.Println(strings.ReplaceAll(err.Error(), ": ", ":\n  "))
	fmt.Println(errors.Is(err, ErrCorrupt))
	// Output:
	// bf16z:
	//   unit "vlm.layers.3" tensor "mlp.down_proj.weight" tile 7 (rows [0, 5), cols [0, 12288)):
	//   checksum 0x1234abcd, stored 0x0badf00d:
	//   corrupt compressed data
	// true
}
