package residency

import (
	"testing"
	"vlanode/placement"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProfileRoundTrip(t *testing.T) {
	p := defaultProfile(t)
	raw, err := p.Marshal()
	require.NoError(t, err)
	q, err := ParseProfile(raw)
	require.NoError(t, err)
	assert.Equal(t, p, q)
	assert.Contains(t, p.Source, "vlanode profile")
	for _, u := range p.Units {
		assert.NotEmpty(t, u.Source, "%s %s", u.Module, u.Stage)
	}
}

func TestProfileErrors(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{`, "unexpected EOF"},
		{`{"source":"x","h2d_gbps":1,"roofline":{"mem_gbps":1,"tflops":1},"bogus":1}`, `unknown field "bogus"`},
		{`{"h2d_gbps":1,"roofline":{"mem_gbps":1,"tflops":1}}`, "source is empty"},
		{`{"source":"x","roofline":{"mem_gbps":1,"tflops":1}}`, "h2d_gbps must be positive"},
		{`{"source":"x","h2d_gbps":1,"roofline":{"tflops":1}}`, "roofline.mem_gbps must be positive"},
		{`{"source":"x","h2d_gbps":1,"roofline":{"mem_gbps":1,"tflops":1},"fixed":{"cuda_context_bytes":-1}}`, "must not be negative"},
		{`{"source":"x","h2d_gbps":1,"roofline":{"mem_gbps":1,"tflops":1},"units":[{"module":"vlm","stage":"decode","rows":1,"ms":0}]}`, "units[0] (vlm in decode)"},
		{`{"source":"x","h2d_gbps":1,"roofline":{"mem_gbps":1,"tflops":1},"cpu":{"source":"x","threads":1,"h2d_busy_gbps":1,"rates":[{"rows":1,"gbps":1,"tflops":1,"call_ms":-0.1}]}}`, "cpu.rates[0].call_ms must not be negative"},
		{`{"source":"x","h2d_gbps":1,"roofline":{"mem_gbps":1,"tflops":1},"cpu":{"source":"x","threads":1,"h2d_busy_gbps":1,"rates":[{"rows":1,"gbps":0,"tflops":1}]}}`, "cpu.rates[0]: rows, gbps and tflops must be positive"},
	} {
		_, err := ParseProfile([]byte(tc.raw))
		assert.ErrorContains(t, err, tc.want, tc.raw)
	}
}

// TestProfileCost: a unit of the profiled shape takes the profiled time;
// another shape of the same module and stage takes it in the ratio of the
// rooflines (the nearest rows' entry); a module the profile lacks takes
// the roofline.
func TestProfileCost(t *testing.T) {
	p := &Profile{
		Source: "test", H2DGBps: 50, Roofline: Roofline{MemGBps: 1000, TFLOPs: 100},
		Units: []UnitTiming{
			{Module: placement.VLM, Stage: placement.StagePrefill, Rows: 1000, WeightBytes: 1e8, FLOPs: 2e12, Ms: 40}, // roofline 20 ms
			{Module: placement.VLM, Stage: placement.StagePrefill, Rows: 10, WeightBytes: 1e8, FLOPs: 2e10, Ms: 0.3},  // roofline 0.2 ms
			{Module: placement.VLM, Stage: placement.StageDecode, Rows: 1, WeightBytes: 1e8, FLOPs: 2e8, Ms: 0.2},     // roofline 0.1 ms
		},
	}
	units := []placement.Unit{
		{ID: placement.ID{Module: placement.VLM}, Bytes: 1e8, Work: []placement.Work{
			{Stage: placement.StagePrefill, Rows: 1000, FLOPs: 2e12},
			{Stage: placement.StagePrefill, Rows: 2000, FLOPs: 4e12},
			{Stage: placement.StagePrefill, Rows: 20, FLOPs: 4e10},
			{Stage: placement.StageDecode, Rows: 1, FLOPs: 2e8},
		}},
		{ID: placement.ID{Module: placement.VLM, Index: 1}, Bytes: 5e7, Work: []placement.Work{{Stage: placement.StageDecode, Rows: 1, FLOPs: 1e8}}},
		{ID: placement.ID{Module: placement.Merger}, Bytes: 8e7, Work: []placement.Work{{Stage: placement.StageVision, Rows: 100, FLOPs: 1e13}}},
	}
	p.Cost(units)
	w := units[0].Work
	assert.Equal(t, "profile", w[0].Timing)
	assert.InDelta(t, 40, w[0].ExeMs, 1e-9)
	assert.Equal(t, "scaled", w[1].Timing)
	assert.InDelta(t, 80, w[1].ExeMs, 1e-9, "compute-bound: twice the FLOPs")
	assert.InDelta(t, 0.3*0.4/0.2, w[2].ExeMs, 1e-9, "from the 10-row entry: roofline 0.4 over 0.2")
	assert.InDelta(t, 0.2, w[3].ExeMs, 1e-9)
	assert.InDelta(t, 0.1, units[1].Work[0].ExeMs, 1e-9, "memory-bound: half the bytes")
	assert.Equal(t, "roofline", units[2].Work[0].Timing)
	assert.InDelta(t, 100, units[2].Work[0].ExeMs, 1e-9, "1e13 FLOPs at 100 TFLOP/s")
	assert.InDelta(t, 2, p.DMAMs(1e8), 1e-12, "100 MB at 50 GB/s")
}

// TestCPUMs: a CPU share costs its tier's cost per call plus the larger of
// its bytes at the tier's bandwidth and its FLOPs at the tier's rate; the
// tier is the nearest in ratio of rows.
func TestCPUMs(t *testing.T) {
	c := &CPUProfile{Source: "test", Threads: 4, H2DBusyGBps: 50, Rates: []CPURate{
		{Rows: 1, GBps: 50, TFLOPs: 0.2, CallMs: 0.25},
		{Rows: 64, GBps: 40, TFLOPs: 2, CallMs: 0.5},
	}}
	assert.InDelta(t, 0.25+2, c.Ms(1e8, 2e8, 1), 1e-9, "100 MB at 50 GB/s")
	assert.InDelta(t, 0.25+2, c.Ms(1e8, 2e8, 4), 1e-9, "4 rows: nearer 1 than 64 in ratio")
	assert.InDelta(t, 0.5+2.5, c.Ms(1e8, 2e9, 64), 1e-9, "memory-bound at 64 rows: 100 MB at 40 GB/s")
	assert.InDelta(t, 0.5+10, c.Ms(1e8, 2e10, 64), 1e-9, "compute-bound: 2·10¹⁰ FLOPs at 2 TFLOP/s")
}
