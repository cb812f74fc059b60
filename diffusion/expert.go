package diffusion

import (
	"context"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/diffusion/actionspace"
	"vlanode/models"
	"vlanode/models/qwen3"
	"vlanode/placement"
	"vlanode/safetensors"
	"vlanode/tensor"
)

// Expert is Alpamayo-R1's action side, loaded: action_in_proj, the expert
// (a Qwen3-VL text stack without embeddings that reads the VLM's KV cache),
// action_out_proj, the flow-matching sampler and the action space.
//
// An Expert owns scratch memory for one pass and, like a backend, serves
// one goroutine at a time.
type Expert struct {
	Config *Config
	be     backend.Backend

	InProj  *ActionInProj
	Layers  []*qwen3.Layer
	Norm    backend.Tensor // expert.norm.weight [hidden]
	OutProj *ActionOutProj
	// Space is the action space, with the checkpoint's action_space.*
	// buffers when it has them.
	Space actionspace.Space

	// Units are the flat weight blobs, in execution order: action_in_proj,
	// expert layers 0…n−1, then the final norm with action_out_proj.
	Units []*models.Unit
	// Exec runs each unit's compute where its weights are; nil runs them
	// in place (every unit resident).
	Exec models.Runner
	// NoGraphs runs Euler steps op by op even where a graph could replay
	// them (see Sample): for comparisons.
	NoGraphs bool
	// HostEuler runs the Euler updates on the host, each step waiting for
	// its velocity, even on a backend.FlowFeed (benchmarks compare).
	HostEuler bool

	// graph replays the Euler steps of the sample in progress, where the
	// backend can; lastGraphed and lastGraphErr are the last sample's
	// (StepGraph).
	graph        *models.StepGraph
	lastGraphed  bool
	lastGraphErr error

	inUnit, headUnit *models.Unit
	layerUnits       []qwen3.LayerUnits
	invFreq          []float32
	s                *scratch
	flow             *devFlow // the Euler steps' device memory on a backend.FlowFeed
}

// Checkpoint prefixes of the action side (NVlabs/alpamayo
// models/alpamayo_r1.py attribute names).
const (
	prefixExpert  = "expert."
	prefixInProj  = "action_in_proj."
	prefixOutProj = "action_out_proj."
	prefixSpace   = "action_space."
)

// Load binds the action side of an Alpamayo-R1 checkpoint, placed as ld
// says: the tensors expert.*, action_in_proj.*, action_out_proj.* and,
// when present, action_space.*. The checkpoint must stay open while the
// Expert is used; Close releases the Expert's backend tensors.
func Load(ld *models.Loader, cfg *Config) (*Expert, error) {
	be := ld.Backend
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ec := &cfg.Expert
	e := &Expert{
		Config:  cfg,
		be:      be,
		InProj:  newActionInProj(cfg.InProj, ActionDims, ec.HiddenSize),
		OutProj: &ActionOutProj{},
		Space:   cfg.Space,
		invFreq: models.RopeInvFreq(ec.HeadDim, ec.RopeTheta),
	}
	if err := e.load(ld); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Expert) load(ld *models.Loader) error {
	ck := ld.Checkpoint
	ec := &e.Config.Expert
	u, err := ld.Load(placement.ID{Module: placement.ActionIn}, prefixInProj, e.InProj.specs(), nil)
	if err != nil {
		return fmt.Errorf("diffusion: %w", err)
	}
	e.inUnit = u
	e.Units = append(e.Units, u)
	if err := e.InProj.loadFreqs(ck, prefixInProj, e.Config.BuffersFromConfig); err != nil {
		return err
	}
	for i := range ec.NumHiddenLayers {
		l := qwen3.NewLayer(ec.Qwen3())
		lu, err := qwen3.LoadLayer(ld, l, placement.Expert, i, fmt.Sprintf("%slayers.%d.", prefixExpert, i))
		if err != nil {
			return fmt.Errorf("diffusion: %w", err)
		}
		e.Layers = append(e.Layers, l)
		e.layerUnits = append(e.layerUnits, lu)
		e.Units = append(e.Units, lu.Attn, lu.MLP)
	}
	if u, err = ld.Load(placement.ID{Module: placement.ActionOut}, "", e.headSpecs(), nil); err != nil {
		return fmt.Errorf("diffusion: %w", err)
	}
	e.headUnit = u
	e.Units = append(e.Units, u)
	if !e.Config.BuffersFromConfig {
		if err := e.loadSpace(ck); err != nil {
			return err
		}
	}
	e.s, err = newScratch(e.be, e.Config, e.Space.Waypoints, ActionDims, e.InProj.features())
	return err
}

