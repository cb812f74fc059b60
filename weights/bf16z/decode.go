package bf16z

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sort"
)

// decScratch is one decoding worker's reusable memory.
type decScratch struct {
	lut   [1 << MaxCodeLen]uint16
	vals  []uint16
	words []uint16 // a warp-stream's words and a zero
}

// Decode decodes the whole unit into dst[:RawSize] through the full plan
// (u.Jobs) and zeroes the bytes between tensors, so that dst[:RawSize]
// equals the raw blob. It uses up to workers goroutines (0: GOMAXPROCS).
// A tile that fails its checks or checksum is not written; the error
// names the first such tile and wraps ErrCorrupt.
func (u *Unit) Decode(dst []byte, workers int) error {
	if int64(len(dst)) < u.RawSize {
		return fmt.Errorf("bf16z: unit %q: decoding %d bytes into %d", u.Name, u.RawSize, len(dst))
	}
	dst = dst[:u.RawSize]
	es := append(u.Entries[:0:0], u.Entries...)
	sort.Slice(es, func(i, j int) bool { return es[i].Offset < es[j].Offset })
	var end int64
	for _, e := range es {
		if e.Offset > end {
			clear(dst[end:e.Offset])
		}
		end = max(end, e.Offset+e.Size)
	}
	clear(dst[end:])
	return u.DecodeJobs(dst, u.Jobs, workers)
}

// DecodeJobs decodes a plan over u (u.Jobs, or one from Plan) into dst.
// It checks every job against dst and Data, and every tile's checksum
// before writing it, so that a failing tile leaves its rectangle of dst as
// it was; the error names the first failing tile and how many failed.
func (u *Unit) DecodeJobs(dst []byte, jobs []Job, workers int) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	scratch := make([]*decScratch, max(workers, 1))
	errs := make([]error, len(jobs))
	parallel(len(jobs), workers, func(w, i int) {
		if scratch[w] == nil {
			scratch[w] = &decScratch{}
		}
		if reason := decodeJob(u.Data, jobs[i], dst, scratch[w]); reason != "" {
			errs[i] = &CorruptError{Where: u.Locate(jobs[i]), Reason: reason}
		}
	})
	var first error
	failed := 0
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 1 {
		return fmt.Errorf("%w (and %d more of the %d tiles)", first, failed-1, len(jobs))
	}
	return first
}

// checkJob checks j against the sizes of the compressed data and of the
// destination, as the GPU kernel does (vla_z_check); "" when it is sound.
func checkJob(j Job, dataLen, dstLen int64) string {
	if j.Rows < 1 || j.Cols < 1 || j.Pitch < 0 || j.Dst < 0 || j.Src < 0 || j.Bytes < 0 || j.LUT < 0 {
		return fmt.Sprintf("job %d × %d at %d (pitch %d) from [%d, +%d)", j.Rows, j.Cols, j.Dst, j.Pitch, j.Src, j.Bytes)
	}
	es := int64(1)
	if j.Kind == KindCoded {
		es = 2
	}
	rowBytes := int64(j.Cols) * es
	if j.Rows > 1 && rowBytes > j.Pitch {
		return fmt.Sprintf("rows of %d bytes %d bytes apart", rowBytes, j.Pitch)
	}
	if j.Dst > dstLen || int64(j.Rows-1)*j.Pitch+rowBytes > dstLen-j.Dst {
		return fmt.Sprintf("%d rows of %d bytes from %d (pitch %d) overrun the %d-byte destination", j.Rows, rowBytes, j.Dst, j.Pitch, dstLen)
	}
	if j.Src%PayloadAlign != 0 || j.Src > dataLen || j.Bytes > dataLen-j.Src {
		return fmt.Sprintf("payload [%d, +%d) outside the %d bytes (or not %d-aligned)", j.Src, j.Bytes, dataLen, PayloadAlign)
	}
	n := int64(j.Rows) * int64(j.Cols)
	switch j.Kind {
	case KindRaw:
		if j.Bytes != n || n > maxRawTileBytes {
			return fmt.Sprintf("raw payload of %d bytes for a %d-byte tile (at most %d)", j.Bytes, n, maxRawTileBytes)
		}
	case KindCoded:
		if n > MaxTileElems {
			return fmt.Sprintf("coded tile of %d elements (at most %d)", n, MaxTileElems)
		}
		if j.Dst%2 != 0 || j.Pitch%2 != 0 {
			return fmt.Sprintf("bf16 rows at %d, pitch %d: not 2-byte aligned", j.Dst, j.Pitch)
		}
		if j.LUT%PayloadAlign != 0 || j.LUT > dataLen-LUTBytes {
			return fmt.Sprintf("decoding table at %d outside the %d bytes (or not %d-aligned)", j.LUT, dataLen, PayloadAlign)
		}
		if fixed := int64(offsetBytes(int(n)) + smBytes(int(n))); j.Bytes < fixed || (j.Bytes-fixed)%2 != 0 {
			return fmt.Sprintf("coded payload of %d bytes for %d elements", j.Bytes, n)
		}
	default:
		return fmt.Sprintf("job kind %d", j.Kind)
	}
	return ""
}

