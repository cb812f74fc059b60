package node

import (
	"time"

	"vlanode/msgs"
	"vlanode/node/metrics"
)

// stageBuckets are the upper bounds, in seconds, of the stage histograms:
// from the node's own microseconds to a model's seconds.
var stageBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Stage names of vlanode_stage_seconds: the node's own stages, then the
// model's (from the engine's Plan.TimingMs).
// nodeMetrics are the node's Prometheus metrics (docs/node.md lists them).
// The Status counters are read from them too.
type nodeMetrics struct {
	reg            *metrics.Registry
	requests       *metrics.CounterVec
	unanswerable   *metrics.CounterVec
	plans          *metrics.CounterVec
	errors         *metrics.CounterVec // by code
	shed           *metrics.CounterVec // by reason
	framesReceived *metrics.CounterVec // by camera
	framesRejected *metrics.CounterVec // by reason
	jobs           *metrics.CounterVec // by outcome
	queueDepth     *metrics.Gauge
	inflight       *metrics.Gauge
	stages         *metrics.HistogramVec
	vramPeak       *metrics.Gauge
	budget         *metrics.Gauge
	budgetChanges  *metrics.CounterVec // by source
	gpuMemUsed     *metrics.Gauge
	gpuMemFree     *metrics.Gauge
	gpuTemp        *metrics.Gauge
}

func newNodeMetrics(cameras []string) *nodeMetrics {
	r := metrics.NewRegistry()
	codes := []string{string(msgs.CodeBadRequest), string(msgs.CodeOverloaded), string(msgs.CodeDeadlineExceeded), string(msgs.CodeUnsupported), string(msgs.CodeInternal)}
	return &nodeMetrics{
		reg:            r,
		requests:       r.NewCounterVec("vlanode_requests_total", "Infer requests received.", ""),
		unanswerable:   r.NewCounterVec("vlanode_requests_without_reply_total", "Infer messages ignored because they had no reply subject.", ""),
		plans:          r.NewCounterVec("vlanode_plans_total", "Plans sent.", ""),
		errors:         r.NewCounterVec("vlanode_errors_total", "Error replies sent, by code.", "code", codes...),
		shed:           r.NewCounterVec("vlanode_shed_total", "Requests answered without inference because of load, deadline or shutdown, by reason.", "reason", shedQueueFull, shedSuperseded, shedDeadline, shedShutdown),
		framesReceived: r.NewCounterVec("vlanode_frames_received_total", "Frames kept for use_latest, by camera.", "camera", cameras...),
		framesRejected: r.NewCounterVec("vlanode_frames_rejected_total", "Frames dropped, by reason.", "reason", frameReasons...),
		jobs:           r.NewCounterVec("vlanode_jobs_total", "Jobs taken from the jobs queue, by outcome.", "outcome", jobOutcomes...),
		queueDepth:     r.NewGauge("vlanode_queue_depth", "Requests waiting for the engine."),
		inflight:       r.NewGauge("vlanode_inflight", "Inferences running (0 or 1)."),
		stages:         r.NewHistogramVec("vlanode_stage_seconds", "Time spent in each stage of a request: the node's (unmarshal, queue, assemble, engine, reply, total) and the model's (preprocess, vision, prefill, decode, diffusion).", "stage", stageBuckets),
		vramPeak:       r.NewGauge("vlanode_vram_peak_bytes", "Largest peak device memory an inference reported."),
		budget:         r.NewGauge("vlanode_budget_bytes", "VRAM budget; 0 means unlimited."),
		budgetChanges:  r.NewCounterVec("vlanode_budget_changes_total", "Budget changes applied while serving, by source.", "source", budgetSources...),
		gpuMemUsed:     r.NewGauge("vlanode_gpu_memory_used_bytes", "Device memory in use (NVML)."),
		gpuMemFree:     r.NewGauge("vlanode_gpu_memory_free_bytes", "Device memory free (NVML)."),
		gpuTemp:        r.NewGauge("vlanode_gpu_temperature_celsius", "GPU temperature (NVML)."),
	}
}

// stage records a duration of one stage.
func (m *nodeMetrics) stage(name string, d time.Duration) { m.stages.Observe(name, seconds(d)) }

// modelStages records the engine's stage timings.
func (m *nodeMetrics) modelStages(t msgs.Timing) {
	for _, s := range []struct {
		name string
		ms   float64
	}{{"preprocess", t.Preprocess}, {"vision", t.Vision}, {"prefill", t.Prefill}, {"decode", t.Decode}, {"diffusion", t.Diffusion}} {
		m.stages.Observe(s.name, s.ms/1000)
	}
}

// counters returns the cumulative counts for Status.
func (m *nodeMetrics) counters(cameras []string) msgs.Counters {
	c := msgs.Counters{
		"requests": uint64(m.requests.Value("")),
		"plans":    uint64(m.plans.Value("")),
	}
	for _, code := range []msgs.Code{msgs.CodeBadRequest, msgs.CodeOverloaded, msgs.CodeDeadlineExceeded, msgs.CodeUnsupported, msgs.CodeInternal} {
		c["errors_"+string(code)] = uint64(m.errors.Value(string(code)))
	}
	for _, r := range []string{shedQueueFull, shedSuperseded, shedDeadline, shedShutdown} {
		c["shed_"+r] = uint64(m.shed.Value(r))
	}
	var received, rejected uint64
	for _, cam := range cameras {
		received += uint64(m.framesReceived.Value(cam))
	}
	for _, r := range frameReasons {
		n := uint64(m.framesRejected.Value(r))
		c["frames_rejected_"+r] = n
		rejected += n
	}
	for _, o := range jobOutcomes {
		c["jobs_"+o] = uint64(m.jobs.Value(o))
	}
	c["frames_received"] = received
	c["frames_rejected"] = rejected
	return c
}