// loadSpace takes the action space's normalisation buffers from the
// checkpoint when it has them (the release does, in bf16).
func (e *Expert) loadSpace(ck *safetensors.Checkpoint) error {
	for _, b := range []struct {
		name string
		dst  *float32
	}{
		{"accel_mean", &e.Space.AccelMean}, {"accel_std", &e.Space.AccelStd},
		{"curvature_mean", &e.Space.CurvatureMean}, {"curvature_std", &e.Space.CurvatureStd},
	} {
		if !ck.Has(prefixSpace + b.name) {
			continue
		}
		info, err := ck.Expect(prefixSpace+b.name, tensor.Invalid)
		if err != nil {
			return fmt.Errorf("diffusion: loading the action space: %w", err)
		}
		v, err := info.F32()
		if err != nil {
			return fmt.Errorf("diffusion: loading the action space: %w", err)
		}
		*b.dst = v[0]
	}
	if err := e.Space.Validate(); err != nil {
		return fmt.Errorf("diffusion: checkpoint action space: %w", err)
	}
	return nil
}

// headSpecs is the table of the expert's final norm and action_out_proj,
// one unit.
func (e *Expert) headSpecs() []models.Spec {
	h := e.Config.Expert.HiddenSize
	return append([]models.Spec{{Name: prefixExpert + "norm.weight", Shape: []int{h}, Dst: &e.Norm}},
		prefixed(prefixOutProj, e.OutProj.specs(h, ActionDims))...)
}

func prefixed(prefix string, specs []models.Spec) []models.Spec {
	for i := range specs {
		specs[i].Name = prefix + specs[i].Name
	}
	return specs
}

// Close releases the Expert's backend tensors.
func (e *Expert) Close() {
	e.freeFlow()
	if e.s != nil {
		e.s.free(e.be)
		e.s = nil
	}
	var specs []models.Spec
	if e.InProj != nil {
		specs = append(specs, e.InProj.specs()...)
	}
	for _, l := range e.Layers {
		specs = append(specs, l.Specs()...)
	}
	specs = append(specs, e.OutProj.specs(0, 0)...)
	specs = append(specs, models.Spec{Dst: &e.Norm})
	for _, s := range specs {
		if *s.Dst != nil {
			e.be.Free(*s.Dst)
			*s.Dst = nil
		}
	}
}

// Waypoints is the number of action tokens (and trajectory steps).
func (e *Expert) Waypoints() int { return e.Space.Waypoints }

// Velocity is one evaluation of the flow's vector field: the velocity
// [Waypoints][2] (row-major) at the noisy normalised actions x
// [Waypoints][2] and flow time t, given the VLM prefix p. It writes the
// expert's keys and values into p's cache rows [Len, Len+Waypoints).
func (e *Expert) Velocity(ctx context.Context, p Prefix, x []float32, t float32) ([]float32, error) {
	if err := e.forward(ctx, solo(&p), x, t, true); err != nil {
		return nil, err
	}
	s := e.s
	v, err := e.be.Download(s.out)
	if err != nil {
		return nil, fmt.Errorf("diffusion: downloading the velocity: %w", err)
	}
	return v, nil
}

// Hidden returns the expert's final-norm hidden states [Waypoints][hidden]
// for x and t (the input of action_out_proj), as Velocity computes them.
func (e *Expert) Hidden(ctx context.Context, p Prefix, x []float32, t float32) ([]float32, error) {
	if err := e.forward(ctx, solo(&p), x, t, false); err != nil {
		return nil, err
	}
	h, err := e.be.Download(e.s.h)
	if err != nil {
		return nil, fmt.Errorf("diffusion: downloading hidden states: %w", err)
	}
	return h, nil
}

