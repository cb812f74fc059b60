package bf16z

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"vlanode/tensor"
	"vlanode/weights"
)

// Format constants. cuda/kernels/bf16z.cu repeats them (VLA_Z_*).
const (
	// MaxCodeLen is the longest codeword, in bits: a decoding table has
	// 2^MaxCodeLen entries of 16 bits (8 KiB, in a GPU block's shared
	// memory).
	MaxCodeLen = 12
	// Lanes is the number of interleaved streams of a warp-stream, one per
	// GPU thread of a warp.
	Lanes = 32
	// Steps is the number of symbols each lane of a full warp-stream
	// decodes.
	Steps = 256
	// StreamElems is the elements of a full warp-stream.
	StreamElems = Lanes * Steps
	// MaxTileElems bounds a tile's elements: a coded tile's checksum keys
	// each element by its 16-bit index in the tile. A tile is at most
	// MaxTileElems/StreamElems = 8 warp-streams, one GPU block of 8 warps.
	MaxTileElems = 1 << 16
	// LUTBytes is the size of a decoding table.
	LUTBytes = 2 << MaxCodeLen
	// HeaderBytes, TensorBytes and JobBytes are the sizes of the header,
	// of a tensor record and of a job in Unit.Data.
	HeaderBytes = 64
	TensorBytes = 64
	JobBytes    = 48
	// PayloadAlign aligns every table and payload in Unit.Data.
	PayloadAlign = 16
	// maxRawTileBytes bounds a raw tile: its checksum keys each byte by
	// its 24-bit index in the tile.
	maxRawTileBytes = 1 << 24
)

// magic starts every compressed unit; version is the format's.
var magic = [8]byte{'V', 'L', 'A', 'B', 'F', '1', '6', 'Z'}

const version = 1

// Kind says how a job's payload holds its tile.
type Kind uint32

const (
	// KindRaw: the tile's bytes, row after row.
	KindRaw Kind = 0
	// KindCoded: bf16 elements as sign-and-mantissa bytes plus
	// Huffman-coded exponents in interleaved warp-streams.
	KindCoded Kind = 1
)

// String names the kind: raw, coded.
func (k Kind) String() string {
	switch k {
	case KindRaw:
		return "raw"
	case KindCoded:
		return "coded"
	}
	return fmt.Sprintf("Kind(%d)", uint32(k))
}

// Job places one tile: where its payload lies in Unit.Data and where its
// rows go in the destination. Its 48-byte form in Unit.Data (and in any
// job table a GPU decodes from) is the fields in this order, little-endian:
// Src, Dst, LUT as u64, then Rows, Cols, Pitch, Kind, Sum, Bytes as u32.
type Job struct {
	Src   int64 // payload offset in Unit.Data, a multiple of PayloadAlign
	Dst   int64 // destination offset of the tile's first element
	LUT   int64 // decoding table's offset in Unit.Data (KindCoded); 0 for raw
	Rows  int   // tile rows
	Cols  int   // KindCoded: bf16 elements of a row; KindRaw: bytes of a row
	Pitch int64 // destination bytes from one row to the next
	Kind  Kind
	// Sum is the tile's checksum: the sum, modulo 2^32, of mix over the
	// decoded elements (coded: (index<<16 | bits), raw: (index<<8 | byte))
	// plus descHash of the other fields.
	Sum   uint32
	Bytes int64 // payload bytes
}

// Tensor describes how one entry of the raw layout is stored.
type Tensor struct {
	Name  string
	Entry int // index in Unit.Entries
	Coded bool
	// Rows and Cols view the tensor as a matrix: Rows = Shape[0] and Cols
	// the product of the other dimensions (1 × n for a vector, 1 × 1 for a
	// scalar). Tiles are TileRows × TileCols; the last row and column of
	// tiles may be smaller.
	Rows, Cols         int
	TileRows, TileCols int
	ESize              int // bytes of an element
	// FirstJob and NumJobs are the tensor's tiles in Unit.Jobs, row of
	// tiles after row of tiles.
	FirstJob, NumJobs int
	LUT               int64 // decoding table's offset in Unit.Data (Coded)
	// Stored is the bytes the tensor takes in Unit.Data: its decoding
	// table and payloads, with their alignment, and its jobs.
	Stored int64
}

