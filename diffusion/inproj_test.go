package diffusion

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/models/qwen3"
)

func TestDefaultFreqs(t *testing.T) {
	// torch.logspace(0, 2, 10) rounded to bf16 (ALPAMAYO.md §6)
	assert.Equal(t, []float32{1, 1.671875, 2.78125, 4.65625, 7.75, 12.9375, 21.5, 36, 60, 100}, DefaultFreqs(10, 100))
}

func TestFourierLayout(t *testing.T) {
	p := newActionInProj(InProjConfig{NumEncLayers: 2, HiddenSize: 8, NumFourierFeats: 4, MaxFreq: 100}, 2, 8)
	p.Freqs = [][]float32{{1, 2}, {1, 4}, {1, 0.5}}
	x := []float32{0.25, 0.125, 0, 0.5} // two tokens: (accel, curvature)
	dst := make([]float32, 2*12)
	require.NoError(t, p.Fourier(dst, x, 0.5))
	r2 := math.Sqrt2
	sc := func(v, f float64) (float64, float64) {
		return math.Sin(2*math.Pi*v*f) * r2, math.Cos(2*math.Pi*v*f) * r2
	}
	var want []float64
	for w := range 2 {
		for c, freqs := range p.Freqs {
			v := 0.5 // t, last
			if c < 2 {
				v = float64(x[2*w+c])
			}
			s0, c0 := sc(v, float64(freqs[0]))
			s1, c1 := sc(v, float64(freqs[1]))
			want = append(want, s0, s1, c0, c1) // sin of every frequency, then cos
		}
	}
	for i := range want {
		assert.InDelta(t, want[i], dst[i], 1e-6, "feature %d", i)
	}
	assert.Error(t, p.Fourier(dst[:5], x, 0))
}

// TestFourierFloat32Argument: the argument is rounded to float32 after
// each of v·f, ·2 and ·π as torch computes it. At frequency 100 the float32
// argument differs from the exact one by up to ~1e-4 rad, so this matters.
func TestFourierFloat32Argument(t *testing.T) {
	v, f := float32(2.7182817), float32(100)
	dst := make([]float32, 2)
	fourier(dst, v, []float32{f})
	arg := float32(float32(float32(v*f)*2) * float32(math.Pi))
	assert.Equal(t, float32(float32(math.Sin(float64(arg)))*float32(math.Sqrt2)), dst[0])
	assert.Equal(t, float32(float32(math.Cos(float64(arg)))*float32(math.Sqrt2)), dst[1])
	exact := 2 * math.Pi * float64(v) * float64(f)
	assert.Greater(t, math.Abs(float64(arg)-exact), 1e-5, "the float32 argument is not the exact one")
}

func TestInProjSpecs(t *testing.T) {
	c, err := ParseConfig([]byte(releaseConfig), []byte(qwen3VL8B))
	require.NoError(t, err)
	p := newActionInProj(c.InProj, ActionDims, c.Expert.HiddenSize)
	got := map[string][]int{}
	for _, s := range p.specs() {
		got[s.Name] = s.Shape
	}
	// ALPAMAYO.md §1: Linear 60→512→512→2048 with biases, RMSNorm 512, LayerNorm 2048
	assert.Equal(t, map[string][]int{
		"encoder.trunk.0.weight": {512, 60}, "encoder.trunk.0.bias": {512},
		"encoder.trunk.2.weight": {512},
		"encoder.trunk.3.weight": {512, 512}, "encoder.trunk.3.bias": {512},
		"encoder.trunk.5.weight": {512},
		"encoder.trunk.6.weight": {2048, 512}, "encoder.trunk.6.bias": {2048},
		"norm.weight": {2048}, "norm.bias": {2048},
	}, got)
	assert.Equal(t, []string{"sinus.0.freqs", "sinus.1.freqs", "timestep_fourier_encoder.freqs"}, p.freqNames())

	l := qwen3.NewLayer(c.Expert.Qwen3())
	shapes := map[string][]int{}
	for _, s := range l.Specs() {
		shapes[s.Name] = s.Shape
	}
	// ALPAMAYO.md §1: q [2048,2048], k/v [1024,2048], gate/up [8256,2048], q/k norms [128]
	assert.Equal(t, []int{2048, 2048}, shapes["self_attn.q_proj.weight"])
	assert.Equal(t, []int{1024, 2048}, shapes["self_attn.k_proj.weight"])
	assert.Equal(t, []int{8256, 2048}, shapes["mlp.up_proj.weight"])
	assert.Equal(t, []int{2048, 8256}, shapes["mlp.down_proj.weight"])
	assert.Equal(t, []int{128}, shapes["self_attn.k_norm.weight"])
	assert.Len(t, shapes, 11)
}