// Embed returns action_in_proj's output [Waypoints][hidden] for x and t:
// the expert's input tokens.
func (e *Expert) Embed(x []float32, t float32) ([]float32, error) {
	s := e.s
	if s == nil {
		return nil, fmt.Errorf("diffusion: expert is closed")
	}
	if err := e.embed(x, t); err != nil {
		return nil, err
	}
	out, err := e.be.Download(s.x)
	if err != nil {
		return nil, fmt.Errorf("diffusion: downloading the action embedding: %w", err)
	}
	return out, nil
}

// embed runs action_in_proj on x and t into e.s.x.
func (e *Expert) embed(x []float32, t float32) error {
	if err := e.setInputs(x, t); err != nil {
		return err
	}
	return e.inProj()
}

// setInputs uploads the Fourier features of x and t, action_in_proj's
// input.
func (e *Expert) setInputs(x []float32, t float32) error {
	s := e.s
	if len(x) != s.t*ActionDims {
		return fmt.Errorf("diffusion: %d action values, want %d×%d: %w", len(x), s.t, ActionDims, models.ErrBadInput)
	}
	if math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
		return fmt.Errorf("diffusion: flow time %g: %w", t, models.ErrBadInput)
	}
	ff, df, err := e.flowFeed()
	if err != nil {
		return err
	}
	if ff != nil {
		// The features on the device, as the Euler steps there make them
		// (integrateOnDevice): every path of a backend the same bits.
		return e.deviceFeatures(ff, df, x, t)
	}
	if err := e.InProj.Fourier(s.featsH, x, t); err != nil {
		return err
	}
	if err := e.be.Upload(s.feats, s.featsH); err != nil {
		return fmt.Errorf("diffusion: uploading the Fourier features: %w", err)
	}
	return nil
}

// inProj runs action_in_proj on the uploaded features into e.s.x.
func (e *Expert) inProj() error {
	s := e.s
	if err := models.Do(e.Exec, e.inUnit, func() error { return e.InProj.Forward(e.be, s.x, s.feats, s) }); err != nil {
		return fmt.Errorf("diffusion: %w", err)
	}
	return nil
}

// group is one sample's rows in an expert pass: Waypoints action tokens
// after prefix p, their keys and values at cache rows [at, at+Waypoints).
// A pass over several groups runs every unit once over all their rows.
type group struct {
	p    *Prefix
	at   int
	draw int // the Draws it samples for: its rows run with that Draws' alone
}

// solo is the one group of a pass over one sample: its rows right after
// the prefix.
func solo(p *Prefix) []group { return []group{{p: p, at: p.Len}} }

// groupsOf lays out samples[i] samples after prefixes[i], in that order:
// the j-th sample of a prefix at cache rows Len + j·Waypoints.
func groupsOf(prefixes []Prefix, samples []int, waypoints int) []group {
	var gs []group
	for i := range prefixes {
		for j := range samples[i] {
			gs = append(gs, group{p: &prefixes[i], at: prefixes[i].Len + j*waypoints, draw: i})
		}
	}
	return gs
}

// checkGroups validates every group's prefix, with room in its cache for
// the group's rows.
func (e *Expert) checkGroups(gs []group, rows int) error {
	if len(gs)*e.Waypoints() != rows {
		return fmt.Errorf("diffusion: %d samples of %d action tokens in a pass of %d rows", len(gs), e.Waypoints(), rows)
	}
	for _, g := range gs {
		if err := g.p.check(&e.Config.Expert, g.at+e.Waypoints()-g.p.Len); err != nil {
			return err
		}
	}
	return nil
}

// forward runs action_in_proj, the layers and the final norm over the
// groups' rows, leaving the normed hidden states in e.s.h, and with out
// action_out_proj into e.s.out.
func (e *Expert) forward(ctx context.Context, gs []group, x []float32, t float32, out bool) error {
	s, be := e.s, e.be
	if s == nil {
		return fmt.Errorf("diffusion: expert is closed")
	}
	if err := e.checkGroups(gs, s.t); err != nil {
		return err
	}
	if err := e.setInputs(x, t); err != nil {
		return err
	}
	if err := e.uploadRope(gs, s); err != nil {
		return err
	}
	step := func() error { return e.compute(ctx, gs, out) }
	if g := e.graph; g != nil && out && g.Usable(be, e.Exec) {
		if done, err := g.Run(ctx, be, step); done || err != nil {
			return err
		}
	}
	return step()
}

