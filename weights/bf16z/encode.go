package bf16z

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"vlanode/tensor"
	"vlanode/weights"
)

// DefaultMinSaving is Options.MinSaving's default.
const DefaultMinSaving = 0.05

// Options control Encode.
type Options struct {
	// Workers encode in parallel; 0 means GOMAXPROCS.
	Workers int
	// Alloc allocates Unit.Data (pinned host memory, say); nil means
	// weights.AlignedAlloc. The caller owns what it returns.
	Alloc weights.Allocator
	// MinSaving: a bf16 tensor is coded when that saves at least this
	// share of its bytes (its decoding table counted); 0 means
	// DefaultMinSaving. Other dtypes, and tensors that save less, stay raw.
	// A negative value codes every bf16 tensor and tile, whatever it
	// saves (tests of the decoders on adversarial data).
	MinSaving float64
	// TileCols, if set, gives the width of a tensor's tiles (elements of
	// its matrix view, Tensor.Cols); 0, or nil, means whole rows. A plan
	// (Unit.Plan) can decode any rectangle of whole tiles, so a tensor
	// that a sharder splits by columns is tiled at the split's grain.
	TileCols func(e weights.Entry) int
}

// encTensor is a tensor being encoded.
type encTensor struct {
	t     Tensor
	e     weights.Entry
	data  []byte // its bytes in the blob
	code  *code
	lut   []uint16
	force bool // Options.MinSaving < 0: coded, paying or not
}

// encTile is one tile's result.
type encTile struct {
	kind    Kind
	payload []byte // KindCoded; raw tiles are copied from the blob
	bytes   int64
	content uint32 // checksum of the elements, without descHash
}

// Encode compresses the tensors of b into a Unit whose plan decodes back
// into b's layout, byte for byte (padding aside: decoding writes tensor
// bytes only). Each bf16 tensor that pays is Huffman-coded with a table of
// its own (MinSaving); the rest are copied raw. It uses Options.Workers
// goroutines; Data comes from Options.Alloc.
func Encode(b *weights.Blob, o Options) (*Unit, error) {
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	minSaving := o.MinSaving
	if minSaving == 0 {
		minSaving = DefaultMinSaving
	}
	alloc := o.Alloc
	if alloc == nil {
		alloc = weights.AlignedAlloc
	}
	ts := make([]*encTensor, len(b.Entries))
	njobs := 0
	for i, e := range b.Entries {
		data := b.Bytes(e)
		if data == nil {
			return nil, fmt.Errorf("bf16z: unit %q: tensor %q [%d, +%d) lies outside the %d-byte blob", b.Name, e.Name, e.Offset, e.Size, len(b.Data))
		}
		rows, cols := view(e.Shape)
		es := e.DType.Size()
		if es == 0 || int64(rows)*int64(cols)*int64(es) != e.Size {
			return nil, fmt.Errorf("bf16z: unit %q: tensor %q: shape %v of %v does not make %d bytes", b.Name, e.Name, e.Shape, e.DType, e.Size)
		}
		if int64(cols)*int64(es) > 1<<32-1 || rows > 1<<32-1 {
			return nil, fmt.Errorf("bf16z: unit %q: tensor %q: rows of %d × %d bytes are too large", b.Name, e.Name, cols, es)
		}
		t := &encTensor{e: e, data: data, force: o.MinSaving < 0, t: Tensor{Name: e.Name, Entry: i, Rows: rows, Cols: cols, ESize: es, FirstJob: njobs}}
		if rows*cols > 0 {
			tc := 0
			if o.TileCols != nil {
				tc = o.TileCols(e)
			}
			t.t.TileRows, t.t.TileCols = tileShape(cols, tc)
			t.t.NumJobs = t.t.RowTiles() * t.t.ColTiles()
		}
		njobs += t.t.NumJobs
		ts[i] = t
	}
	if err := chooseCodes(ts, minSaving, workers); err != nil {
		return nil, fmt.Errorf("bf16z: unit %q: %w", b.Name, err)
	}
	tiles, err := encodeTiles(ts, njobs, workers)
	if err != nil {
		return nil, fmt.Errorf("bf16z: unit %q: %w", b.Name, err)
	}
	data, err := assemble(b, ts, tiles, alloc, workers)
	if err != nil {
		return nil, err
	}
	u, err := Parse(b.Name, data, b.Entries, b.Size())
	if err != nil {
		return nil, fmt.Errorf("bf16z: unit %q: the encoder wrote a unit it cannot read: %w", b.Name, err)
	}
	return u, nil
}

