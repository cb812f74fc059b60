package tokenizer

import (
	"strings"
	"sync"
)

// merge is what a pair of adjacent token ids merges into, and its priority
// (the line number of the pair in "merges"; lower merges first).
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// byteSymbols says how one input byte enters a word before merging: as the
// id of its byte-level rune, or (byte_fallback) as <0xXX> tokens, or not at
// all (then unk handling applies).
type byteSymbols struct {
	ids    []int32
	found  bool // ids is usable
	direct bool // ids is the byte-level rune's own id (not a fallback)
}

// bpe is the BPE model of a tokenizer.json.
type bpe struct {
	vocab        map[string]int32
	merges       map[uint64]merge
	initial      [256]byteSymbols
	unk          int32 // -1: no unk token
	fuseUnk      bool
	ignoreMerges bool

	cache   wordCache
	scratch sync.Pool // *mergeScratch
}

// maxCachedPiece is the longest piece (in bytes) whose ids are cached.
const maxCachedPiece = 256

// appendPiece appends the ids of one pre-tokenized piece (raw bytes, before
// the byte-level mapping) to dst.
func (m *bpe) appendPiece(dst []int, piece string) []int {
	if m.ignoreMerges {
		if id, ok := m.vocab[byteLevel(piece)]; ok {
			return append(dst, int(id))
		}
	}
	cacheable := len(piece) <= maxCachedPiece
	if cacheable {
		if ids, ok := m.cache.get(piece); ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	sc, _ := m.scratch.Get().(*mergeScratch)
	if sc == nil {
		sc = new(mergeScratch)
	}
	ids := m.mergeWord(sc, piece)
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	if cacheable {
		m.cache.put(piece, ids)
	}
	m.scratch.Put(sc)
	return dst
}

// symbol is one token of a word being merged, in a doubly linked list over
// the symbols slice.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	removed    bool  // merged into its left neighbour
}

type mergeScratch struct {
	syms []symbol
	heap mergeHeap
}

// mergeWord splits piece into byte-level symbols and applies the merges. It
// reproduces Word::merge_all of `tokenizers`: all candidate pairs go into a
// priority queue ordered by (rank, position); the best one is merged if it is
// still current, and the pairs it forms with its neighbours are queued. The
// returned slice is freshly allocated.
func (m *bpe) mergeWord(sc *mergeScratch, piece string) []int32 {
	syms := sc.syms[:0]
	add := func(id int32) {
		n := int32(len(syms))
		if n > 0 {
			syms[n-1].next = n
		}
		syms = append(syms, symbol{id: id, prev: n - 1, next: -1})
	}
	pendingUnk := false
	for i := 0; i < len(piece); i++ {
		init := &m.initial[piece[i]]
		if init.found {
			if init.direct && pendingUnk {
				add(m.unk)
				pendingUnk = false
			}
			// With byte_fallback, `tokenizers` adds the <0xXX> tokens
			// without first flushing a pending unk; so do we.
			for _, id := range init.ids {
				add(id)
			}
			continue
		}
		if m.unk < 0 {
			continue // the byte is dropped
		}
		if pendingUnk && !m.fuseUnk {
			add(m.unk)
		}
		pendingUnk = true
	}
	if pendingUnk {
		add(m.unk)
	}

	h := &sc.heap
	h.items = h.items[:0]
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(mergeEntry{rank: mg.rank, pos: int32(i), id: mg.id})
		}
	}
	for len(h.items) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.removed || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// Skip entries made stale by earlier merges.
		if mg, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mg.id != top.id {
			continue
		}
		cur.id = top.id
		cur.next = right.next
		syms[nextPos].removed = true
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				h.push(mergeEntry{rank: mg.rank, pos: cur.prev, id: mg.id})
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				h.push(mergeEntry{rank: mg.rank, pos: top.pos, id: mg.id})
			}
		}
	}

	n := 0
	for i := range syms {
		if !syms[i].removed {
			n++
		}
	}
	out := make([]int32, 0, n)
	for i := range syms {
		if !syms[i].removed {
			out = append(out, syms[i].id)
		}
	}
	sc.syms = syms
	return out
}

// mergeEntry is a queued candidate merge of the symbol at pos with its right
// neighbour into id.
type mergeEntry struct {
	rank, pos, id int32
}

func (a mergeEntry) less(b mergeEntry) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// mergeHeap is a binary min-heap of merge entries.
type mergeHeap struct {
	items []mergeEntry
}

func (h *mergeHeap) push(e mergeEntry) {
	h.items = append(h.items, e)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.items[i].less(h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeEntry {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.items[l].less(h.items[m]) {
			m = l
		}
		if r < last && h.items[r].less(h.items[m]) {
			m = r
		}
		if m == i {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return top
}

// wordCache remembers the ids of recently seen pieces. It is safe for
// concurrent use; when full it starts over.
type wordCache struct {
	mu sync.RWMutex
	m  map[string][]int32
}

// wordCacheCapacity bounds the number of cached pieces.
const wordCacheCapacity = 1 << 15

func (c *wordCache) get(piece string) ([]int32, bool) {
	c.mu.RLock()
	ids, ok := c.m[piece]
	c.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(piece string, ids []int32) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= wordCacheCapacity {
		c.m = make(map[string][]int32)
	}
	c.m[strings.Clone(piece)] = ids // the piece may point into a long prompt
	c.mu.Unlock()
}