// RowTiles and ColTiles count the tensor's tiles along each side.
func (t *Tensor) RowTiles() int { return ceilDiv(t.Rows, t.TileRows) }

// ColTiles counts the tensor's tiles along a row.
func (t *Tensor) ColTiles() int { return ceilDiv(t.Cols, t.TileCols) }

// Unit is one weights.Blob compressed: Data is what is moved (pinned host
// memory, the copy engine, a VRAM staging buffer) and decoded into a slot,
// where every tensor lands at its Entries offset as in the raw blob.
//
// Data holds, each at a multiple of PayloadAlign: a 64-byte header (with
// Data's size and a CRC-32C of the header, records and job table), a
// 64-byte record per entry, the job table (JobBytes a tile: the full
// unit's plan, which decodes every tensor into a slot of RawSize bytes),
// the decoding tables of the coded tensors, then the payloads in job
// order. See docs/compression.md.
type Unit struct {
	Name    string
	Data    []byte
	Entries []weights.Entry
	// RawSize is the raw blob's size: the slot bytes the unit decodes into.
	RawSize int64
	Tensors []Tensor
	// Jobs is the full unit's plan, as stored at JobsOffset in Data.
	Jobs       []Job
	JobsOffset int64
	bySrc      map[int64]int // job index by payload offset
}

// Size is the compressed size: len(Data).
func (u *Unit) Size() int64 { return int64(len(u.Data)) }

// Ratio is Size / RawSize (0 for an empty unit).
func (u *Unit) Ratio() float64 {
	if u.RawSize == 0 {
		return 0
	}
	return float64(u.Size()) / float64(u.RawSize)
}

// Coded reports whether any tensor is coded. A unit with none saves
// nothing: stream the raw blob instead.
func (u *Unit) Coded() bool {
	for i := range u.Tensors {
		if u.Tensors[i].Coded {
			return true
		}
	}
	return false
}

// Tensor returns the named tensor's record.
func (u *Unit) Tensor(name string) (*Tensor, error) {
	for i := range u.Tensors {
		if u.Tensors[i].Name == name {
			return &u.Tensors[i], nil
		}
	}
	return nil, fmt.Errorf("bf16z: unit %q: tensor %q %w", u.Name, name, weights.ErrNotFound)
}

// JobName names job i of the full plan for errors: unit, tensor, tile.
func (u *Unit) JobName(i int) string {
	for t := range u.Tensors {
		tt := &u.Tensors[t]
		if i < tt.FirstJob || i >= tt.FirstJob+tt.NumJobs || i >= len(u.Jobs) {
			continue
		}
		k := i - tt.FirstJob
		ct := tt.ColTiles()
		r0, c0 := k/ct*tt.TileRows, k%ct*tt.TileCols
		return fmt.Sprintf("unit %q tensor %q tile %d (rows [%d, %d), cols [%d, %d))", u.Name, tt.Name, k,
			r0, min(r0+tt.TileRows, tt.Rows), c0, min(c0+tt.TileCols, tt.Cols))
	}
	return fmt.Sprintf("unit %q job %d (of %d)", u.Name, i, len(u.Jobs))
}

// Locate names the tile whose payload a job (of any plan over u) decodes.
func (u *Unit) Locate(j Job) string {
	if i, ok := u.bySrc[j.Src]; ok {
		return u.JobName(i)
	}
	return fmt.Sprintf("unit %q: no tile has its payload at %d", u.Name, j.Src)
}

// ErrCorrupt is wrapped by every error about compressed data that is not
// what the encoder wrote: a bad header, table or job, a payload that does
// not decode, a checksum that does not match.
var ErrCorrupt = errors.New("corrupt compressed data")

// CorruptError says which tile of which tensor failed and why.
type CorruptError struct {
	Where  string // from Unit.JobName or Unit.Locate
	Reason string
}

// Error says where and why, and that the data is corrupt.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("bf16z: %s: %s: %v", e.Where, e.Reason, ErrCorrupt)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// mix is MurmurHash3's 32-bit finalizer, a bijection.
func mix(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	x *= 0xc2b2ae35
	x ^= x >> 16
	return x
}

