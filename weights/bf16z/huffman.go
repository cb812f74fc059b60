package bf16z

import (
	"fmt"
	"sort"
)

// code is a canonical prefix code of the 256 exponent values, no codeword
// longer than MaxCodeLen bits.
type code struct {
	len  [256]uint8  // bits of each symbol's codeword; 0: the symbol is absent
	bits [256]uint16 // the codeword, in the low len bits, first bit highest
}

// lengths returns length-limited Huffman code lengths for the symbol
// counts (0 for absent symbols), no length above maxLen, by the package-
// merge algorithm (Larmore and Hirschberg): optimal among the codes with
// that limit. A lone symbol gets length 1. maxLen must allow every present
// symbol a codeword (2^maxLen at least the number of them).
func lengths(counts *[256]uint64, maxLen int) ([256]uint8, error) {
	type item struct {
		w   uint64
		sym int // -1 for a package
	}
	var leaves []item
	for s, c := range counts {
		if c > 0 {
			leaves = append(leaves, item{c, s})
		}
	}
	var out [256]uint8
	switch n := len(leaves); {
	case n == 0:
		return out, nil
	case n == 1:
		out[leaves[0].sym] = 1
		return out, nil
	case maxLen < 1 || maxLen > 16 || n > 1<<maxLen:
		return out, fmt.Errorf("bf16z: %d symbols cannot have codewords of at most %d bits", n, maxLen)
	}
	// Lightest first; ties by symbol, so the code is a function of the counts.
	sort.Slice(leaves, func(i, j int) bool {
		if leaves[i].w != leaves[j].w {
			return leaves[i].w < leaves[j].w
		}
		return leaves[i].sym < leaves[j].sym
	})
	// lists[l] merges the leaves with the packages of pairs of lists[l-1]
	// (a leaf first on equal weights).
	lists := make([][]item, maxLen)
	lists[0] = leaves
	for l := 1; l < maxLen; l++ {
		prev := lists[l-1]
		pk := make([]item, len(prev)/2)
		for i := range pk {
			pk[i] = item{prev[2*i].w + prev[2*i+1].w, -1}
		}
		merged := make([]item, 0, len(leaves)+len(pk))
		i, j := 0, 0
		for i < len(leaves) || j < len(pk) {
			if j == len(pk) || (i < len(leaves) && leaves[i].w <= pk[j].w) {
				merged = append(merged, leaves[i])
				i++
			} else {
				merged = append(merged, pk[j])
				j++
			}
		}
		lists[l] = merged
	}
	// The 2n-2 lightest items of the last list are chosen; the packages
	// among the first m items of a list are the first m' = 2·(their
	// number) items of the list below. A symbol's length is the number of
	// chosen items it appears in as a leaf.
	m := 2*len(leaves) - 2
	for l := maxLen - 1; l >= 0; l-- {
		packages := 0
		for _, it := range lists[l][:m] {
			if it.sym >= 0 {
				out[it.sym]++
			} else {
				packages++
			}
		}
		m = 2 * packages
	}
	return out, nil
}

// canonical assigns the canonical codewords of the lengths: shorter
// codewords first, equal lengths in symbol order, each the next binary
// number.
func canonical(lens [256]uint8) (*code, error) {
	c := &code{len: lens}
	var perLen [MaxCodeLen + 1]int
	for _, l := range lens {
		if int(l) > MaxCodeLen {
			return nil, fmt.Errorf("bf16z: code length %d exceeds %d", l, MaxCodeLen)
		}
		perLen[l]++
	}
	perLen[0] = 0
	// Kraft: the codewords must fit in the code space.
	var space uint64
	for l := 1; l <= MaxCodeLen; l++ {
		space += uint64(perLen[l]) << (MaxCodeLen - l)
	}
	if space > 1<<MaxCodeLen {
		return nil, fmt.Errorf("bf16z: code lengths overfill the code space (Kraft sum %d/%d)", space, 1<<MaxCodeLen)
	}
	var next [MaxCodeLen + 2]uint32
	v := uint32(0)
	for l := 1; l <= MaxCodeLen; l++ {
		v = (v + uint32(perLen[l-1])) << 1
		next[l] = v
	}
	for s := 0; s < 256; s++ {
		if l := lens[s]; l > 0 {
			c.bits[s] = uint16(next[l])
			next[l]++
		}
	}
	return c, nil
}

// lut is the decoding table of c: entry i, for the next MaxCodeLen bits i
// of a stream, holds the symbol whose codeword starts them in its low byte
// and the codeword's length in its high byte; 0 where no codeword does.
func (c *code) lut() []uint16 {
	t := make([]uint16, 1<<MaxCodeLen)
	for s := 0; s < 256; s++ {
		l := int(c.len[s])
		if l == 0 {
			continue
		}
		lo := int(c.bits[s]) << (MaxCodeLen - l)
		hi := (int(c.bits[s]) + 1) << (MaxCodeLen - l)
		e := uint16(s) | uint16(l)<<8
		for i := lo; i < hi; i++ {
			t[i] = e
		}
	}
	return t
}

// bitsFor is the number of code bits that counts take under c.
func (c *code) bitsFor(counts *[256]uint64) uint64 {
	var n uint64
	for s, k := range counts {
		n += k * uint64(c.len[s])
	}
	return n
}
