package diffusion

import (
	"vlanode/backend"
	"vlanode/models"
)

// stepGraph is one sample's Euler step (action_in_proj, the expert's
// layers over the VLM prefix, the final norm, action_out_proj) captured
// in one graph: on a backend that captures (backend.Capturer), with every
// unit computed in place (models.Direct), a step costs one launch instead
// of ~20 per layer. Every step of a sample reads the same prefix and
// writes the same tensors; only the uploaded Fourier features change. The
// first step runs op by op (which sizes the backend's scratch), the
// second is captured, the later ones replay it, with the results of the
// op-by-op path bit for bit.
type stepGraph struct {
	g   backend.Graph
	ran bool  // a step ran op by op
	err error // why the capture failed: op by op from then on
}

// usable says whether the graph can serve steps on be under exec.
func (g *stepGraph) usable(be backend.Backend, exec models.Runner) bool {
	_, ok := be.(backend.Capturer)
	return ok && g.err == nil && models.Direct(exec)
}

// run runs one step: op by op, captured then launched, or launched.
func (g *stepGraph) run(be backend.Backend, step func() error) error {
	switch {
	case g.g != nil:
		return g.g.Launch()
	case !g.ran:
		g.ran = true
		return step()
	}
	gr, err := be.(backend.Capturer).CaptureGraph(step)
	if err != nil {
		g.err = err
		return step()
	}
	g.g = gr
	return gr.Launch()
}

// close releases the graph.
func (g *stepGraph) close() error {
	if g == nil || g.g == nil {
		return nil
	}
	err := g.g.Close()
	g.g = nil
	return err
}