// descHash hashes every field of j but Sum, so that a job that changed in
// transit fails its checksum. vla_z_desc_hash computes the same.
func descHash(j Job) uint32 {
	h := mix(uint32(j.Kind) ^ 0x9e3779b9)
	for _, v := range []uint64{uint64(j.Src), uint64(j.Dst), uint64(j.LUT)} {
		h = mix(h ^ uint32(v))
		h = mix(h ^ uint32(v>>32))
	}
	for _, v := range []uint32{uint32(j.Rows), uint32(j.Cols), uint32(j.Pitch), uint32(j.Bytes)} {
		h = mix(h ^ v)
	}
	return h
}

// Moved returns j at another destination (Dst, Pitch), its Sum adjusted:
// for plans that decode a tile elsewhere than the full unit's plan does.
func (j Job) Moved(dst, pitch int64) Job {
	k := j
	k.Dst, k.Pitch = dst, pitch
	k.Sum = j.Sum - descHash(j) + descHash(k)
	return k
}

// put writes j's 48-byte form into b.
func (j Job) put(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(j.Src))
	le.PutUint64(b[8:], uint64(j.Dst))
	le.PutUint64(b[16:], uint64(j.LUT))
	le.PutUint32(b[24:], uint32(j.Rows))
	le.PutUint32(b[28:], uint32(j.Cols))
	le.PutUint32(b[32:], uint32(j.Pitch))
	le.PutUint32(b[36:], uint32(j.Kind))
	le.PutUint32(b[40:], j.Sum)
	le.PutUint32(b[44:], uint32(j.Bytes))
}

// getJob reads a job's 48-byte form.
func getJob(b []byte) Job {
	le := binary.LittleEndian
	return Job{
		Src: int64(le.Uint64(b[0:])), Dst: int64(le.Uint64(b[8:])), LUT: int64(le.Uint64(b[16:])),
		Rows: int(le.Uint32(b[24:])), Cols: int(le.Uint32(b[28:])), Pitch: int64(le.Uint32(b[32:])),
		Kind: Kind(le.Uint32(b[36:])), Sum: le.Uint32(b[40:]), Bytes: int64(le.Uint32(b[44:])),
	}
}

// fits reports whether j's fields fit their stored widths.
func (j Job) fits() bool {
	const u32 = 1<<32 - 1
	return j.Src >= 0 && j.Dst >= 0 && j.LUT >= 0 && j.Rows >= 0 && j.Rows <= u32 && j.Cols >= 0 &&
		j.Cols <= u32 && j.Pitch >= 0 && j.Pitch <= u32 && j.Bytes >= 0 && j.Bytes <= u32
}

// MarshalJobs returns the table a GPU decodes jobs from (JobBytes each).
func MarshalJobs(jobs []Job) ([]byte, error) {
	b := make([]byte, len(jobs)*JobBytes)
	for i, j := range jobs {
		if !j.fits() {
			return nil, fmt.Errorf("bf16z: job %d %+v: a field does not fit its stored width", i, j)
		}
		j.put(b[i*JobBytes:])
	}
	return b, nil
}

// Payload geometry of a coded tile of n elements (1 ≤ n ≤ MaxTileElems):
// the word offset of each warp-stream and the end (u32 each, padded to
// PayloadAlign), the sign-and-mantissa bytes (a full warp-stream's
// StreamElems, the last one's rounded up to 128: a lane reads them four
// steps at a time), then the streams' 16-bit words.

// streams is the number of warp-streams of n elements.
func streams(n int) int { return ceilDiv(n, StreamElems) }

// offsetBytes is the size of the stream offsets of n elements.
func offsetBytes(n int) int { return alignTo(4*(streams(n)+1), PayloadAlign) }

// smBytes is the size of the sign-and-mantissa bytes of n elements.
func smBytes(n int) int {
	s := streams(n)
	return (s-1)*StreamElems + alignTo(n-(s-1)*StreamElems, 128)
}

// header is Data's first HeaderBytes.
type header struct {
	rawSize              int64
	tensors, jobs        int
	size                 int64 // len(Data)
	jobsOff, payloadOff  int64
	metaSum              uint32
	steps, lanes, maxLen int
}

