// Package metrics is a small Prometheus registry: counters, gauges and
// histograms, with or without one label, written in the Prometheus text
// exposition format (version 0.0.4).
//
// It exists so that the node does not pull in client_golang and its
// dependencies (protobuf among them) for the few metrics it exports. Every
// metric is safe for concurrent use; each guards its own values and holds no
// other lock while doing so.
package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ContentType is the media type of the text exposition format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// metric is one metric family that can write itself.
type metric interface {
	name() string
	write(w *bufio.Writer)
}

// Registry holds metric families in registration order.
type Registry struct {
	mu      sync.Mutex
	metrics []metric
	names   map[string]bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{names: map[string]bool{}} }

func (r *Registry) add(m metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names[m.name()] {
		panic("metrics: " + m.name() + " registered twice") // a programming error, found by any test
	}
	r.names[m.name()] = true
	r.metrics = append(r.metrics, m)
}

// WriteTo writes every metric in the text exposition format.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	ms := slices.Clone(r.metrics)
	r.mu.Unlock()
	cw := &countingWriter{w: w}
	bw := bufio.NewWriter(cw)
	for _, m := range ms {
		m.write(bw)
	}
	err := bw.Flush()
	return cw.n, err
}

// ServeHTTP serves the registry's metrics.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", ContentType)
	_, _ = r.WriteTo(w)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// family is what every metric type shares: name, help, type, and an
// optional label name.
type family struct {
	fname, help, typ, label string
}

func (f *family) name() string { return f.fname }

func (f *family) header(w *bufio.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.fname, escapeHelp(f.help), f.fname, f.typ)
}

// labels returns `{label="value"}`, with extra pairs appended, or "" when
// there are none.
func (f *family) labels(value string, extra ...string) string {
	var parts []string
	if f.label != "" {
		parts = append(parts, f.label+`="`+escapeLabel(value)+`"`)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		parts = append(parts, extra[i]+`="`+escapeLabel(extra[i+1])+`"`)
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// sortedKeys returns the keys of m in order, so that output is stable.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
