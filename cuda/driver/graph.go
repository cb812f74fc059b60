package driver

// #include "shim.h"
import "C"

import "errors"

// Graph and GraphExec are a CUgraph (a captured sequence of work) and a
// CUgraphExec (its instantiation, ready to launch).
type (
	Graph     uintptr
	GraphExec uintptr
)

// CaptureMode is a CUstreamCaptureMode: which calls of other threads a
// capture forbids.
type CaptureMode int

// Capture modes.
const (
	// CaptureGlobal forbids unsafe calls (cuMemAlloc, synchronizing
	// calls, ...) on every thread while the capture runs.
	CaptureGlobal CaptureMode = 0
	// CaptureThreadLocal forbids them on the capturing thread only.
	CaptureThreadLocal CaptureMode = 1
	// CaptureRelaxed forbids nothing.
	CaptureRelaxed CaptureMode = 2
)

// CaptureStatus is a CUstreamCaptureStatus.
type CaptureStatus int

// Capture statuses.
const (
	CaptureNone        CaptureStatus = 0 // the stream is not capturing
	CaptureActive      CaptureStatus = 1 // it is
	CaptureInvalidated CaptureStatus = 2 // it was, and an error broke the capture; end it
)

// StreamBeginCapture starts recording the work queued on s into a graph
// instead of running it; end it with StreamEndCapture.
func (d *Driver) StreamBeginCapture(s Stream, mode CaptureMode) error {
	return d.check("cuStreamBeginCapture_v2", C.vla_cuStreamBeginCapture(d.f.streamBeginCapture, C.uintptr_t(s), C.int(mode)))
}

// StreamEndCapture ends the capture on s and returns the graph, which
// MUST be released with GraphDestroy. A capture broken by an error
// returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph; either way
// the stream runs work again afterwards.
func (d *Driver) StreamEndCapture(s Stream) (Graph, error) {
	var g C.uintptr_t
	err := d.check("cuStreamEndCapture", C.vla_cuStreamEndCapture(d.f.streamEndCapture, C.uintptr_t(s), &g))
	return Graph(g), err
}

// StreamCaptureStatus says whether s is capturing.
func (d *Driver) StreamCaptureStatus(s Stream) (CaptureStatus, error) {
	var st C.int
	err := d.check("cuStreamIsCapturing", C.vla_cuStreamIsCapturing(d.f.streamIsCapturing, C.uintptr_t(s), &st))
	return CaptureStatus(st), err
}

// GraphInstantiate makes a launchable graph of g (flags 0). It MUST be
// released with GraphExecDestroy; g may be destroyed once it is made.
func (d *Driver) GraphInstantiate(g Graph) (GraphExec, error) {
	var e C.uintptr_t
	err := d.check("cuGraphInstantiateWithFlags", C.vla_cuGraphInstantiateWithFlags(d.f.graphInstantiate, &e, C.uintptr_t(g), 0))
	return GraphExec(e), err
}

// GraphLaunch queues a run of e on s, in order with the rest of s.
func (d *Driver) GraphLaunch(e GraphExec, s Stream) error {
	return d.check("cuGraphLaunch", C.vla_cuGraphLaunch(d.f.graphLaunch, C.uintptr_t(e), C.uintptr_t(s)))
}

// GraphExecDestroy releases an instantiated graph.
func (d *Driver) GraphExecDestroy(e GraphExec) error {
	return d.check("cuGraphExecDestroy", C.vla_cuGraphExecDestroy(d.f.graphExecDestroy, C.uintptr_t(e)))
}

// GraphDestroy releases a graph.
func (d *Driver) GraphDestroy(g Graph) error {
	return d.check("cuGraphDestroy", C.vla_cuGraphDestroy(d.f.graphDestroy, C.uintptr_t(g)))
}

// GraphNodes is the number of nodes of g (kernels, copies, memsets).
func (d *Driver) GraphNodes(g Graph) (int, error) {
	if d.f.graphGetNodes == nil {
		return 0, errors.New("cuda: this libcuda has no cuGraphGetNodes")
	}
	var n C.size_t
	err := d.check("cuGraphGetNodes", C.vla_cuGraphGetNodes(d.f.graphGetNodes, C.uintptr_t(g), &n))
	return int(n), err
}
