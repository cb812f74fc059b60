package diffusion

import (
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/safetensors"
	"vlanode/tensor"
)

// ActionInProj is action_in_proj (PerWaypointActionInProjV2 of
// models/action_in_proj.py): it embeds each waypoint's noisy action and the
// flow time as one expert token.
//
//  1. Fourier features, per action channel and for t: [sin, cos](2π·v·f)·√2
//     over the encoder's frequencies f (logspace 1…max_freq, stored in the
//     checkpoint, bf16 in the release); channels in order, t last.
//  2. The MLP encoder.trunk: Linear → SiLU, then per encoder layer
//     RMSNorm(1e-5) → Linear (→ SiLU but after the last), the last Linear
//     mapping to the expert's hidden size.
//  3. LayerNorm(1e-5) with bias.
//
// The Fourier features are computed on the host in float32, operation by
// operation as torch does (the backend has no sin/cos op and they are
// T×60 values); the MLP and the norm run on the backend.
type ActionInProj struct {
	cfg      InProjConfig
	channels int // action dimensions (2)
	out      int // expert hidden size

	// Freqs are the Fourier frequencies of each action channel's encoder
	// (sinus.N.freqs) and, last, of the time encoder
	// (timestep_fourier_encoder.freqs); each [num_fourier_feats/2].
	Freqs [][]float32

	Linear []backend.Tensor // encoder.trunk.{0,3,6,…}.weight: [hidden, feats], [hidden, hidden]…, [out, hidden]
	Bias   []backend.Tensor // encoder.trunk.{0,3,6,…}.bias
	RMS    []backend.Tensor // encoder.trunk.{2,5,…}.weight [hidden]
	NormW  backend.Tensor   // norm.weight [out]
	NormB  backend.Tensor   // norm.bias [out]
}

func newActionInProj(cfg InProjConfig, channels, out int) *ActionInProj {
	n := cfg.NumEncLayers
	return &ActionInProj{
		cfg: cfg, channels: channels, out: out,
		Linear: make([]backend.Tensor, n+1), Bias: make([]backend.Tensor, n+1), RMS: make([]backend.Tensor, n),
	}
}

// features is the number of Fourier features per token.
func (p *ActionInProj) features() int { return (p.channels + 1) * p.cfg.NumFourierFeats }

// specs is the one table binding action_in_proj's backend tensors; the
// trunk's Linears sit at indices 0, 3, 6, … and its RMSNorms at 2, 5, ….
func (p *ActionInProj) specs() []models.Spec {
	h, n := p.cfg.HiddenSize, p.cfg.NumEncLayers
	var s []models.Spec
	for i := 0; i <= n; i++ {
		in, out := h, h
		if i == 0 {
			in = p.features()
		}
		if i == n {
			out = p.out
		}
		s = append(s,
			models.Spec{Name: fmt.Sprintf("encoder.trunk.%d.weight", 3*i), Shape: []int{out, in}, Dst: &p.Linear[i]},
			models.Spec{Name: fmt.Sprintf("encoder.trunk.%d.bias", 3*i), Shape: []int{out}, Dst: &p.Bias[i]},
		)
		if i < n {
			s = append(s, models.Spec{Name: fmt.Sprintf("encoder.trunk.%d.weight", 3*i+2), Shape: []int{h}, Dst: &p.RMS[i]})
		}
	}
	return append(s,
		models.Spec{Name: "norm.weight", Shape: []int{p.out}, Dst: &p.NormW},
		models.Spec{Name: "norm.bias", Shape: []int{p.out}, Dst: &p.NormB},
	)
}

// freqNames are the checkpoint names of the Fourier frequencies, in
// feature order, under the action_in_proj. prefix.
func (p *ActionInProj) freqNames() []string {
	names := make([]string, 0, p.channels+1)
	for c := range p.channels {
		names = append(names, fmt.Sprintf("sinus.%d.freqs", c))
	}
	return append(names, "timestep_fourier_encoder.freqs")
}

