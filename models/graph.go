package models

import (
	"context"
	"errors"

	"vlanode/backend"
)

// StepGraph replays a pass that repeats with the same tensors (a decode
// step, an Euler step) from one captured graph, on a backend that captures
// (backend.Capturer) with every unit computed in place (Direct): the first
// step runs op by op, which sizes the backend's scratch, and is captured
// right after it is queued, so that the capture and the graph's
// instantiation run on the host while the GPU runs that step; every later
// step is launched. A graph is an optimization: when the first step or the
// capture is refused, Err says why and the caller runs op by op from then
// on. The zero value is ready.
type StepGraph struct {
	g   backend.Graph
	ran bool
	err error
}

// Usable says whether steps on be under exec may go through the graph.
func (s *StepGraph) Usable(be backend.Backend, exec Runner) bool {
	_, ok := be.(backend.Capturer)
	return ok && s.err == nil && Direct(exec)
}

// Run runs one step. It returns false, with Err set, when the first step
// failed for another reason than ctx: the caller then redoes the step op
// by op. A refused capture leaves the first step done; a later call (the
// caller should have checked Usable) then runs its step op by op.
func (s *StepGraph) Run(ctx context.Context, be backend.Backend, step func() error) (bool, error) {
	switch {
	case s.g != nil:
		return true, s.g.Launch()
	case s.ran:
		return true, step()
	}
	s.ran = true
	if err := step(); err != nil {
		if ctx.Err() != nil {
			return true, err
		}
		s.err = err
		return false, nil
	}
	cp, ok := be.(backend.Capturer)
	if !ok {
		s.err = errors.New("models: step graph on a backend that does not capture")
		return true, nil
	}
	// Nothing runs while capturing: the step queued above is still on the
	// GPU, and the next step launches the graph.
	gr, err := cp.CaptureGraph(step)
	if err != nil {
		s.err = err
		return true, nil
	}
	s.g = gr
	return true, nil
}

// Fail stops the graph: later steps run op by op, and Err says why.
func (s *StepGraph) Fail(err error) { s.err = err }

// Captured says whether steps replay a graph.
func (s *StepGraph) Captured() bool { return s.g != nil }

// Err is why the steps run op by op, if a capture or the first step was
// refused.
func (s *StepGraph) Err() error { return s.err }

// Close releases the graph.
func (s *StepGraph) Close() error {
	if s == nil || s.g == nil {
		return nil
	}
	err := s.g.Close()
	s.g = nil
	return err
}