// decodeJob decodes one tile into dst; "" on success, else why not.
func decodeJob(data []byte, j Job, dst []byte, s *decScratch) string {
	if r := checkJob(j, int64(len(data)), int64(len(dst))); r != "" {
		return r
	}
	p := data[j.Src : j.Src+j.Bytes]
	if j.Kind == KindRaw {
		sum, _ := rawSum(0, 0, p)
		if got := sum + descHash(j); got != j.Sum {
			return fmt.Sprintf("checksum %#08x, stored %#08x", got, j.Sum)
		}
		for r := 0; r < j.Rows; r++ {
			copy(dst[j.Dst+int64(r)*j.Pitch:], p[r*j.Cols:(r+1)*j.Cols])
		}
		return ""
	}
	readU16s(s.lut[:], data[j.LUT:j.LUT+LUTBytes])
	n := j.Rows * j.Cols
	vals := grow(s.vals, n)
	s.vals = vals
	ns := streams(n)
	hb, smb := offsetBytes(n), smBytes(n)
	sm, words := p[hb:hb+smb], p[hb+smb:]
	nw := uint32(len(words) / 2)
	sum := descHash(j)
	for st := 0; st < ns; st++ {
		w0, w1 := binary.LittleEndian.Uint32(p[4*st:]), binary.LittleEndian.Uint32(p[4*st+4:])
		if w0 > w1 || w1 > nw {
			return fmt.Sprintf("warp-stream %d: words [%d, %d) of %d", st, w0, w1, nw)
		}
		ws := grow(s.words, int(w1-w0)+1)
		s.words = ws
		readU16s(ws, words[2*w0:2*w1])
		ws[len(ws)-1] = 0
		lo := st * StreamElems
		part, r := decodeStream(vals[lo:min(lo+StreamElems, n)], sm[lo:], ws, &s.lut, uint32(lo))
		if r != "" {
			return fmt.Sprintf("warp-stream %d: %s", st, r)
		}
		sum += part
	}
	if sum != j.Sum {
		return fmt.Sprintf("checksum %#08x, stored %#08x", sum, j.Sum)
	}
	for r := 0; r < j.Rows; r++ {
		writeU16s(dst[j.Dst+int64(r)*j.Pitch:], vals[r*j.Cols:(r+1)*j.Cols])
	}
	return ""
}

