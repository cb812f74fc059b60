package metrics

import (
	"bufio"
	"fmt"
	"math"
	"slices"
	"sync"
)

// CounterVec is a family of monotonically increasing counters, one for each
// value of its label (or a single one when the label is "").
type CounterVec struct {
	family
	mu     sync.Mutex
	values map[string]float64
}

// NewCounterVec registers a counter family. With label "" it holds one
// counter, addressed with the value "".
func (r *Registry) NewCounterVec(name, help, label string, preset ...string) *CounterVec {
	c := &CounterVec{family: family{name, help, "counter", label}, values: map[string]float64{}}
	for _, v := range preset {
		c.values[v] = 0
	}
	if label == "" {
		c.values[""] = 0
	}
	r.add(c)
	return c
}

// Add adds d (≥ 0) to the counter for label value v.
func (c *CounterVec) Add(v string, d float64) {
	c.mu.Lock()
	c.values[v] += d
	c.mu.Unlock()
}

// Inc adds one to the counter for label value v.
func (c *CounterVec) Inc(v string) { c.Add(v, 1) }

// Value returns the counter for label value v.
func (c *CounterVec) Value(v string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values[v]
}

func (c *CounterVec) write(w *bufio.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.header(w)
	for _, k := range sortedKeys(c.values) {
		fmt.Fprintf(w, "%s%s %s\n", c.fname, c.labels(k), formatFloat(c.values[k]))
	}
}

// Gauge is a value that goes up and down.
type Gauge struct {
	family
	mu  sync.Mutex
	val float64
}

// NewGauge registers a gauge.
func (r *Registry) NewGauge(name, help string) *Gauge {
	g := &Gauge{family: family{fname: name, help: help, typ: "gauge"}}
	r.add(g)
	return g
}

// Set sets the gauge.
func (g *Gauge) Set(v float64) {
	g.mu.Lock()
	g.val = v
	g.mu.Unlock()
}

// SetMax raises the gauge to v if v is larger.
func (g *Gauge) SetMax(v float64) {
	g.mu.Lock()
	g.val = max(g.val, v)
	g.mu.Unlock()
}

// Value returns the gauge.
func (g *Gauge) Value() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.val
}

func (g *Gauge) write(w *bufio.Writer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.header(w)
	fmt.Fprintf(w, "%s %s\n", g.fname, formatFloat(g.val))
}

// HistogramVec is a family of histograms, one for each value of its label.
type HistogramVec struct {
	family
	bounds []float64 // upper bounds, increasing, without +Inf
	mu     sync.Mutex
	hists  map[string]*histogram
}

type histogram struct {
	counts []uint64 // per bucket (not cumulative); the last is +Inf
	sum    float64
	count  uint64
}

// NewHistogramVec registers a histogram family with the given bucket upper
// bounds (increasing; +Inf is implied).
func (r *Registry) NewHistogramVec(name, help, label string, bounds []float64) *HistogramVec {
	if !slices.IsSorted(bounds) {
		panic("metrics: " + name + ": bucket bounds not increasing")
	}
	h := &HistogramVec{family: family{name, help, "histogram", label}, bounds: slices.Clone(bounds), hists: map[string]*histogram{}}
	r.add(h)
	return h
}

// Observe records x under label value v.
func (h *HistogramVec) Observe(v string, x float64) {
	i, _ := slices.BinarySearch(h.bounds, x) // first bound ≥ x; len(bounds) is +Inf
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := h.hists[v]
	if hs == nil {
		hs = &histogram{counts: make([]uint64, len(h.bounds)+1)}
		h.hists[v] = hs
	}
	hs.counts[i]++
	hs.sum += x
	hs.count++
}

// Snapshot returns the count and sum of the histogram for label value v.
func (h *HistogramVec) Snapshot(v string) (count uint64, sum float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hs := h.hists[v]; hs != nil {
		return hs.count, hs.sum
	}
	return 0, 0
}

func (h *HistogramVec) write(w *bufio.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.header(w)
	for _, k := range sortedKeys(h.hists) {
		hs := h.hists[k]
		var cum uint64
		for i, b := range h.bounds {
			cum += hs.counts[i]
			fmt.Fprintf(w, "%s_bucket%s %d\n", h.fname, h.labels(k, "le", formatFloat(b)), cum)
		}
		cum += hs.counts[len(h.bounds)]
		fmt.Fprintf(w, "%s_bucket%s %d\n", h.fname, h.labels(k, "le", formatFloat(math.Inf(1))), cum)
		fmt.Fprintf(w, "%s_sum%s %s\n", h.fname, h.labels(k), formatFloat(hs.sum))
		fmt.Fprintf(w, "%s_count%s %d\n", h.fname, h.labels(k), hs.count)
	}
}
