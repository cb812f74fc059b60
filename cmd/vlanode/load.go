package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"vlanode/msgs"
	"vlanode/node"
)

// runLoad measures a node under concurrent clients through NATS: each
// distinct request is first sent alone (its solo latency and plan), then
// --clients clients send --requests requests each at once, each client
// waiting for its answer before its next request. It reports plans per
// second, every request's latency against its solo latency, and whether
// each plan equals its solo plan (reasoning, trajectory, actions).
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("load", stderr)
	var nf natsFlags
	nf.register(fs, "NATS server of the node")
	name := fs.String("node", "", "the node to load (required): requests go to vla.<node>.infer")
	clients := fs.Int("clients", 8, "concurrent clients")
	requests := fs.Int("requests", 2, "requests each client sends, one after the other")
	samples := fs.Int("samples", 1, "num_traj_samples of every request")
	maxTokens := fs.Int("max-reasoning-tokens", 0, "max_reasoning_tokens of every request (0: the model's default)")
	greedy := fs.Bool("greedy", true, "decode greedily (temperature 0); false: sample at the model's defaults, seeded")
	width := fs.Int("width", 1920, "width of the synthetic JPEG frames")
	height := fs.Int("height", 1080, "height of the synthetic JPEG frames")
	noSolo := fs.Bool("no-solo", false, "skip the solo runs (no latency ratio, no comparison)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for each answer")
	discoverWait := fs.Duration("discover-timeout", 30*time.Second, "how long to wait for the node to describe its model")
	out := fs.String("out", "", "write the report as JSON to this file")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *name == "":
		return usagef("--node is required")
	case *clients < 1 || *requests < 1 || *maxTokens < 0 || *width < 1 || *height < 1:
		return usagef("--clients, --requests, --width and --height must be at least 1, --max-reasoning-tokens not negative")
	case *samples < 1 || *samples > msgs.MaxTrajSamples:
		return usagef("--samples must be 1 to %d", msgs.MaxTrajSamples)
	}
	nf.clientURL()
	if err := nf.resolve(false); err != nil {
		return err
	}
	nc, peer, err := connectDiscover(ctx, nf, *name, *discoverWait, "vlanode load")
	if err != nil {
		return err
	}
	defer nc.Close()
	frames, err := loadFrames(peer.Info, *width, *height)
	if err != nil {
		return err
	}
	n := *clients * *requests
	reqs := make([]msgs.InferRequest, n)
	for i := range reqs {
		reqs[i] = loadRequest(peer.Info, frames, i, *samples, *maxTokens, *greedy)
	}
	if size, err := msgs.Marshal(&reqs[0]); err == nil && int64(len(size)) > peer.MaxPayload {
		return fmt.Errorf("a request of %d bytes exceeds the node's max_payload of %d: raise serve --max-payload or lower --width/--height", len(size), peer.MaxPayload)
	}
	subject := fmt.Sprintf("vla.%s.infer", *name)
	rep := loadReport{Node: *name, Model: peer.Info.Model, Clients: *clients, Requests: n, Samples: *samples,
		Date: time.Now().UTC().Format(time.RFC3339)}

	solo := make([]loadAnswer, n)
	if !*noSolo {
		for i := range reqs {
			solo[i] = ask(ctx, nc, subject, &reqs[i], *timeout)
			if solo[i].Err != "" {
				return fmt.Errorf("solo request %d: %s", i, solo[i].Err)
			}
			fmt.Fprintf(stderr, "vlanode load: solo %d/%d: %.0f ms\n", i+1, n, solo[i].Ms)
		}
	}

	answers := make([]loadAnswer, n)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range *clients {
		wg.Go(func() {
			for k := range *requests {
				i := c**requests + k
				answers[i] = ask(ctx, nc, subject, &reqs[i], *timeout)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	rep.WallS = wall.Seconds()
	for i, a := range answers {
		r := loadResult{ID: reqs[i].ID, Ms: a.Ms, Error: a.Err}
		if a.Err == "" {
			rep.Plans++
		}
		if !*noSolo && a.Err == "" {
			r.SoloMs = solo[i].Ms
			r.Ratio = a.Ms / solo[i].Ms
			r.SameReasoning = a.Plan.Reasoning == solo[i].Plan.Reasoning
			r.MaxActionDiff = planDiff(a.Plan, solo[i].Plan)
			rep.MaxRatio = max(rep.MaxRatio, r.Ratio)
			rep.MaxActionDiff = max(rep.MaxActionDiff, r.MaxActionDiff)
			if r.SameReasoning {
				rep.SameReasoning++
			}
			if r.MaxActionDiff == 0 {
				rep.Identical++
			}
		}
		rep.Results = append(rep.Results, r)
	}
	rep.PlansPerS = float64(rep.Plans) / wall.Seconds()
	if !*noSolo {
		var ms []float64
		for _, s := range solo {
			ms = append(ms, s.Ms)
		}
		rep.SoloMedianMs = median(ms)
		rep.SoloPlansPerS = 1e3 / rep.SoloMedianMs
	}
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "%d clients × %d requests to %s (%s): %d plans in %.2f s: %.2f plans/s\n",
		*clients, *requests, *name, rep.Model, rep.Plans, rep.WallS, rep.PlansPerS)
	if !*noSolo {
		fmt.Fprintf(stdout, "solo: median %.0f ms (%.2f plans/s serially); worst latency under load %.2f× its solo latency\n",
			rep.SoloMedianMs, rep.SoloPlansPerS, rep.MaxRatio)
		fmt.Fprintf(stdout, "same reasoning as solo: %d of %d; identical plans: %d; largest difference of an action or waypoint: %.3g\n",
			rep.SameReasoning, n, rep.Identical, rep.MaxActionDiff)
	}
	if rep.Plans < n {
		return fmt.Errorf("%d of %d requests failed", n-rep.Plans, n)
	}
	return nil
}

// loadReport is what load measured.
type loadReport struct {
	Node          string       `json:"node"`
	Model         string       `json:"model"`
	Date          string       `json:"date"`
	Clients       int          `json:"clients"`
	Requests      int          `json:"requests"`
	Samples       int          `json:"samples"`
	Plans         int          `json:"plans"`
	WallS         float64      `json:"wall_s"`
	PlansPerS     float64      `json:"plans_per_s"`
	SoloMedianMs  float64      `json:"solo_median_ms,omitempty"`
	SoloPlansPerS float64      `json:"solo_plans_per_s,omitempty"`
	MaxRatio      float64      `json:"max_latency_over_solo,omitempty"`
	SameReasoning int          `json:"same_reasoning"`
	Identical     int          `json:"identical"`
	MaxActionDiff float64      `json:"max_action_diff"`
	Results       []loadResult `json:"results"`
}

type loadResult struct {
	ID            string  `json:"id"`
	Ms            float64 `json:"ms"`
	SoloMs        float64 `json:"solo_ms,omitempty"`
	Ratio         float64 `json:"latency_over_solo,omitempty"`
	SameReasoning bool    `json:"same_reasoning"`
	MaxActionDiff float64 `json:"max_action_diff"`
	Error         string  `json:"error,omitempty"`
}

// loadAnswer is one request's answer and round trip.
type loadAnswer struct {
	Plan *msgs.Plan
	Ms   float64
	Err  string
}

// ask sends one request and waits for its answer.
func ask(ctx context.Context, nc *nats.Conn, subject string, req *msgs.InferRequest, timeout time.Duration) loadAnswer {
	raw, err := msgs.Marshal(req)
	if err != nil {
		return loadAnswer{Err: err.Error()}
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	m, err := nc.RequestWithContext(rctx, subject, raw)
	ms := float64(time.Since(t0)) / float64(time.Millisecond)
	if err != nil {
		return loadAnswer{Ms: ms, Err: err.Error()}
	}
	p, e, err := msgs.DecodeReply(m.Data)
	switch {
	case err != nil:
		return loadAnswer{Ms: ms, Err: err.Error()}
	case e != nil:
		return loadAnswer{Ms: ms, Err: fmt.Sprintf("%s: %s", e.Err.Code, e.Err.Message)}
	}
	return loadAnswer{Plan: p, Ms: ms}
}

// planDiff is the largest difference between two plans' actions and
// waypoints, every sample's; +Inf when their shapes differ.
func planDiff(a, b *msgs.Plan) float64 {
	if len(a.Samples) != len(b.Samples) {
		return math.Inf(1)
	}
	d := trajDiff(a.Trajectory, b.Trajectory, a.Actions, b.Actions)
	for i := range a.Samples {
		d = max(d, trajDiff(a.Samples[i].Trajectory, b.Samples[i].Trajectory, a.Samples[i].Actions, b.Samples[i].Actions))
	}
	return d
}

func trajDiff(a, b msgs.Trajectory, aa, ba [][2]float64) float64 {
	if len(a.XYZ) != len(b.XYZ) || len(aa) != len(ba) {
		return math.Inf(1)
	}
	var d float64
	for i := range a.XYZ {
		for j := range 3 {
			d = max(d, math.Abs(a.XYZ[i][j]-b.XYZ[i][j]))
		}
	}
	for i := range aa {
		for j := range 2 {
			d = max(d, math.Abs(aa[i][j]-ba[i][j]))
		}
	}
	return d
}

// loadRequest is request i: the model's frames (every client the same
// images, stamped at its own t0) and a straight ego history at 5 m/s
// (each request a little faster, so that the prompts differ), seeded by i.
func loadRequest(info node.EngineInfo, frames []loadFrame, i, samples, maxTokens int, greedy bool) msgs.InferRequest {
	t0 := time.Now().UnixNano() + int64(i)*int64(time.Second)
	period := info.FramePeriod
	req := msgs.InferRequest{V: msgs.Version, ID: fmt.Sprintf("load-%d", i), MaxReasoningTokens: maxTokens, NumTrajSamples: samples}
	seed := uint64(i + 1)
	req.Seed = &seed
	if greedy {
		zero := 0.0
		req.Temperature = &zero
	}
	for c, cam := range info.Cameras {
		for k := range info.FramesPerCamera {
			f := frames[(c*info.FramesPerCamera+k)%len(frames)]
			req.Frames = append(req.Frames, msgs.Frame{V: msgs.Version, Camera: cam, StampNs: t0 - int64(info.FramesPerCamera-1-k)*int64(period),
				Encoding: msgs.EncodingJPEG, Width: f.w, Height: f.h, Data: f.data})
		}
	}
	egoPeriod := info.EgoPeriod
	if egoPeriod == 0 {
		egoPeriod = period
	}
	speed := 5 + 0.25*float64(i%8)
	for k := range info.EgoPoses {
		back := float64(info.EgoPoses-1-k) * egoPeriod.Seconds()
		req.EgoHistory = append(req.EgoHistory, msgs.EgoPose{StampNs: t0 - int64(info.EgoPoses-1-k)*int64(egoPeriod),
			XYZ: [3]float64{-speed * back, 0, 0}, Rot: [9]float64{1, 0, 0, 0, 1, 0, 0, 0, 1}})
	}
	return req
}

// loadFrame is a JPEG frame and its size.
type loadFrame struct {
	data []byte
	w, h int
}

// loadFrames are one JPEG per frame of an observation: w×h gradients with
// a moving band, each frame different.
func loadFrames(info node.EngineInfo, w, h int) ([]loadFrame, error) {
	n := len(info.Cameras) * info.FramesPerCamera
	out := make([]loadFrame, n)
	for f := range n {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				v := uint8((x*255/w + y*97/h + f*13) % 256)
				band := (x+f*37)%211 < 20
				c := color.RGBA{R: v, G: uint8((int(v) * 3) % 256), B: 255 - v, A: 255}
				if band {
					c = color.RGBA{R: 250, G: 250, B: 30, A: 255}
				}
				img.SetRGBA(x, y, c)
			}
		}
		var b bytes.Buffer
		if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 80}); err != nil {
			return nil, fmt.Errorf("encoding a synthetic frame: %w", err)
		}
		out[f] = loadFrame{data: b.Bytes(), w: w, h: h}
	}
	return out, nil
}
