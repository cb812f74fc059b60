package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"vlanode/diffusion"
	"vlanode/models/alpamayo"
	"vlanode/safetensors"
	"vlanode/tensor"
)

// expertInputs is what eval runs an Alpamayo-R1 action side on: a VLM KV
// cache and the flow states to evaluate the velocity at.
type expertInputs struct {
	k, v      []float32 // [layers][L][kvw]
	prefix    [3]int    // L, offset, rope_delta
	states    []float32 // [S][waypoints][2]
	times     []float32 // [S]
	statesSrc string
}

// readExpertInputs reads eval's inputs for an action side: prefix (int64
// [3]: L, offset, rope_delta), kv_k and kv_v (float32 [layers, L, kvw]) and
// noise (float32 [waypoints, 2]) from in; the states are x_steps (float32
// [S, waypoints, 2]) at time_steps (float32, at least S) from states, or
// the noise at t = 0 when states is "".
func readExpertInputs(in, states string, layers, kvw, waypoints int) (*expertInputs, error) {
	f, err := safetensors.OpenFile(in)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ei := &expertInputs{statesSrc: in}
	pi, err := f.Expect("prefix", tensor.I64, 3)
	if err != nil {
		return nil, err
	}
	p, err := pi.I64()
	if err != nil {
		return nil, fmt.Errorf("%s: prefix: %w", in, err)
	}
	for i, v := range p {
		if v < -1<<30 || v > 1<<30 {
			return nil, fmt.Errorf("%s: prefix[%d] = %d is out of range", in, i, v)
		}
		ei.prefix[i] = int(v)
	}
	L := ei.prefix[0]
	if L <= 0 {
		return nil, fmt.Errorf("%s: prefix gives %d cached tokens, want at least 1", in, L)
	}
	for _, t := range []struct {
		name string
		dst  *[]float32
	}{{"kv_k", &ei.k}, {"kv_v", &ei.v}} {
		if *t.dst, err = readF32(f, t.name, layers, L, kvw); err != nil {
			return nil, err
		}
	}
	if states == "" {
		if ei.states, err = readF32(f, "noise", waypoints, diffusion.ActionDims); err != nil {
			return nil, err
		}
		ei.times = []float32{0}
		return ei, nil
	}
	s, err := safetensors.OpenFile(states)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ei.statesSrc = states
	if ei.states, err = readF32(s, "x_steps", -1, waypoints, diffusion.ActionDims); err != nil {
		return nil, err
	}
	n := len(ei.states) / (waypoints * diffusion.ActionDims)
	if ei.times, err = readF32(s, "time_steps", -1); err != nil {
		return nil, err
	}
	if len(ei.times) < n || n == 0 {
		return nil, fmt.Errorf("%s: %d states at %d time_steps, want at least one time a state", states, n, len(ei.times))
	}
	ei.times = ei.times[:n]
	return ei, nil
}