func (h *header) put(b []byte) {
	le := binary.LittleEndian
	copy(b, magic[:])
	le.PutUint32(b[8:], version)
	le.PutUint32(b[12:], h.metaSum)
	le.PutUint64(b[16:], uint64(h.rawSize))
	le.PutUint32(b[24:], uint32(h.tensors))
	le.PutUint32(b[28:], uint32(h.jobs))
	le.PutUint64(b[32:], uint64(h.size))
	le.PutUint64(b[40:], uint64(h.jobsOff))
	le.PutUint64(b[48:], uint64(h.payloadOff))
	le.PutUint16(b[56:], uint16(h.steps))
	le.PutUint16(b[58:], uint16(h.lanes))
	le.PutUint16(b[60:], uint16(h.maxLen))
	le.PutUint16(b[62:], 0)
}

func getHeader(b []byte) header {
	le := binary.LittleEndian
	return header{
		metaSum: le.Uint32(b[12:]), rawSize: int64(le.Uint64(b[16:])),
		tensors: int(le.Uint32(b[24:])), jobs: int(le.Uint32(b[28:])),
		size: int64(le.Uint64(b[32:])), jobsOff: int64(le.Uint64(b[40:])),
		payloadOff: int64(le.Uint64(b[48:])),
		steps:      int(le.Uint16(b[56:])), lanes: int(le.Uint16(b[58:])), maxLen: int(le.Uint16(b[60:])),
	}
}

// putTensor writes tensor record t (entry e) into b.
func putTensor(b []byte, t *Tensor, e weights.Entry) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(t.Entry))
	kind := KindRaw
	if t.Coded {
		kind = KindCoded
	}
	le.PutUint32(b[4:], uint32(kind))
	le.PutUint32(b[8:], uint32(t.Rows))
	le.PutUint32(b[12:], uint32(t.Cols))
	le.PutUint32(b[16:], uint32(t.TileRows))
	le.PutUint32(b[20:], uint32(t.TileCols))
	le.PutUint32(b[24:], uint32(t.FirstJob))
	le.PutUint32(b[28:], uint32(t.NumJobs))
	le.PutUint64(b[32:], uint64(t.LUT))
	le.PutUint32(b[40:], uint32(t.ESize))
	le.PutUint32(b[44:], 0)
	le.PutUint64(b[48:], uint64(e.Offset))
	le.PutUint64(b[56:], uint64(e.Size))
}

// metaSum is the CRC-32C of the header (its sum field as zero), the tensor
// records and the job table.
func metaSum(data []byte, jobsEnd int64) uint32 {
	c := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	c.Write(data[:12])
	c.Write([]byte{0, 0, 0, 0})
	c.Write(data[16:jobsEnd])
	return c.Sum32()
}

// view is the matrix view of a shape: Shape[0] rows of the product of the
// other dimensions; a vector is one row, a scalar one element.
func view(shape []int) (rows, cols int) {
	n := tensor.NumElements(shape)
	if len(shape) < 2 {
		return 1, n
	}
	if shape[0] == 0 {
		return 0, 0
	}
	return shape[0], n / shape[0]
}

// tileShape is the tile of a rows × cols tensor whose tiles are tileCols
// wide (0: whole rows): as many rows as MaxTileElems allows.
func tileShape(cols, tileCols int) (tr, tc int) {
	tc = cols
	if tileCols > 0 && tileCols < cols {
		tc = tileCols
	}
	tc = max(min(tc, MaxTileElems), 1)
	return max(MaxTileElems/tc, 1), tc
}

// tileJob is the geometry of tile k of t (entry offset off): every field
// of its job but Src, LUT, Kind, Sum and Bytes, plus its element count.
func tileJob(t *Tensor, off int64, k int) (j Job, n int) {
	ct := t.ColTiles()
	a, b := k/ct, k%ct
	r0, c0 := a*t.TileRows, b*t.TileCols
	rows, cols := min(t.TileRows, t.Rows-r0), min(t.TileCols, t.Cols-c0)
	j = Job{
		Dst:   off + (int64(r0)*int64(t.Cols)+int64(c0))*int64(t.ESize),
		Rows:  rows,
		Cols:  cols,
		Pitch: int64(t.Cols) * int64(t.ESize),
	}
	return j, rows * cols
}

