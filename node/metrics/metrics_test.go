package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExposition(t *testing.T) {
	r := NewRegistry()
	req := r.NewCounterVec("x_requests_total", "Requests received.", "")
	errs := r.NewCounterVec("x_errors_total", "Errors by code.", "code", "internal")
	g := r.NewGauge("x_peak_bytes", "Peak bytes.")
	h := r.NewHistogramVec("x_stage_seconds", "Stage times.", "stage", []float64{0.01, 0.1})

	req.Inc("")
	req.Add("", 2)
	errs.Inc(`bad "quoted"`)
	g.SetMax(5)
	g.SetMax(3)
	h.Observe("total", 0.005)
	h.Observe("total", 0.01) // on a bound: counts in that bucket (le is ≤)
	h.Observe("total", 0.5)

	var b strings.Builder
	_, err := r.WriteTo(&b)
	require.NoError(t, err)
	want := `# HELP x_requests_total Requests received.
# TYPE x_requests_total counter
x_requests_total 3
# HELP x_errors_total Errors by code.
# TYPE x_errors_total counter
x_errors_total{code="bad \"quoted\""} 1
x_errors_total{code="internal"} 0
# HELP x_peak_bytes Peak bytes.
# TYPE x_peak_bytes gauge
x_peak_bytes 5
# HELP x_stage_seconds Stage times.
# TYPE x_stage_seconds histogram
x_stage_seconds_bucket{stage="total",le="0.01"} 2
x_stage_seconds_bucket{stage="total",le="0.1"} 2
x_stage_seconds_bucket{stage="total",le="+Inf"} 3
x_stage_seconds_sum{stage="total"} 0.515
x_stage_seconds_count{stage="total"} 3
`
	assert.Equal(t, want, b.String())

	n, sum := h.Snapshot("total")
	assert.Equal(t, uint64(3), n)
	assert.InDelta(t, 0.515, sum, 1e-12)
	assert.Equal(t, 3.0, req.Value(""))

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	assert.Equal(t, ContentType, rec.Header().Get("Content-Type"))
	assert.Equal(t, want, rec.Body.String())
}

func TestDuplicateNamePanics(t *testing.T) {
	r := NewRegistry()
	r.NewGauge("x", "x")
	assert.Panics(t, func() { r.NewGauge("x", "again") })
}