// readF32 reads a float32 tensor of the given shape (-1: any size).
func readF32(f *safetensors.File, name string, shape ...int) ([]float32, error) {
	info, err := f.Expect(name, tensor.F32, shape...)
	if err != nil {
		return nil, err
	}
	v, err := info.F32()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// expertOutputs are eval's outputs for an action side, each state's in
// turn, and the expert's keys and values after the first state.
type expertOutputs struct {
	inProj, hidden, velocity []float32 // [S][waypoints][hidden or 2]
	newK, newV               []float32 // [layers][waypoints][kvw]
}

// evalExpert runs eval on an Alpamayo-R1 checkpoint's action side:
// action_in_proj, the expert and action_out_proj at each given flow state
// (teacher forcing: the states are inputs, as the tokens are for logits),
// over the VLM cache from the inputs, as NVlabs/alpamayo's step_fn runs
// them.
func evalExpert(ctx context.Context, mf *modelFlags, ef *evalFlags, rep *report, stderr io.Writer) error {
	be, err := mf.openBackend(stderr)
	if err != nil {
		return err
	}
	defer be.Close()
	start := time.Now()
	as, err := alpamayo.LoadActionSide(be, mf.dir, ef.vlm)
	if err != nil {
		return err
	}
	defer as.Close()
	ex := as.Expert
	c := &ex.Config.Expert
	n, h, kvw := ex.Waypoints(), c.HiddenSize, c.NumKeyValueHeads*c.HeadDim
	fmt.Fprintf(stderr, "vlanode: loaded the action side of %s (expert: %d layers, hidden %d; %d waypoints) in %v\n",
		mf.dir, c.NumHiddenLayers, h, n, time.Since(start).Round(time.Millisecond))
	in, err := readExpertInputs(ef.inputs, ef.states, c.NumHiddenLayers, kvw, n)
	if err != nil {
		return err
	}
	pre, err := ex.HostPrefix(in.k, in.v, in.prefix[0], in.prefix[1], in.prefix[2])
	if err != nil {
		return fmt.Errorf("%s: %w", ef.inputs, err)
	}
	defer ex.FreePrefix(pre)

	var o expertOutputs
	for i, t := range in.times {
		x := in.states[i*n*diffusion.ActionDims : (i+1)*n*diffusion.ActionDims]
		e, err := ex.Embed(x, t)
		if err != nil {
			return fmt.Errorf("state %d: %w", i, err)
		}
		hs, err := ex.Hidden(ctx, pre, x, t)
		if err != nil {
			return fmt.Errorf("state %d: %w", i, err)
		}
		v, err := ex.Velocity(ctx, pre, x, t)
		if err != nil {
			return fmt.Errorf("state %d: %w", i, err)
		}
		o.inProj, o.hidden, o.velocity = append(o.inProj, e...), append(o.hidden, hs...), append(o.velocity, v...)
		if i == 0 {
			if o.newK, o.newV, err = ex.ActionKV(pre); err != nil {
				return err
			}
		}
	}
	S, layers := len(in.times), c.NumHiddenLayers
	if err := safetensors.WriteFile(ef.out, []safetensors.Tensor{
		safetensors.F32Tensor("velocity", []int{S, n, diffusion.ActionDims}, o.velocity),
		safetensors.F32Tensor("hidden", []int{S, n, h}, o.hidden),
		safetensors.F32Tensor("in_proj", []int{S, n, h}, o.inProj),
		safetensors.F32Tensor("new_k", []int{layers, n, kvw}, o.newK),
		safetensors.F32Tensor("new_v", []int{layers, n, kvw}, o.newV),
	}, map[string]string{"model": mf.dir, "device": mf.device, "states": in.statesSrc}); err != nil {
		return fmt.Errorf("writing %s: %w", ef.out, err)
	}
	fmt.Fprintf(rep.lines(), "wrote velocity [%d, %d, 2], hidden and in_proj [%d, %d, %d], new_k and new_v [%d, %d, %d] to %s\n",
		S, n, S, n, h, layers, n, kvw, ef.out)
	rep.set("out", ef.out)
	rep.set("velocity", []int{S, n, 2})
	rep.set("hidden", []int{S, n, h})
	rep.set("in_proj", []int{S, n, h})
	rep.set("new_k", []int{layers, n, kvw})
	rep.set("new_v", []int{layers, n, kvw})
	if ef.expect == "" {
		return rep.done(nil)
	}
	tol := ef.tolerance(be.Name())
	var failed []string
	for _, c := range []struct {
		got       []float32
		ref, name string
	}{
		{o.inProj, "inproj_steps", "in_proj"},
		{o.hidden, "hidden_steps", "hidden"},
		{o.velocity, "v_steps", "velocity"},
		{o.newK, "new_k", "new_k"},
		{o.newV, "new_v", "new_v"},
	} {
		ok, err := expectF32(rep.lines(), ef.expect, c.ref, c.name, c.got, true, tol)
		if err != nil {
			return err
		}
		if !ok {
			failed = append(failed, c.name)
		}
	}
	rep.set("expect", expectJSON{Reference: ef.expect, Match: len(failed) == 0, Differ: failed})
	if len(failed) > 0 {
		return rep.done(fmt.Errorf("%v differ from %s beyond the tolerance", failed, ef.expect))
	}
	return rep.done(nil)
}
