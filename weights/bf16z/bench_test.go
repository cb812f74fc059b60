package bf16z

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"vlanode/tensor"
	"vlanode/weights"
)

// expertLayer is a blob of Alpamayo-R1-10B's expert layer shapes (127 MB)
// with synth's distributions: matrices N(0, 1/fan_in), norms N(1, 0.05²),
// drawn through a 65,536-entry inverse-CDF table as synth draws them.
func expertLayer(b testing.TB) *weights.Blob {
	const hidden, inter, heads, kv, hd = 2048, 8256, 16, 8, 128
	type m struct {
		name      string
		shape     []int
		mean, std float64
	}
	ms := []m{
		{"self_attn.q_proj.weight", []int{heads * hd, hidden}, 0, 1 / math.Sqrt(hidden)},
		{"self_attn.k_proj.weight", []int{kv * hd, hidden}, 0, 1 / math.Sqrt(hidden)},
		{"self_attn.v_proj.weight", []int{kv * hd, hidden}, 0, 1 / math.Sqrt(hidden)},
		{"self_attn.o_proj.weight", []int{hidden, heads * hd}, 0, 1 / math.Sqrt(heads*hd)},
		{"self_attn.q_norm.weight", []int{hd}, 1, 0.05},
		{"self_attn.k_norm.weight", []int{hd}, 1, 0.05},
		{"mlp.gate_proj.weight", []int{inter, hidden}, 0, 1 / math.Sqrt(hidden)},
		{"mlp.up_proj.weight", []int{inter, hidden}, 0, 1 / math.Sqrt(hidden)},
		{"mlp.down_proj.weight", []int{hidden, inter}, 0, 1 / math.Sqrt(inter)},
		{"input_layernorm.weight", []int{hidden}, 1, 0.05},
		{"post_attention_layernorm.weight", []int{hidden}, 1, 0.05},
	}
	specs := make([]spec, len(ms))
	for i, x := range ms {
		var table [1 << 16]uint16
		for u := range table {
			p := (float64(u) + 0.5) / float64(len(table))
			table[u] = tensor.F32ToBF16(float32(x.mean + x.std*math.Sqrt2*math.Erfinv(2*p-1)))
		}
		specs[i] = spec{x.name, tensor.BF16, x.shape, func(r *rand.Rand, d []byte) {
			for k := 0; k+8 <= len(d); k += 8 {
				w := r.Uint64()
				binary.LittleEndian.PutUint64(d[k:], uint64(table[uint16(w)])|uint64(table[uint16(w>>16)])<<16|
					uint64(table[uint16(w>>32)])<<32|uint64(table[uint16(w>>48)])<<48)
			}
		}}
	}
	return blob(b, "expert.layers.0", 1, specs)
}

// BenchmarkEncode is Encode's rate on an expert layer, in raw bytes (run
// with -cpu 1,2: Options.Workers follows GOMAXPROCS).
func BenchmarkEncode(b *testing.B) {
	bl := expertLayer(b)
	b.SetBytes(bl.Size())
	b.ResetTimer()
	for b.Loop() {
		if _, err := Encode(bl, Options{Workers: runtime.GOMAXPROCS(0)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is Decode's rate on an expert layer, in raw (output)
// bytes.
func BenchmarkDecode(b *testing.B) {
	bl := expertLayer(b)
	u, err := Encode(bl, Options{})
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, u.RawSize)
	b.SetBytes(u.RawSize)
	b.ReportMetric(u.Ratio(), "ratio")
	b.ResetTimer()
	for b.Loop() {
		if err := u.Decode(dst, runtime.GOMAXPROCS(0)); err != nil {
			b.Fatal(err)
		}
	}
}