// decodeStream decodes one warp-stream into out (its elements, at most
// StreamElems, the first of index e0 in the tile) from its
// sign-and-mantissa bytes sm and its words (and a zero after them),
// exactly as a warp does (cuda/kernels/bf16z.cu), one lane after another:
// at each step every lane with an element left looks its next MaxCodeLen
// bits up; a lane whose codeword is longer than the bits it holds (or that
// finds no codeword with fewer than MaxCodeLen bits held) takes the
// stream's next word, lanes in order, and looks up again. Every word must
// be read. It returns the elements' checksum terms, or why the stream does
// not decode.
func decodeStream(out []uint16, sm []byte, words []uint16, lut *[1 << MaxCodeLen]uint16, e0 uint32) (uint32, string) {
	var buf, held [Lanes]uint32
	nw := uint32(len(words) - 1)
	var p, sum uint32
	e := e0
	m := len(out)
	for st := 0; st*Lanes < m; st++ {
		base := st * Lanes
		step := out[base:min(base+Lanes, m)]
		q := sm[(st>>2)*128+(st&3):]
		q = q[:4*len(step)-3]
		for l := range step {
			b, h := buf[l&(Lanes-1)], held[l&(Lanes-1)]
			ent := uint32(lut[b>>(32-MaxCodeLen)])
			ln := ent >> 8
			// need: h < MaxCodeLen and the entry is no codeword (length 0
			// or above MaxCodeLen) or one longer than h: computed without
			// branches, which the lanes' refills would mispredict.
			invalid := (ln-1)>>31 | (MaxCodeLen-ln)>>31
			need := (h - MaxCodeLen) >> 31 & (invalid | (h-ln)>>31)
			mask := -need
			b |= uint32(words[min(p, nw)]) << (16 - h) & mask // a shift past 31 is 0 in Go
			h += 16 & mask
			p += need
			ent = ent&^mask | uint32(lut[b>>(32-MaxCodeLen)])&mask
			ln = ent >> 8
			if ln-1 >= MaxCodeLen || ln > h {
				return 0, fmt.Sprintf("step %d lane %d: no codeword (table entry %#04x)", st, l, ent)
			}
			buf[l&(Lanes-1)], held[l&(Lanes-1)] = b<<ln, h-ln
			c := uint32(q[4*l])
			v := (c&0x80)<<8 | (ent&0xff)<<7 | c&0x7f
			step[l] = uint16(v)
			sum += mix(e<<16 | v)
			e++
		}
	}
	if p != nw {
		return 0, fmt.Sprintf("read %d of its %d words", p, nw)
	}
	return sum, ""
}

// Plan returns the jobs that decode rows [rows[0], rows[1]) × columns
// [cols[0], cols[1]) of the named tensor's matrix view (Tensor.Rows ×
// Tensor.Cols) into a destination where that rectangle starts at dst,
// rows pitch bytes apart: a sharder's share of a tensor. The rectangle
// must be made of whole tiles (its bounds multiples of TileRows and
// TileCols, or the tensor's ends).
func (u *Unit) Plan(name string, rows, cols [2]int, dst, pitch int64) ([]Job, error) {
	t, err := u.Tensor(name)
	if err != nil {
		return nil, err
	}
	edge := func(what string, v, tile, end int) error {
		if v < 0 || v > end || (v%tile != 0 && v != end) {
			return fmt.Errorf("bf16z: unit %q tensor %q: %s %d is not a tile boundary (multiples of %d, or %d)", u.Name, name, what, v, tile, end)
		}
		return nil
	}
	if t.NumJobs == 0 {
		return nil, fmt.Errorf("bf16z: unit %q tensor %q is empty", u.Name, name)
	}
	if err := errors.Join(edge("row", rows[0], t.TileRows, t.Rows), edge("row", rows[1], t.TileRows, t.Rows),
		edge("column", cols[0], t.TileCols, t.Cols), edge("column", cols[1], t.TileCols, t.Cols)); err != nil {
		return nil, err
	}
	if rows[0] >= rows[1] || cols[0] >= cols[1] {
		return nil, fmt.Errorf("bf16z: unit %q tensor %q: empty rectangle rows %v × cols %v", u.Name, name, rows, cols)
	}
	width := int64(cols[1]-cols[0]) * int64(t.ESize)
	if dst < 0 || (rows[1]-rows[0] > 1 && pitch < width) {
		return nil, fmt.Errorf("bf16z: unit %q tensor %q: rows of %d bytes at %d, pitch %d", u.Name, name, width, dst, pitch)
	}
	var jobs []Job
	ct := t.ColTiles()
	for a := rows[0] / t.TileRows; a*t.TileRows < rows[1]; a++ {
		for b := cols[0] / t.TileCols; b*t.TileCols < cols[1]; b++ {
			j := u.Jobs[t.FirstJob+a*ct+b]
			at := dst + int64(a*t.TileRows-rows[0])*pitch + int64(b*t.TileCols-cols[0])*int64(t.ESize)
			jobs = append(jobs, j.Moved(at, pitch))
		}
	}
	return jobs, nil
}
