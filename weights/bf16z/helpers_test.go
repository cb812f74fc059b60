package bf16z

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"vlanode/tensor"
	"vlanode/weights"
)

// spec is a test tensor: its layout and a function that fills its bytes.
type spec struct {
	name  string
	dt    tensor.DType
	shape []int
	fill  func(r *rand.Rand, b []byte)
}

// blob packs specs into a blob with weights.Layout.
func blob(t testing.TB, name string, seed uint64, specs []spec) *weights.Blob {
	t.Helper()
	ws := make([]weights.Spec, len(specs))
	for i, s := range specs {
		ws[i] = weights.Spec{Name: s.name, DType: s.dt, Shape: s.shape}
	}
	entries, size := weights.Layout(ws)
	data, err := weights.AlignedAlloc(size)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for i, e := range entries {
		if specs[i].fill != nil {
			specs[i].fill(r, data[e.Offset:e.Offset+e.Size])
		}
	}
	return &weights.Blob{Name: name, Data: data, Entries: entries}
}

// normal fills bf16 values from N(mean, std²).
func normal(mean, std float64) func(r *rand.Rand, b []byte) {
	return func(r *rand.Rand, b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], tensor.F32ToBF16(float32(mean+std*r.NormFloat64())))
		}
	}
}

// bits fills 16-bit elements with f(i).
func bits(f func(r *rand.Rand, i int) uint16) func(r *rand.Rand, b []byte) {
	return func(r *rand.Rand, b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], f(r, i/2))
		}
	}
}

// randomBytes fills bytes uniformly.
func randomBytes(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// exponentEntropy is the entropy, in bits, of the exponents of bf16 bytes.
func exponentEntropy(b []byte) float64 {
	var counts [256]uint64
	exponentCounts(b, &counts)
	return entropy(&counts)
}

// entropy is the entropy, in bits, of the distribution counts describe.
func entropy(counts *[256]uint64) float64 {
	var n float64
	for _, c := range counts {
		n += float64(c)
	}
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// forceIf is Options.MinSaving that codes everything when force is set.
func forceIf(force bool) float64 {
	if force {
		return -1
	}
	return 0
}

// codedSum is the element part of a coded tile's checksum.
func codedSum(vals []uint16) uint32 {
	var sum uint32
	for i, v := range vals {
		sum += mix(uint32(i)<<16 | uint32(v))
	}
	return sum
}
