package synth

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"sync"

	"vlanode/tensor"
)

// golden is SplitMix64's increment, 2^64/φ.
const golden = 0x9e3779b97f4a7c15

// mix64 is SplitMix64's output function, a bijection on 64-bit words.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// word is draw i of the stream keyed by key: SplitMix64 seeded with key,
// computed directly from the counter so any range can be drawn on its own.
func word(key, i uint64) uint64 { return mix64(key + (i+1)*golden) }

// tensorKey is the stream key of the named tensor under seed.
func tensorKey(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return mix64(h.Sum64() ^ mix64(seed+golden))
}

// bf16Table maps 16 random bits to bf16 values of one distribution.
type bf16Table [1 << 16]uint16

// normalTable returns the table of N(mean, std²): entry u is the quantile
// at (u+0.5)/65536, so a uniform 16-bit draw gives that normal distribution
// (truncated at ±4.3σ, the table's extreme quantiles).
func normalTable(mean, std float64) *bf16Table {
	t := new(bf16Table)
	for u := range t {
		p := (float64(u) + 0.5) / float64(len(t))
		x := mean + std*math.Sqrt2*math.Erfinv(2*p-1)
		t[u] = tensor.F32ToBF16(float32(x))
	}
	return t
}

// tables caches distribution tables by (mean, std).
type tables struct {
	mu sync.Mutex
	m  map[[2]float64]*bf16Table
}

func (ts *tables) get(mean, std float64) *bf16Table {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	k := [2]float64{mean, std}
	if t, ok := ts.m[k]; ok {
		return t
	}
	if ts.m == nil {
		ts.m = map[[2]float64]*bf16Table{}
	}
	t := normalTable(mean, std)
	ts.m[k] = t
	return t
}

// fillChunk is the smallest piece of a tensor filled by one goroutine.
const fillChunk = 1 << 20

// fill writes the values of t for seed into dst (len t.Bytes()), using up
// to workers goroutines. The result does not depend on workers.
func fill(dst []byte, t *Tensor, seed uint64, ts *tables, workers int) error {
	if t.DType != tensor.BF16 {
		return fmt.Errorf("synth: tensor %q: dtype %v is not supported (only BF16)", t.Name, t.DType)
	}
	switch t.Init.Kind {
	case InitConst:
		if len(t.Init.Values)*2 != len(dst) {
			return fmt.Errorf("synth: tensor %q: %d constant values for %d elements", t.Name, len(t.Init.Values), len(dst)/2)
		}
		for i, v := range t.Init.Values {
			binary.LittleEndian.PutUint16(dst[2*i:], tensor.F32ToBF16(v))
		}
		return nil
	case InitNormal:
		table := ts.get(t.Init.Mean, t.Init.Std)
		key := tensorKey(seed, t.Name)
		if workers <= 1 || len(dst) <= fillChunk {
			fillNormal(dst, 0, table, key)
			return nil
		}
		chunks := (len(dst) + fillChunk - 1) / fillChunk
		var wg sync.WaitGroup
		next := make(chan int, chunks)
		for c := 0; c < chunks; c++ {
			next <- c
		}
		close(next)
		for w := 0; w < min(workers, chunks); w++ {
			wg.Go(func() {
				for c := range next {
					lo := c * fillChunk
					fillNormal(dst[lo:min(lo+fillChunk, len(dst))], lo, table, key)
				}
			})
		}
		wg.Wait()
		return nil
	}
	return fmt.Errorf("synth: tensor %q: unknown init kind %d", t.Name, t.Init.Kind)
}

// fillNormal fills dst, the bytes [off, off+len(dst)) of a bf16 tensor
// (off a multiple of 8): draw g gives the four elements of bytes 8g…8g+7,
// 16 bits each, low bits first.
func fillNormal(dst []byte, off int, table *bf16Table, key uint64) {
	g := uint64(off / 8)
	n := len(dst) &^ 7
	for i := 0; i < n; i += 8 {
		w := word(key, g)
		g++
		v := uint64(table[uint16(w)]) | uint64(table[uint16(w>>16)])<<16 |
			uint64(table[uint16(w>>32)])<<32 | uint64(table[uint16(w>>48)])<<48
		binary.LittleEndian.PutUint64(dst[i:], v)
	}
	if n < len(dst) { // the last 1–3 elements of the tensor
		w := word(key, g)
		for i := n; i < len(dst); i += 2 {
			binary.LittleEndian.PutUint16(dst[i:], table[uint16(w)])
			w >>= 16
		}
	}
}
