package cuda

import (
	"errors"
	"fmt"

	"vlanode/cuda/driver"
)

// capture is a stream capture in progress (see Backend.Capture).
type capture struct {
	refused error // the ops refused while capturing
}

// inCapture refuses op while a capture is in progress: op would
// synchronize, allocate or copy from host memory, none of which a graph can
// replay. The refusal is remembered, so Capture fails even when fn ignores
// the op's error. Call it on the backend's thread.
func (g *gpu) inCapture(op string) error {
	if g.capture == nil {
		return nil
	}
	err := fmt.Errorf("cuda: %s: not allowed while capturing a graph (it allocates, synchronizes or copies host memory): do it before Capture", op)
	g.capture.refused = errors.Join(g.capture.refused, err)
	return err
}

// Graph is a sequence of ops recorded by Backend.Capture, replayed on the
// GPU by Launch with one launch call. It holds the device addresses of the
// tensors the ops used: keep them allocated while the graph lives, and
// change their contents (Upload, Copy, other ops) between launches to
// feed it.
type Graph struct {
	b     *Backend
	exec  driver.GraphExec
	nodes int
}

// Nodes is the number of GPU operations (kernels, copies) in the graph.
func (gr *Graph) Nodes() int { return gr.nodes }

// Capture records the ops that fn queues on the backend into a graph
// instead of running them, and returns the graph ready to launch. Nothing
// runs during the capture.
//
// Inside fn, only ops that queue GPU work are allowed (MatMul, the norms,
// Rope, Attention, the elementwise ops, Copy; Rows and Reshape views):
// Alloc, Weight, Free, Upload, Download, Sync and Embedding (which uploads
// its ids) fail, and so does an op whose scratch buffer would have to grow.
// So run fn once outside a capture first: that sizes the scratch buffers
// and lets cuBLAS load its kernels. Any failure inside fn makes Capture
// fail; the backend is then usable as before.
func (b *Backend) Capture(fn func() error) (*Graph, error) {
	if fn == nil {
		return nil, errors.New("cuda: capture: nil function")
	}
	err := b.run(func(g *gpu) error {
		if g.capture != nil {
			return errors.New("cuda: capture: a capture is already in progress")
		}
		if err := g.drv.StreamBeginCapture(g.stream, driver.CaptureThreadLocal); err != nil {
			return fmt.Errorf("cuda: capture: %w", err)
		}
		g.capture = &capture{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var fnErr error
	func() {
		defer func() {
			if r := recover(); r != nil {
				fnErr = fmt.Errorf("cuda: capture: the captured function panicked: %v", r)
			}
		}()
		fnErr = fn()
	}()
	var gr *Graph
	err = b.run(func(g *gpu) error {
		gr, err = g.endCapture(fnErr)
		return err
	})
	if err != nil {
		return nil, err
	}
	gr.b = b
	return gr, nil
}

// endCapture ends the capture and instantiates its graph, unless fnErr or
// a refused op says the capture is not to be kept.
func (g *gpu) endCapture(fnErr error) (*Graph, error) {
	c := g.capture
	g.capture = nil
	graph, err := g.drv.StreamEndCapture(g.stream)
	if err != nil {
		err = fmt.Errorf("cuda: capture: %w", err)
	}
	if fnErr != nil || c.refused != nil || err != nil {
		if graph != 0 {
			err = errors.Join(err, g.drv.GraphDestroy(graph))
		}
		return nil, errors.Join(fnErr, c.refused, err)
	}
	defer g.drv.GraphDestroy(graph) // the instantiation keeps what it needs
	nodes, _ := g.drv.GraphNodes(graph)
	exec, err := g.drv.GraphInstantiate(graph)
	if err != nil {
		return nil, fmt.Errorf("cuda: capture: %w", err)
	}
	gr := &Graph{exec: exec, nodes: nodes}
	if g.graphs == nil {
		g.graphs = map[*Graph]struct{}{}
	}
	g.graphs[gr] = struct{}{}
	return gr, nil
}

// Launch queues one replay of the graph on the backend's stream, in order
// with the ops queued before and after it. Like an op, it does not wait
// for the GPU.
func (gr *Graph) Launch() error {
	if gr == nil || gr.b == nil {
		return errors.New("cuda: graph: nil graph")
	}
	return gr.b.run(func(g *gpu) error {
		if _, ok := g.graphs[gr]; !ok {
			return errors.New("cuda: graph: launched after Close")
		}
		if g.capture != nil {
			return errors.New("cuda: graph: launched while capturing another")
		}
		if err := g.drv.GraphLaunch(gr.exec, g.stream); err != nil {
			return fmt.Errorf("cuda: graph: %w", err)
		}
		return nil
	})
}

// Close releases the graph once the launches queued so far have run.
// Closing twice, or after the backend closed, is harmless.
func (gr *Graph) Close() error {
	if gr == nil || gr.b == nil || gr.b.closed.Load() {
		return nil
	}
	err := gr.b.run(func(g *gpu) error {
		if _, ok := g.graphs[gr]; !ok {
			return nil
		}
		delete(g.graphs, gr)
		return g.drv.GraphExecDestroy(gr.exec)
	})
	if err != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("cuda: graph: %w", err)
	}
	return nil
}

// closeGraphs ends a capture left open and releases every graph (at
// Close).
func (g *gpu) closeGraphs() error {
	var errs []error
	if g.capture != nil {
		g.capture = nil
		if graph, err := g.drv.StreamEndCapture(g.stream); err != nil {
			errs = append(errs, err)
		} else if graph != 0 {
			errs = append(errs, g.drv.GraphDestroy(graph))
		}
	}
	for gr := range g.graphs {
		errs = append(errs, g.drv.GraphExecDestroy(gr.exec))
	}
	g.graphs = nil
	return errors.Join(errs...)
}