// parallel calls fn(worker, i) for i in [0, n) on up to workers goroutines.
func parallel(n, workers int, fn func(worker, i int)) {
	workers = max(min(workers, n), 1)
	if workers == 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(w, i)
			}
		})
	}
	wg.Wait()
}

// histChunk is the bytes of a tensor one histogram task counts.
const histChunk = 4 << 20

// chooseCodes counts the exponents of every bf16 tensor, builds its code
// and decides whether coding it pays.
func chooseCodes(ts []*encTensor, minSaving float64, workers int) error {
	type task struct {
		t      *encTensor
		lo, hi int
		counts [256]uint64
	}
	var tasks []*task
	for _, t := range ts {
		if t.e.DType != tensor.BF16 || t.e.Size == 0 {
			continue
		}
		for lo := 0; lo < len(t.data); lo += histChunk {
			tasks = append(tasks, &task{t: t, lo: lo, hi: min(lo+histChunk, len(t.data))})
		}
	}
	parallel(len(tasks), workers, func(_, i int) {
		k := tasks[i]
		exponentCounts(k.t.data[k.lo:k.hi], &k.counts)
	})
	for i := 0; i < len(tasks); {
		t := tasks[i].t
		var counts [256]uint64
		for ; i < len(tasks) && tasks[i].t == t; i++ {
			for s, c := range tasks[i].counts {
				counts[s] += c
			}
		}
		lens, err := lengths(&counts, MaxCodeLen)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.e.Name, err)
		}
		c, err := canonical(lens)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.e.Name, err)
		}
		// Its estimated size: the table, each tile's fixed parts, the code
		// bits and half a word of padding a lane.
		est := int64(LUTBytes) + int64(c.bitsFor(&counts)/8)
		for k := 0; k < t.t.NumJobs; k++ {
			_, n := tileJob(&t.t, 0, k)
			est += int64(offsetBytes(n)+smBytes(n)) + int64(streams(n)*Lanes) + PayloadAlign/2
		}
		if float64(est) <= (1-minSaving)*float64(t.e.Size) || t.force {
			t.t.Coded, t.code, t.lut = true, c, c.lut()
		}
	}
	return nil
}

// exponentCounts adds the exponents of the bf16 values in b to counts.
func exponentCounts(b []byte, counts *[256]uint64) {
	var c [4][256]uint64 // four tables: fewer stalls on repeated values
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		c[0][uint8(w>>7)]++
		c[1][uint8(w>>23)]++
		c[2][uint8(w>>39)]++
		c[3][uint8(w>>55)]++
	}
	for ; i+2 <= len(b); i += 2 {
		c[0][uint8(binary.LittleEndian.Uint16(b[i:])>>7)]++
	}
	for s := range counts {
		counts[s] += c[0][s] + c[1][s] + c[2][s] + c[3][s]
	}
}

// laneWords is the most words a lane of a warp-stream codes into.
const laneWords = (Steps*MaxCodeLen + 15) / 16

// tileScratch is one worker's reusable memory.
type tileScratch struct {
	vals  []uint16
	sm    []byte
	words []uint16
	lanes [Lanes][laneWords + 1]uint16 // each lane's words, in order (and one being filled)
	order [StreamElems]uint8           // the lane of each word a decoder reads, in order
}

// encodeTiles encodes every tile (job) of every tensor.
func encodeTiles(ts []*encTensor, njobs, workers int) ([]encTile, error) {
	type ref struct {
		t *encTensor
		k int
	}
	refs := make([]ref, 0, njobs)
	for _, t := range ts {
		for k := 0; k < t.t.NumJobs; k++ {
			refs = append(refs, ref{t, k})
		}
	}
	tiles := make([]encTile, njobs)
	scratch := make([]*tileScratch, max(workers, 1))
	errs := make([]error, njobs)
	parallel(njobs, workers, func(w, i int) {
		if scratch[w] == nil {
			scratch[w] = &tileScratch{}
		}
		r := refs[i]
		tiles[i], errs[i] = encodeTile(r.t, r.k, scratch[w])
	})
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("tensor %q tile %d: %w", refs[i].t.e.Name, refs[i].k, err)
		}
	}
	return tiles, nil
}

// tileRows calls fn with the bytes of each row of tile g of t, in order.
func tileRows(t *encTensor, g Job, fn func(row []byte)) {
	rowBytes := int64(g.Cols) * int64(t.t.ESize)
	for r := 0; r < g.Rows; r++ {
		lo := g.Dst - t.e.Offset + int64(r)*g.Pitch
		fn(t.data[lo : lo+rowBytes])
	}
}