// span is where group g's rows sit in its cache and what they see: the
// prefix but its hidden rows [maskFrom, Len), and (a sample after the
// first) the rows of the samples before it, hidden too, so that every
// sample attends exactly as it would alone; and each other both ways.
func (g group) span() qwen3.Span {
	return qwen3.Span{Pos: g.at, MaskFrom: g.p.maskFrom(), MaskTo: g.at}
}

// compute runs action_in_proj, the layers and the final norm on the
// uploaded inputs (and with out action_out_proj), each unit once a pass.
// Within a unit's turn each Draws' rows compute in turn, over their own
// view of the activations: a Draws' samples run together (one product over
// their rows, the attention per sample), with the shapes they have when
// that Draws runs alone, so that a batch of requests gives each the bits
// it gets alone.
func (e *Expert) compute(ctx context.Context, gs []group, out bool) error {
	be := e.be
	runs, err := e.runsOf(gs)
	if err != nil {
		return err
	}
	each := func(f func(r drawRun) error) func() error {
		return func() error {
			for _, r := range runs {
				if err := f(r); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := models.Do(e.Exec, e.inUnit, each(func(r drawRun) error { return e.InProj.Forward(be, r.s.x, r.s.feats, r.s) })); err != nil {
		return fmt.Errorf("diffusion: %w", err)
	}
	for i, l := range e.Layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		lu := e.layerUnits[i]
		err := models.Do(e.Exec, lu.Attn, each(func(r drawRun) error {
			kc, vc, span := r.span(i, e.Waypoints())
			return l.Attention(be, r.s.x, kc, vc, span, r.s.layer)
		}))
		if err == nil {
			err = models.Do(e.Exec, lu.MLP, each(func(r drawRun) error { return l.MLP(be, r.s.x, r.s.layer, lu.MLP.Split()) }))
		}
		if err != nil {
			return fmt.Errorf("diffusion: expert layer %d: %w", i, err)
		}
	}
	return models.Do(e.Exec, e.headUnit, each(func(r drawRun) error {
		if err := be.RMSNorm(r.s.h, r.s.x, e.Norm, float32(e.Config.Expert.RMSNormEps)); err != nil {
			return fmt.Errorf("diffusion: expert final norm: %w", err)
		}
		if !out {
			return nil
		}
		if err := be.MatMul(r.s.out, r.s.h, e.OutProj.W, e.OutProj.B); err != nil {
			return fmt.Errorf("diffusion: action_out_proj: %w", err)
		}
		return nil
	}))
}

// drawRun is one Draws' samples in a pass: their groups and their rows'
// view of the activations (the whole scratch when the pass has one).
type drawRun struct {
	gs []group
	s  *scratch
}

// runsOf splits a pass's groups by Draws, each with its rows' view of
// e.s.
func (e *Expert) runsOf(gs []group) ([]drawRun, error) {
	var runs []drawRun
	for i, g := range gs {
		if i == 0 || g.draw != gs[i-1].draw {
			runs = append(runs, drawRun{})
		}
		r := &runs[len(runs)-1]
		r.gs = append(r.gs, g)
	}
	if len(runs) == 1 {
		runs[0].s = e.s
		return runs, nil
	}
	row := 0
	for i := range runs {
		n := len(runs[i].gs) * e.Waypoints()
		s, err := e.s.rows(e.be, row, n)
		if err != nil {
			return nil, err
		}
		runs[i].s, row = s, row+n
	}
	return runs, nil
}

// span is where a run's rows sit in layer i's cache and what they attend
// to: one sample's span over its prefix's cache, or each sample's
// (qwen3.Span.Groups).
func (r drawRun) span(i, waypoints int) (kc, vc backend.Tensor, span qwen3.Span) {
	g := r.gs[0]
	kc, vc, span = g.p.Cache[i].K, g.p.Cache[i].V, g.span()
	if len(r.gs) > 1 {
		span = qwen3.Span{Groups: make([]qwen3.Group, len(r.gs))}
		for j, g := range r.gs {
			span.Groups[j] = qwen3.Group{Rows: waypoints, K: g.p.Cache[i].K, V: g.p.Cache[i].V, Span: g.span()}
		}
	}
	return kc, vc, span
}