// Parse checks data, a unit's compressed bytes, against the raw layout it
// decodes into (the entries and size of the raw blob) and returns the
// unit. Every error wraps ErrCorrupt. Payloads are checked when decoded.
func Parse(name string, data []byte, entries []weights.Entry, rawSize int64) (*Unit, error) {
	bad := func(format string, a ...any) error {
		return &CorruptError{Where: fmt.Sprintf("unit %q", name), Reason: fmt.Sprintf(format, a...)}
	}
	if len(data) < HeaderBytes {
		return nil, bad("%d bytes, shorter than the %d-byte header", len(data), HeaderBytes)
	}
	if [8]byte(data[:8]) != magic {
		return nil, bad("no bf16z magic (%q)", data[:8])
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != version {
		return nil, bad("format version %d, this reader knows %d", v, version)
	}
	h := getHeader(data)
	size := int64(len(data))
	switch {
	case h.steps != Steps || h.lanes != Lanes || h.maxLen != MaxCodeLen:
		return nil, bad("geometry %d steps × %d lanes, codewords ≤ %d bits: this reader knows %d × %d, ≤ %d",
			h.steps, h.lanes, h.maxLen, Steps, Lanes, MaxCodeLen)
	case h.rawSize != rawSize:
		return nil, bad("decodes into %d bytes, the raw blob has %d", h.rawSize, rawSize)
	case h.tensors != len(entries):
		return nil, bad("%d tensor records for %d entries", h.tensors, len(entries))
	case h.size != size:
		return nil, bad("%d bytes, the header says %d (truncated or padded)", size, h.size)
	case h.jobsOff != HeaderBytes+int64(h.tensors)*TensorBytes:
		return nil, bad("job table at %d, want %d", h.jobsOff, HeaderBytes+int64(h.tensors)*TensorBytes)
	}
	jobsEnd := h.jobsOff + int64(h.jobs)*JobBytes
	if jobsEnd > size || h.payloadOff != int64(alignTo64(jobsEnd, PayloadAlign)) || h.payloadOff > size {
		return nil, bad("job table [%d, %d) and payloads at %d in %d bytes", h.jobsOff, jobsEnd, h.payloadOff, size)
	}
	if got := metaSum(data, jobsEnd); got != h.metaSum {
		return nil, bad("header, tensor or job table checksum %#08x, stored %#08x", got, h.metaSum)
	}
	u := &Unit{
		Name: name, Data: data, Entries: entries, RawSize: rawSize,
		Tensors: make([]Tensor, len(entries)), Jobs: make([]Job, h.jobs), JobsOffset: h.jobsOff,
		bySrc: make(map[int64]int, h.jobs),
	}
	for i := range u.Jobs {
		u.Jobs[i] = getJob(data[h.jobsOff+int64(i)*JobBytes:])
	}
	le := binary.LittleEndian
	nextJob := 0
	for i, e := range entries {
		r := data[HeaderBytes+i*TensorBytes:]
		t := &u.Tensors[i]
		*t = Tensor{
			Name: e.Name, Entry: int(le.Uint32(r[0:])), Coded: Kind(le.Uint32(r[4:])) == KindCoded,
			Rows: int(le.Uint32(r[8:])), Cols: int(le.Uint32(r[12:])),
			TileRows: int(le.Uint32(r[16:])), TileCols: int(le.Uint32(r[20:])),
			FirstJob: int(le.Uint32(r[24:])), NumJobs: int(le.Uint32(r[28:])),
			LUT: int64(le.Uint64(r[32:])), ESize: int(le.Uint32(r[40:])),
		}
		kind, off, bytes := Kind(le.Uint32(r[4:])), int64(le.Uint64(r[48:])), int64(le.Uint64(r[56:]))
		rows, cols := view(e.Shape)
		switch {
		case t.Entry != i:
			return nil, bad("tensor record %d names entry %d", i, t.Entry)
		case kind != KindRaw && kind != KindCoded:
			return nil, bad("tensor %q: kind %d", e.Name, kind)
		case off != e.Offset || bytes != e.Size:
			return nil, bad("tensor %q at [%d, +%d), the raw layout has [%d, +%d)", e.Name, off, bytes, e.Offset, e.Size)
		case e.Offset < 0 || e.Size < 0 || e.Offset > rawSize || e.Size > rawSize-e.Offset:
			return nil, bad("tensor %q: [%d, +%d) outside the %d-byte raw blob", e.Name, e.Offset, e.Size, rawSize)
		case t.ESize != e.DType.Size() || t.ESize == 0:
			return nil, bad("tensor %q: element size %d for %v", e.Name, t.ESize, e.DType)
		case t.Coded && e.DType != tensor.BF16:
			return nil, bad("tensor %q: coded, but %v (only bf16 is)", e.Name, e.DType)
		case t.Rows != rows || t.Cols != cols || int64(rows)*int64(cols)*int64(t.ESize) != e.Size:
			return nil, bad("tensor %q: viewed as %d × %d, its shape %v of %v is %d × %d", e.Name, t.Rows, t.Cols, e.Shape, e.DType, rows, cols)
		case t.FirstJob != nextJob:
			return nil, bad("tensor %q: first job %d, want %d", e.Name, t.FirstJob, nextJob)
		}
		want := 0
		if rows*cols > 0 {
			if t.TileCols < 1 || t.TileCols > cols || t.TileRows < 1 || t.TileRows*t.TileCols > MaxTileElems {
				return nil, bad("tensor %q: tiles of %d × %d for %d × %d", e.Name, t.TileRows, t.TileCols, rows, cols)
			}
			want = t.RowTiles() * t.ColTiles()
		}
		if t.NumJobs != want || nextJob+want > h.jobs {
			return nil, bad("tensor %q: %d jobs from %d, its tiles need %d (table of %d)", e.Name, t.NumJobs, t.FirstJob, want, h.jobs)
		}
		if t.Coded {
			if t.LUT < h.payloadOff || t.LUT%PayloadAlign != 0 || t.LUT > size-LUTBytes {
				return nil, bad("tensor %q: decoding table at %d (payloads [%d, %d))", e.Name, t.LUT, h.payloadOff, size)
			}
			t.Stored += LUTBytes
		} else if t.LUT != 0 {
			return nil, bad("tensor %q: raw, with a decoding table at %d", e.Name, t.LUT)
		}
		for k := 0; k < t.NumJobs; k++ {
			ji := t.FirstJob + k
			j := u.Jobs[ji]
			g, n := tileJob(t, e.Offset, k)
			badJob := func(format string, a ...any) error { // named lazily: only on failure
				return &CorruptError{Where: u.JobName(ji), Reason: fmt.Sprintf(format, a...)}
			}
			if j.Dst != g.Dst || j.Rows != g.Rows || j.Pitch != g.Pitch ||
				(j.Kind == KindCoded && j.Cols != g.Cols) || (j.Kind == KindRaw && j.Cols != g.Cols*t.ESize) {
				return nil, badJob("job places %d × %d at %d (pitch %d), the tile is %d × %d at %d (pitch %d)",
					j.Rows, j.Cols, j.Dst, j.Pitch, g.Rows, g.Cols, g.Dst, g.Pitch)
			}
			if j.Src < h.payloadOff || j.Src%PayloadAlign != 0 || j.Src > size || j.Bytes > size-j.Src {
				return nil, badJob("payload [%d, +%d) outside [%d, %d)", j.Src, j.Bytes, h.payloadOff, size)
			}
			switch j.Kind {
			case KindRaw:
				if j.LUT != 0 || j.Bytes != int64(n*t.ESize) {
					return nil, badJob("raw job of %d bytes with table %d, the tile has %d bytes", j.Bytes, j.LUT, n*t.ESize)
				}
			case KindCoded:
				if !t.Coded || j.LUT != t.LUT {
					return nil, badJob("coded job with table %d in a tensor whose table is %d (coded %v)", j.LUT, t.LUT, t.Coded)
				}
				if fixed := int64(offsetBytes(n) + smBytes(n)); j.Bytes < fixed || (j.Bytes-fixed)%2 != 0 {
					return nil, badJob("coded payload of %d bytes for %d elements (at least %d, an even number of stream bytes more)", j.Bytes, n, fixed)
				}
			default:
				return nil, badJob("job kind %d", j.Kind)
			}
			if _, dup := u.bySrc[j.Src]; dup {
				return nil, badJob("payload at %d shared with another job", j.Src)
			}
			u.bySrc[j.Src] = ji
			t.Stored += alignTo64(j.Bytes, PayloadAlign) + JobBytes
		}
		nextJob += t.NumJobs
	}
	if nextJob != h.jobs {
		return nil, bad("the tensors use %d of the %d jobs", nextJob, h.jobs)
	}
	return u, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func alignTo(n, a int) int { return (n + a - 1) / a * a }

func alignTo64(n, a int64) int64 { return (n + a - 1) / a * a }