// encodeTile encodes tile k of t: coded where t is and that pays.
func encodeTile(t *encTensor, k int, s *tileScratch) (encTile, error) {
	g, n := tileJob(&t.t, t.e.Offset, k)
	if !t.t.Coded {
		var sum uint32
		var p uint32
		tileRows(t, g, func(row []byte) { sum, p = rawSum(sum, p, row) })
		return encTile{kind: KindRaw, bytes: int64(n * t.t.ESize), content: sum}, nil
	}
	var vals []uint16
	if g.Rows == 1 || g.Pitch == int64(2*g.Cols) { // the tile's rows are contiguous
		lo := g.Dst - t.e.Offset
		vals = u16s(t.data[lo : lo+int64(2*n)])
	}
	if vals == nil {
		vals = grow(s.vals, n)
		s.vals = vals
		i := 0
		tileRows(t, g, func(row []byte) {
			readU16s(vals[i:i+len(row)/2], row)
			i += len(row) / 2
		})
	}
	ns := streams(n)
	hb, smb := offsetBytes(n), smBytes(n)
	sm := grow(s.sm, smb)
	s.sm = sm
	clear(sm)
	words := s.words[:0]
	offsets := make([]uint32, ns+1)
	var sum uint32
	for st := 0; st < ns; st++ {
		offsets[st] = uint32(len(words))
		lo := st * StreamElems
		var err error
		var part uint32
		words, part, err = encodeStream(vals[lo:min(lo+StreamElems, n)], uint32(lo), t.code, sm[lo:], words, s)
		if err != nil {
			return encTile{}, err
		}
		sum += part
	}
	offsets[ns] = uint32(len(words))
	s.words = words
	size := hb + smb + 2*len(words)
	if size >= n*2 && !t.force { // coding this tile does not pay: keep it raw
		var sum uint32
		var p uint32
		tileRows(t, g, func(row []byte) { sum, p = rawSum(sum, p, row) })
		return encTile{kind: KindRaw, bytes: int64(n * 2), content: sum}, nil
	}
	payload := make([]byte, size)
	for i, o := range offsets {
		binary.LittleEndian.PutUint32(payload[4*i:], o)
	}
	copy(payload[hb:], sm)
	writeU16s(payload[hb+smb:], words)
	return encTile{kind: KindCoded, payload: payload, bytes: int64(size), content: sum}, nil
}

// grow returns s resized to n, reallocated if too small.
func grow[E any](s []E, n int) []E {
	if cap(s) < n {
		return make([]E, n)
	}
	return s[:n]
}

// encodeStream codes the exponents of one warp-stream's values (at most
// StreamElems, the first of index e0 in the tile; value e of the stream is
// lane e%32's symbol e/32), writes their sign-and-mantissa bytes into sm
// (lane l's bytes of steps 4q..4q+3 at sm[128q+4l:], step order) and
// appends the stream's words to out in the order a decoder reads them (see
// decodeStream), which it simulates: a lane takes its next word when its
// next codeword is longer than the bits it holds, lanes of a step in
// order. Each lane packs its codewords into 16-bit words, first bit
// highest. It returns out and the values' checksum terms.
func encodeStream(vals []uint16, e0 uint32, c *code, sm []byte, out []uint16, s *tileScratch) ([]uint16, uint32, error) {
	var acc, bits, words, held [Lanes]uint32 // a lane's pending bits, their count, its words, the bits a decoder holds
	var sum uint32
	k := 0 // words a decoder has read
	m := len(vals)
	for st := 0; st*Lanes < m; st++ {
		base := st * Lanes
		step := vals[base:min(base+Lanes, m)]
		q := sm[(st>>2)*128+(st&3):]
		q = q[:4*len(step)-3]
		for l, v := range step {
			l &= Lanes - 1
			e := uint8(v >> 7)
			ln := uint32(c.len[e])
			if ln == 0 {
				return out, 0, fmt.Errorf("exponent %d has no codeword", e)
			}
			// Without branches, which would mispredict: the decoder's
			// read of this lane's next word, and a full word committed.
			need := (held[l] - ln) >> 31 // the codeword is longer than the bits held
			s.order[k] = uint8(l)
			k += int(need)
			held[l] += 16*need - ln
			a, n := acc[l]<<ln|uint32(c.bits[e]), bits[l]+ln
			full := (15 - n) >> 31 // n ≥ 16
			n -= 16 * full
			s.lanes[l][words[l]] = uint16(a >> n) // kept only when full
			words[l] += full
			acc[l], bits[l] = a, n
			q[4*l] = byte(v>>8)&0x80 | byte(v)&0x7f
			sum += mix((e0+uint32(base+l))<<16 | uint32(v))
		}
	}
	for l := range s.lanes {
		if bits[l] > 0 {
			s.lanes[l][words[l]] = uint16(acc[l] << (16 - bits[l]))
			words[l]++
		}
	}
	var next [Lanes]uint32
	for _, l := range s.order[:k] {
		out = append(out, s.lanes[l][next[l]])
		next[l]++
	}
	if next != words {
		return out, 0, fmt.Errorf("a decoder would read %v words of the lanes, which have %v", next, words)
	}
	return out, sum, nil
}

