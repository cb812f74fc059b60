package bf16z

import (
	"container/heap"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cost is the code bits of counts under lens.
func cost(counts *[256]uint64, lens [256]uint8) uint64 {
	var n uint64
	for s, c := range counts {
		n += c * uint64(lens[s])
	}
	return n
}

// kraft is the Kraft sum of lens in units of 2^-16.
func kraft(lens [256]uint8) uint64 {
	var k uint64
	for _, l := range lens {
		if l > 0 {
			k += 1 << (16 - l)
		}
	}
	return k
}

// bruteLengths is the least cost of a prefix code over the present symbols
// with lengths 1..maxLen, by trying every assignment (a few symbols only).
func bruteLengths(counts []uint64, maxLen int) uint64 {
	best := ^uint64(0)
	lens := make([]int, len(counts))
	var try func(i int, k uint64)
	try = func(i int, k uint64) {
		if k > 1<<16 {
			return
		}
		if i == len(counts) {
			var c uint64
			for s, l := range lens {
				c += counts[s] * uint64(l)
			}
			best = min(best, c)
			return
		}
		for l := 1; l <= maxLen; l++ {
			lens[i] = l
			try(i+1, k+1<<(16-l))
		}
	}
	try(0, 0)
	return best
}

// huffHeap is a min-heap of subtree weights, for plain Huffman coding.
type huffHeap []uint64

func (h huffHeap) Len() int           { return len(h) }
func (h huffHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h huffHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *huffHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *huffHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// huffmanCost is the cost of an unlimited Huffman code: the sum of the
// merged weights.
func huffmanCost(counts []uint64) uint64 {
	h := huffHeap(append([]uint64(nil), counts...))
	heap.Init(&h)
	var c uint64
	for h.Len() > 1 {
		a, b := heap.Pop(&h).(uint64), heap.Pop(&h).(uint64)
		c += a + b
		heap.Push(&h, a+b)
	}
	return c
}

// TestLengthsOptimalSmall checks package-merge against exhaustive search
// on small alphabets and tight limits.
func TestLengthsOptimalSmall(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := 2 + r.IntN(6)
		minLen := 1
		for 1<<minLen < n {
			minLen++
		}
		maxLen := minLen + r.IntN(4)
		var counts [256]uint64
		present := make([]uint64, 0, n)
		syms := r.Perm(256)[:n]
		for _, s := range syms {
			c := uint64(1 + r.IntN(1000))
			if r.IntN(3) == 0 {
				c = uint64(1 + r.IntN(3)) // rare symbols force the limit
			}
			counts[s] = c
		}
		for s := range counts {
			if counts[s] > 0 {
				present = append(present, counts[s])
			}
		}
		lens, err := lengths(&counts, maxLen)
		require.NoError(t, err)
		for s := range counts {
			if counts[s] > 0 {
				require.True(t, lens[s] >= 1 && int(lens[s]) <= maxLen, "symbol %d length %d", s, lens[s])
			} else {
				require.Zero(t, lens[s])
			}
		}
		require.LessOrEqual(t, kraft(lens), uint64(1<<16))
		require.Equal(t, bruteLengths(present, maxLen), cost(&counts, lens), "counts %v limit %d", present, maxLen)
	}
}

// TestLengthsUnlimited: with a limit no code needs, package-merge costs
// what Huffman's algorithm does.
func TestLengthsUnlimited(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 50; trial++ {
		var counts [256]uint64
		var present []uint64
		for s := 0; s < 40+r.IntN(200); s++ {
			counts[r.IntN(256)] += uint64(100 + r.IntN(100000))
		}
		for _, c := range counts {
			if c > 0 {
				present = append(present, c)
			}
		}
		lens, err := lengths(&counts, 16)
		require.NoError(t, err)
		assert.Equal(t, huffmanCost(present), cost(&counts, lens))
	}
}

func TestLengthsEdges(t *testing.T) {
	var none [256]uint64
	lens, err := lengths(&none, MaxCodeLen)
	require.NoError(t, err)
	assert.Equal(t, [256]uint8{}, lens)

	var one [256]uint64
	one[127] = 99
	lens, err = lengths(&one, MaxCodeLen)
	require.NoError(t, err)
	assert.EqualValues(t, 1, lens[127])

	var flat [256]uint64
	for s := range flat {
		flat[s] = 5
	}
	lens, err = lengths(&flat, MaxCodeLen)
	require.NoError(t, err)
	for s := range lens {
		assert.EqualValues(t, 8, lens[s])
	}
	_, err = lengths(&flat, 7)
	assert.Error(t, err, "256 symbols do not fit codewords of 7 bits")

	// Fibonacci counts make a Huffman code as deep as the alphabet: the
	// limit must hold and the code must stay complete.
	var fib [256]uint64
	a, b := uint64(1), uint64(1)
	for s := 0; s < 40; s++ {
		fib[s] = a
		a, b = b, a+b
	}
	lens, err = lengths(&fib, MaxCodeLen)
	require.NoError(t, err)
	for s := 0; s < 40; s++ {
		assert.True(t, lens[s] >= 1 && lens[s] <= MaxCodeLen)
	}
	assert.Equal(t, uint64(1<<16), kraft(lens))
}

// TestCanonicalLUT decodes every codeword through the table and checks
// that exactly the code space the codewords cover is filled.
func TestCanonicalLUT(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 30; trial++ {
		var counts [256]uint64
		for s := 0; s < 1+r.IntN(300); s++ {
			counts[r.IntN(256)] += uint64(1 + r.IntN(1<<r.IntN(20)))
		}
		lens, err := lengths(&counts, MaxCodeLen)
		require.NoError(t, err)
		c, err := canonical(lens)
		require.NoError(t, err)
		lut := c.lut()
		valid := 0
		for _, e := range lut {
			if e != 0 {
				valid++
			}
		}
		assert.EqualValues(t, kraft(lens)>>(16-MaxCodeLen), valid)
		for s := range counts {
			l := int(lens[s])
			if l == 0 {
				continue
			}
			// Any bits after the codeword decode to the same symbol.
			idx := int(c.bits[s])<<(MaxCodeLen-l) | r.IntN(1<<(MaxCodeLen-l))
			assert.Equal(t, uint16(s)|uint16(l)<<8, lut[idx], "symbol %d", s)
		}
	}
	_, err := canonical([256]uint8{1, 1, 1})
	assert.Error(t, err, "three codewords of one bit overfill the code space")
}