// loadFreqs reads the frequency buffers to the host. A buffer missing from
// the checkpoint, or every buffer with fromConfig, is the constructor's
// value: torch.logspace(0, log10(max_freq), half) rounded to bf16, as the
// release holds it.
func (p *ActionInProj) loadFreqs(ck *safetensors.Checkpoint, prefix string, fromConfig bool) error {
	half := p.cfg.NumFourierFeats / 2
	p.Freqs = nil
	for _, name := range p.freqNames() {
		full := prefix + name
		if fromConfig || !ck.Has(full) {
			p.Freqs = append(p.Freqs, DefaultFreqs(half, p.cfg.MaxFreq))
			continue
		}
		info, err := ck.Expect(full, tensor.Invalid, 1, half)
		if err != nil {
			return fmt.Errorf("diffusion: loading action_in_proj: %w", err)
		}
		f, err := info.F32()
		if err != nil {
			return fmt.Errorf("diffusion: loading action_in_proj: %w", err)
		}
		p.Freqs = append(p.Freqs, f)
	}
	return nil
}

// DefaultFreqs is FourierEncoderV2's buffer: torch.logspace(0,
// log10(maxFreq), n) in float32, rounded to bf16 as the release holds it.
func DefaultFreqs(n int, maxFreq float64) []float32 {
	out := make([]float32, n)
	end := float32(math.Log10(maxFreq))
	for i := range out {
		e := float32(0)
		if n > 1 {
			// torch.linspace of the exponents (see Flow.Times), then 10^e
			step := end / float32(n-1)
			if i < n/2 {
				e = float32(step * float32(i))
			} else {
				e = end - float32(step*float32(n-1-i))
			}
		}
		out[i] = tensor.BF16ToF32(tensor.F32ToBF16(float32(math.Pow(10, float64(e)))))
	}
	return out
}

// Fourier writes the input features of T = len(x)/channels tokens into dst
// [T][(channels+1)·feats]: for each channel c of token w and then for t,
// the values sin(a_j)·√2 for every frequency j, then cos(a_j)·√2, with
// a_j = ((v·f_j)·2)·π, every operation rounded to float32 as torch does.
func (p *ActionInProj) Fourier(dst, x []float32, t float32) error {
	nf := p.cfg.NumFourierFeats
	per := p.features()
	if len(x)%p.channels != 0 || len(dst) != len(x)/p.channels*per {
		return fmt.Errorf("diffusion: Fourier features of %d action values into %d values", len(x), len(dst))
	}
	tf := make([]float32, nf)
	fourier(tf, t, p.Freqs[p.channels])
	for w := range len(x) / p.channels {
		row := dst[w*per : (w+1)*per]
		for c := range p.channels {
			fourier(row[c*nf:(c+1)*nf], x[w*p.channels+c], p.Freqs[c])
		}
		copy(row[p.channels*nf:], tf)
	}
	return nil
}

// fourier is FourierEncoderV2.forward for one value: dst [2·len(freqs)]
// (backend.FourierFeatures).
func fourier(dst []float32, v float32, freqs []float32) { backend.FourierFeatures(dst, v, freqs) }

// Forward embeds the uploaded features [T, feats] into out [T, hidden],
// using s for the MLP's activations.
func (p *ActionInProj) Forward(be backend.Backend, out, feats backend.Tensor, s *scratch) error {
	n := p.cfg.NumEncLayers
	step := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("action_in_proj: %s: %w", what, err)
		}
		return nil
	}
	cur, next := s.mlpA, s.mlpB
	if err := step("trunk.0", be.MatMul(cur, feats, p.Linear[0], p.Bias[0])); err != nil {
		return err
	}
	if err := step("silu", be.SiLU(cur, cur)); err != nil {
		return err
	}
	for i := range n {
		if err := step("rms norm", be.RMSNorm(cur, cur, p.RMS[i], inProjNormEps)); err != nil {
			return err
		}
		if i == n-1 {
			if err := step("last linear", be.MatMul(out, cur, p.Linear[n], p.Bias[n])); err != nil {
				return err
			}
			break
		}
		if err := step("linear", be.MatMul(next, cur, p.Linear[i+1], p.Bias[i+1])); err != nil {
			return err
		}
		if err := step("silu", be.SiLU(next, next)); err != nil {
			return err
		}
		cur, next = next, cur
	}
	return step("layer norm", be.LayerNorm(out, out, p.NormW, p.NormB, inProjLayerNormEps))
}

// ActionOutProj is action_out_proj: nn.Linear from the expert's hidden size
// to the action dimensions, with bias.
type ActionOutProj struct {
	W backend.Tensor // weight [2, hidden]
	B backend.Tensor // bias [2]
}

func (p *ActionOutProj) specs(hidden, dims int) []models.Spec {
	return []models.Spec{
		{Name: "weight", Shape: []int{dims, hidden}, Dst: &p.W},
		{Name: "bias", Shape: []int{dims}, Dst: &p.B},
	}
}