// rawSum adds the bytes of b, the next bytes of a raw tile from index p,
// to sum; it returns the sum and the next index.
func rawSum(sum, p uint32, b []byte) (uint32, uint32) {
	for _, c := range b {
		sum += mix(p<<8 | uint32(c))
		p++
	}
	return sum, p
}

// assemble lays the unit out and writes it into memory from alloc.
func assemble(b *weights.Blob, ts []*encTensor, tiles []encTile, alloc weights.Allocator, workers int) ([]byte, error) {
	h := header{
		rawSize: b.Size(), tensors: len(ts), jobs: len(tiles),
		jobsOff: HeaderBytes + int64(len(ts))*TensorBytes,
		steps:   Steps, lanes: Lanes, maxLen: MaxCodeLen,
	}
	jobsEnd := h.jobsOff + int64(len(tiles))*JobBytes
	h.payloadOff = alignTo64(jobsEnd, PayloadAlign)
	cur := h.payloadOff
	for _, t := range ts {
		if t.t.Coded {
			t.t.LUT = cur
			cur += LUTBytes
		}
	}
	jobs := make([]Job, len(tiles))
	for _, t := range ts {
		for k := 0; k < t.t.NumJobs; k++ {
			i := t.t.FirstJob + k
			j, _ := tileJob(&t.t, t.e.Offset, k)
			j.Src, j.Kind, j.Bytes = cur, tiles[i].kind, tiles[i].bytes
			if j.Kind == KindRaw {
				j.Cols *= t.t.ESize
			} else {
				j.LUT = t.t.LUT
			}
			j.Sum = tiles[i].content + descHash(j)
			if !j.fits() {
				return nil, fmt.Errorf("bf16z: unit %q: tensor %q tile %d: job %+v does not fit its stored widths", b.Name, t.e.Name, k, j)
			}
			jobs[i] = j
			cur += alignTo64(j.Bytes, PayloadAlign)
		}
	}
	h.size = cur
	data, err := alloc(cur)
	if err != nil {
		return nil, fmt.Errorf("bf16z: unit %q: allocate %d bytes: %w", b.Name, cur, err)
	}
	if int64(len(data)) < cur {
		return nil, fmt.Errorf("bf16z: unit %q: allocator returned %d bytes, want %d", b.Name, len(data), cur)
	}
	data = data[:cur:cur]
	clear(data[:h.payloadOff])
	for i, t := range ts {
		putTensor(data[HeaderBytes+i*TensorBytes:], &t.t, t.e)
		if t.t.Coded {
			l := data[t.t.LUT : t.t.LUT+LUTBytes]
			for k, v := range t.lut {
				binary.LittleEndian.PutUint16(l[2*k:], v)
			}
		}
	}
	for i, j := range jobs {
		j.put(data[h.jobsOff+int64(i)*JobBytes:])
	}
	refs := make([]*encTensor, len(tiles))
	for _, t := range ts {
		for k := 0; k < t.t.NumJobs; k++ {
			refs[t.t.FirstJob+k] = t
		}
	}
	parallel(len(tiles), workers, func(_, i int) {
		j := jobs[i]
		dst := data[j.Src : j.Src+alignTo64(j.Bytes, PayloadAlign)]
		if j.Kind == KindCoded {
			copy(dst, tiles[i].payload)
		} else {
			t := refs[i]
			g := j
			g.Cols /= t.t.ESize
			o := 0
			tileRows(t, g, func(row []byte) { o += copy(dst[o:], row) })
		}
		clear(dst[j.Bytes:])
	})
	h.put(data)
	binary.LittleEndian.PutUint32(data[12:], metaSum(data, jobsEnd))
	return data, nil
}
