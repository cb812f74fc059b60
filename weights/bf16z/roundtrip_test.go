package bf16z

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
	"vlanode/weights"
)

// Bit patterns of bf16 that coding must keep exactly.
const (
	bf16PosInf  = 0x7f80
	bf16NegInf  = 0xff80
	bf16QNaN    = 0x7fc0
	bf16NaNLow  = 0x7f81 // signalling NaN, lowest payload
	bf16NegNaN  = 0xffff
	bf16MinSub  = 0x0001 // smallest subnormal
	bf16MaxSub  = 0x007f
	bf16NegZero = 0x8000
)

// roundTripCases are blobs of adversarial and ordinary tensors; force
// codes every bf16 tensor and tile whether it pays or not.
func roundTripCases() []struct {
	name  string
	specs []spec
	force bool
	tile  int // Options.TileCols for every tensor (0: whole rows)
} {
	every := bits(func(r *rand.Rand, i int) uint16 { return uint16(i) }) // all 65536 patterns in order
	special := []uint16{bf16PosInf, bf16NegInf, bf16QNaN, bf16NaNLow, bf16NegNaN, bf16MinSub, bf16MaxSub, bf16NegZero, 0}
	return []struct {
		name  string
		specs []spec
		force bool
		tile  int
	}{
		{name: "normal matrices", specs: []spec{
			{"q", tensor.BF16, []int{512, 1024}, normal(0, 1/32.0)},
			{"norm", tensor.BF16, []int{1024}, normal(1, 0.05)},
			{"down", tensor.BF16, []int{256, 3000}, normal(0, 1/55.0)},
		}},
		{name: "every bit pattern", force: true, specs: []spec{{"all", tensor.BF16, []int{256, 256}, every}}},
		{name: "every bit pattern shuffled", force: true, specs: []spec{{"all", tensor.BF16, []int{65536},
			bits(func(r *rand.Rand, i int) uint16 { return uint16(r.Uint32()) })}}},
		{name: "all exponents equal", force: true, specs: []spec{{"eq", tensor.BF16, []int{300, 301},
			bits(func(r *rand.Rand, i int) uint16 { return 0x3f80 | uint16(r.Uint32())&0x807f })}}}, // ±[1, 2)
		{name: "one value", force: true, specs: []spec{{"one", tensor.BF16, []int{70000},
			bits(func(r *rand.Rand, i int) uint16 { return 0x3f80 })}}},
		{name: "zeros", specs: []spec{{"z", tensor.BF16, []int{4096, 64}, nil}}},
		{name: "specials", force: true, specs: []spec{{"nan inf subnormal", tensor.BF16, []int{1000, 33},
			bits(func(r *rand.Rand, i int) uint16 {
				if r.IntN(2) == 0 {
					return special[r.IntN(len(special))]
				}
				return tensor.F32ToBF16(float32(r.NormFloat64() * 1e-39)) // subnormal range
			})}}},
		{name: "exponent extremes", force: true, specs: []spec{{"ext", tensor.BF16, []int{9000},
			bits(func(r *rand.Rand, i int) uint16 {
				e := []uint16{0, 1, 254, 255}[r.IntN(4)]
				return uint16(r.Uint32())&0x807f | e<<7
			})}}},
		{name: "empty and tiny", force: true, specs: []spec{
			{"empty", tensor.BF16, []int{0, 16}, nil},
			{"one", tensor.BF16, []int{1}, normal(0, 1)},
			{"three", tensor.BF16, []int{3}, normal(0, 1)},
			{"scalar", tensor.BF16, nil, normal(0, 1)},
			{"empty vec", tensor.BF16, []int{0}, nil},
			{"thirty-three", tensor.BF16, []int{33}, normal(0, 1)},
		}},
		{name: "not multiples of a tile or stream", force: true, specs: []spec{
			{"a", tensor.BF16, []int{65537}, normal(0, 0.1)},
			{"b", tensor.BF16, []int{8193}, normal(0, 0.1)},
			{"c", tensor.BF16, []int{3, 21845}, normal(0, 0.1)}, // 65535
			{"d", tensor.BF16, []int{17, 4099}, normal(0, 0.1)},
			{"e", tensor.BF16, []int{100001, 1}, normal(0, 0.1)},
		}},
		{name: "tiled by columns", tile: 96, specs: []spec{
			{"down", tensor.BF16, []int{300, 1000}, normal(0, 0.03)},
			{"vec", tensor.BF16, []int{1000}, normal(0, 0.03)},
		}},
		{name: "conv and other dtypes", specs: []spec{
			{"conv", tensor.BF16, []int{64, 3, 2, 16, 16}, normal(0, 0.03)},
			{"f32", tensor.F32, []int{33, 17}, randomBytes},
			{"u8 odd", tensor.U8, []int{1001}, randomBytes},
			{"i64", tensor.I64, []int{5}, randomBytes},
			{"f16", tensor.F16, []int{2000, 40}, randomBytes},
		}},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range roundTripCases() {
		t.Run(tc.name, func(t *testing.T) {
			b := blob(t, tc.name, 11, tc.specs)
			o := Options{Workers: 2, MinSaving: forceIf(tc.force)}
			if tc.tile > 0 {
				o.TileCols = func(weights.Entry) int { return tc.tile }
			}
			u, err := Encode(b, o)
			require.NoError(t, err)
			dst := bytes.Repeat([]byte{0xAA}, int(u.RawSize))
			require.NoError(t, u.Decode(dst, 2))
			require.True(t, bytes.Equal(b.Data, dst), "decoded blob differs from the raw one")

			// Every tensor and tile is where the format says.
			for i, tt := range u.Tensors {
				e := b.Entries[i]
				assert.Equal(t, e.Name, tt.Name)
				if tc.force && e.DType == tensor.BF16 && e.Size > 0 {
					assert.True(t, tt.Coded, "%s forced coded", e.Name)
				}
				if tc.tile > 0 && tt.NumJobs > 0 {
					assert.Equal(t, min(tc.tile, tt.Cols), tt.TileCols)
				}
				if e.Size == 0 {
					assert.Zero(t, tt.NumJobs, e.Name)
				}
			}
			// Parsing Data again gives the same unit.
			again, err := Parse(u.Name, u.Data, u.Entries, u.RawSize)
			require.NoError(t, err)
			assert.Equal(t, u.Tensors, again.Tensors)
			assert.Equal(t, u.Jobs, again.Jobs)
			// One worker decodes the same.
			dst1 := make([]byte, u.RawSize)
			require.NoError(t, u.Decode(dst1, 1))
			assert.True(t, bytes.Equal(dst, dst1))
		})
	}
}

// TestCodedOnlyWherePays: raw stays raw where coding would not save
// MinSaving; normal weights are coded and come near their entropy.
func TestCodedOnlyWherePays(t *testing.T) {
	b := blob(t, "u", 3, []spec{
		{"w", tensor.BF16, []int{1024, 2048}, normal(0, 1/45.0)},
		{"norm", tensor.BF16, []int{2048}, normal(1, 0.05)},
		{"random bits", tensor.BF16, []int{256, 512}, randomBytes},
		{"f32", tensor.F32, []int{4096}, randomBytes},
	})
	u, err := Encode(b, Options{})
	require.NoError(t, err)
	coded := map[string]bool{}
	for _, tt := range u.Tensors {
		coded[tt.Name] = tt.Coded
	}
	assert.Equal(t, map[string]bool{"w": true, "norm": false, "random bits": false, "f32": false}, coded)
	w, err := u.Tensor("w")
	require.NoError(t, err)
	h := exponentEntropy(b.Bytes(b.Entries[0]))
	ideal := (8 + h) / 16
	ratio := float64(w.Stored) / float64(b.Entries[0].Size)
	t.Logf("N(0, 1/45²): exponent entropy %.3f bits, ideal %.4f, stored %.4f of raw", h, ideal, ratio)
	assert.Less(t, ratio, ideal+0.01, "overheads (Huffman, tables, offsets, padding) within 1%% of raw")
	assert.Greater(t, ratio, ideal)

	dst := make([]byte, u.RawSize)
	require.NoError(t, u.Decode(dst, 0))
	assert.True(t, bytes.Equal(b.Data, dst))

	// MinSaving above what coding saves keeps everything raw.
	u, err = Encode(b, Options{MinSaving: 0.4})
	require.NoError(t, err)
	assert.False(t, u.Coded())
	require.NoError(t, u.Decode(dst, 0))
	assert.True(t, bytes.Equal(b.Data, dst))
}

// TestTileFallsBackToRaw: a coded tensor whose one tile holds random bits
// stores that tile raw.
func TestTileFallsBackToRaw(t *testing.T) {
	b := blob(t, "u", 4, []spec{{"w", tensor.BF16, []int{64, 4096}, normal(0, 1/64.0)}})
	e := b.Entries[0]
	r := rand.New(rand.NewPCG(9, 9))
	randomBytes(r, b.Data[e.Offset+16*4096*2:e.Offset+32*4096*2]) // tile 1 (16 rows a tile)
	u, err := Encode(b, Options{})
	require.NoError(t, err)
	require.True(t, u.Tensors[0].Coded)
	kinds := []Kind{}
	for _, j := range u.Jobs {
		kinds = append(kinds, j.Kind)
	}
	assert.Equal(t, []Kind{KindCoded, KindRaw, KindCoded, KindCoded}, kinds)
	dst := make([]byte, u.RawSize)
	require.NoError(t, u.Decode(dst, 0))
	assert.True(t, bytes.Equal(b.Data, dst))
}

// TestStreamsInterleave checks decodeStream against an independent,
// straightforward reading of the format on one warp-stream: each lane's
// bits are the concatenation of its codewords, and the stream's words are
// the lanes' words in the order the lanes first need them.
func TestStreamsInterleave(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	vals := make([]uint16, StreamElems-45) // a partial last step
	for i := range vals {
		vals[i] = tensor.F32ToBF16(float32(r.NormFloat64() * math.Ldexp(1, -r.IntN(8))))
	}
	var counts [256]uint64
	for _, v := range vals {
		counts[uint8(v>>7)]++
	}
	lens, err := lengths(&counts, MaxCodeLen)
	require.NoError(t, err)
	c, err := canonical(lens)
	require.NoError(t, err)
	sm := make([]byte, smBytes(len(vals)))
	words, sum0, err := encodeStream(vals, 0, c, sm, nil, &tileScratch{})
	require.NoError(t, err)

	// Independent reading: lane l's elements are l, l+32, ...; its bit
	// string is their codewords; the word it needs for element k is bit
	// position end(k)-1 / 16 where end(k) is the end of codeword k.
	type need struct{ step, lane, word int }
	var order []need
	laneBits := make([][]byte, Lanes) // one byte a bit
	for l := 0; l < Lanes; l++ {
		taken := 0
		for k, i := 0, l; i < len(vals); k, i = k+1, i+Lanes {
			e := uint8(vals[i] >> 7)
			for b := int(c.len[e]) - 1; b >= 0; b-- {
				laneBits[l] = append(laneBits[l], byte(c.bits[e]>>b&1))
			}
			for ; taken*16 < len(laneBits[l]); taken++ {
				order = append(order, need{k, l, taken})
			}
		}
	}
	// Words are read step by step, lanes in order.
	sortNeeds := func(a, b need) bool { return a.step < b.step || (a.step == b.step && a.lane < b.lane) }
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && sortNeeds(order[j], order[j-1]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	require.Len(t, words, len(order))
	for i, n := range order {
		var w uint16
		for b := 0; b < 16; b++ {
			w <<= 1
			if p := 16*n.word + b; p < len(laneBits[n.lane]) {
				w |= uint16(laneBits[n.lane][p])
			}
		}
		require.Equal(t, w, words[i], "word %d (lane %d's word %d, step %d)", i, n.lane, n.word, n.step)
	}
	for i, v := range vals {
		s, l := i/Lanes, i%Lanes
		require.Equal(t, byte(v>>8)&0x80|byte(v)&0x7f, sm[s/4*128+4*l+s%4], "element %d's sign and mantissa", i)
	}

	var lut [1 << MaxCodeLen]uint16
	copy(lut[:], c.lut())
	out := make([]uint16, len(vals))
	sum, reason := decodeStream(out, sm, append(words, 0), &lut, 0)
	require.Empty(t, reason)
	require.Equal(t, vals, out)
	require.Equal(t, codedSum(vals), sum)
	require.Equal(t, sum0, sum)
}
