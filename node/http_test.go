package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// httpNode starts a node with the HTTP API on a free port and returns its
// base URL.
func httpNode(t *testing.T, eng Engine, opts ...Option) (*Node, string) {
	t.Helper()
	srv := runServer(t)
	n := startNode(t, srv, eng, append([]Option{WithHTTPAddr("127.0.0.1:0")}, opts...)...)
	return n, "http://" + n.HTTPAddr()
}

// httpBody is a valid POST /v1/infer body for testEngine: four images
// (two cameras × two frames), camera-major, as base64 and data URIs.
func httpBody(t *testing.T) map[string]any {
	t.Helper()
	jpg := base64.StdEncoding.EncodeToString(jpegBytes(t))
	pngURI := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngBytes(t))
	return map[string]any{
		"images": []string{jpg, pngURI, jpg, pngURI},
		"egomotion": []any{
			[]float64{-1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1},
			map[string]any{"xyz": []float64{0, 0, 0}, "rot": []float64{1, 0, 0, 0, 1, 0, 0, 0, 1}},
		},
	}
}

// post sends body (any JSON value, or a string sent as is) and decodes the
// answer into a map.
func post(t *testing.T, url string, body any) (int, map[string]any) {
	t.Helper()
	var raw []byte
	if s, ok := body.(string); ok {
		raw = []byte(s)
	} else {
		var err error
		raw, err = json.Marshal(body)
		require.NoError(t, err)
	}
	resp, err := http.Post(url+"/v1/infer", "application/json", bytes.NewReader(raw))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var out map[string]any
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	require.NoError(t, dec.Decode(&out))
	return resp.StatusCode, out
}

func TestHTTPInfer(t *testing.T) {
	eng := &testEngine{}
	n, url := httpNode(t, eng)
	body := httpBody(t)
	body["id"] = "h1"
	body["max_tokens"] = 7
	body["temperature"] = 0.2
	status, out := post(t, url, body)
	require.Equal(t, http.StatusOK, status, "%v", out)
	assert.Equal(t, "h1", out["id"])
	assert.Equal(t, "gpu-a", out["node"])
	assert.Equal(t, "test-vla", out["model"])
	assert.Len(t, out["actions"], 4)
	traj := out["trajectory"].(map[string]any)
	assert.Len(t, traj["xyz"], 4)
	assert.Contains(t, fmt.Sprint(out["warnings"]), "temperature: not applied")
	// The frames are stamped one frame period apart, the newest at t0.
	stamps := strings.Fields(out["reasoning"].(string))
	require.Len(t, stamps, 4)
	assert.Equal(t, stamps[1], stamps[3])
	assert.Equal(t, json.Number(stamps[1]), out["stamp_ns"])
	assert.Equal(t, uint64(1), counter(n, "plans"))

	// Without an id the node names the request.
	status, out = post(t, url, httpBody(t))
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "http-1", out["id"])
}

// TestHTTPCameraOrder checks that camera_order, in full or short names,
// puts the images in the model's order.
func TestHTTPCameraOrder(t *testing.T) {
	eng := &testEngine{plan: func(obs *Observation) (*msgs.Plan, error) {
		var encs []string
		for _, f := range obs.Frames {
			encs = append(encs, f.Camera+"/"+string(f.Encoding))
		}
		p := &msgs.Plan{Reasoning: strings.Join(encs, " "), Trajectory: msgs.Trajectory{DT: 0.1}}
		return p, nil
	}}
	_, url := httpNode(t, eng)
	body := httpBody(t)
	jpg := base64.StdEncoding.EncodeToString(jpegBytes(t))
	png := base64.StdEncoding.EncodeToString(pngBytes(t))
	body["images"] = []string{png, png, jpg, jpg} // right's frames first
	body["camera_order"] = []string{"right", "left"}
	body["num_frames_per_camera"] = 2
	status, out := post(t, url, body)
	require.Equal(t, http.StatusOK, status, "%v", out)
	assert.Equal(t, "left/jpeg left/jpeg right/png right/png", out["reasoning"])
}

// TestHTTPBadRequests: a body the node cannot take is answered 4xx with the
// protocol's code and the field named.
func TestHTTPBadRequests(t *testing.T) {
	eng := &testEngine{}
	n, url := httpNode(t, eng)
	jpg := base64.StdEncoding.EncodeToString(jpegBytes(t))
	for _, c := range []struct {
		name   string
		edit   func(b map[string]any) any
		status int
		field  string
		msg    string
	}{
		{"not json", func(map[string]any) any { return "{images: [" }, 400, "", "body: not JSON"},
		{"images not a list", func(b map[string]any) any { b["images"] = 3; return b }, 422, "images", "want array, got number"},
		{"count", func(b map[string]any) any { b["images"] = []string{jpg, jpg, jpg}; return b }, 422, "images", "got 3 images, want 4"},
		{"frames per camera", func(b map[string]any) any { b["num_frames_per_camera"] = 1; return b }, 422, "num_frames_per_camera", "takes 2 frames"},
		{"unknown camera", func(b map[string]any) any { b["camera_order"] = []string{"left", "up"}; return b }, 422, "camera_order[1]", `unknown camera "up"`},
		{"egomotion rows", func(b map[string]any) any { b["egomotion"] = b["egomotion"].([]any)[:1]; return b }, 422, "egomotion", "got 1 rows, want 2"},
		{"egomotion row", func(b map[string]any) any { b["egomotion"].([]any)[1] = []float64{1, 2, 3}; return b }, 422, "egomotion[1]", "got 3 numbers"},
		{"base64", func(b map[string]any) any { b["images"].([]string)[2] = "!!"; return b }, 422, "images[2]", "not base64"},
		{"not an image", func(b map[string]any) any {
			b["images"].([]string)[1] = base64.StdEncoding.EncodeToString([]byte("GIF89a...."))
			return b
		}, 422, "images[1]", "not a JPEG or PNG"},
		{"corrupt jpeg", func(b map[string]any) any {
			// Cut after the start-of-scan header: the image's size reads,
			// its pixels do not.
			j := jpegBytes(t)
			sos := bytes.Index(j, []byte{0xff, 0xda})
			require.Positive(t, sos)
			j = j[:sos+2+int(j[sos+2])<<8+int(j[sos+3])]
			b["images"].([]string)[3] = base64.StdEncoding.EncodeToString(j)
			return b
		}, 422, "images[3]", "decoding jpeg"},
		{"answer mode", func(b map[string]any) any { b["mode"] = "answer"; return b }, 422, "mode", "not served"},
		{"samples", func(b map[string]any) any { b["num_traj_samples"] = 17; return b }, 422, "num_traj_samples", "want 1 to 16 trajectory samples"},
		{"model", func(b map[string]any) any { b["model"] = "nvidia/alpamayo1.5"; return b }, 422, "model", `serves "test-vla"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, out := post(t, url, c.edit(httpBody(t)))
			require.Equal(t, c.status, status, "%v", out)
			e := out["error"].(map[string]any)
			assert.Equal(t, "bad_request", e["code"])
			assert.Contains(t, e["message"], c.msg)
			if c.field != "" {
				assert.Equal(t, c.field, e["field"])
			} else {
				assert.Nil(t, e["field"])
			}
		})
	}
	assert.Equal(t, uint64(13), counter(n, "errors_bad_request"))
	status, out := post(t, url, httpBody(t))
	assert.Equal(t, http.StatusOK, status, "the node keeps serving: %v", out)
}

// TestHTTPSharesTheQueue: an HTTP request waits in the queue the NATS
// requests use and is shed by its bound.
func TestHTTPSharesTheQueue(t *testing.T) {
	srv := runServer(t)
	eng := gated()
	n := startNode(t, srv, eng, WithHTTPAddr("127.0.0.1:0"), WithQueueBound(1))
	url := "http://" + n.HTTPAddr()
	nc := connect(t, srv.ClientURL())
	running := sendAsync(t, nc, InferSubject("gpu-a"), goodRequest("nats", 1e9))
	eng.awaitStart(t, "nats")

	queued := make(chan map[string]any, 1)
	go func() {
		body := httpBody(t)
		body["id"] = "queued"
		_, out := post(t, url, body)
		queued <- out
	}()
	eventually(t, func() bool { return n.sched.depth() == 1 }, "the HTTP request queued")
	status, out := post(t, url, httpBody(t))
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Equal(t, "overloaded", out["error"].(map[string]any)["code"])

	eng.release()
	_, e := running.one(t)
	require.Nil(t, e)
	eng.awaitStart(t, "queued")
	eng.release()
	assert.Equal(t, "queued", (<-queued)["id"])
}

func TestHTTPCompanions(t *testing.T) {
	n, url := httpNode(t, &testEngine{})
	get := func(path string) (int, string) {
		resp, err := http.Get(url + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := get("/v1/health/live")
	assert.Equal(t, 200, status)
	assert.JSONEq(t, `{"status": "live"}`, body)
	status, body = get("/v1/health/ready")
	assert.Equal(t, 200, status)
	assert.JSONEq(t, `{"status": "ready", "model": "test-vla"}`, body)

	status, body = get("/v1/models")
	assert.Equal(t, 200, status)
	var models struct {
		Object string      `json:"object"`
		Data   []httpModel `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &models))
	require.Len(t, models.Data, 1)
	m := models.Data[0]
	assert.Equal(t, "list", models.Object)
	assert.Equal(t, "test-vla", m.ID)
	assert.Equal(t, testCameras, m.CameraOrder)
	assert.Equal(t, testFrames, m.NumFramesPerCamera)
	assert.Equal(t, testEgoPoses, m.EgomotionRows)

	status, body = get("/v1/version")
	assert.Equal(t, 200, status)
	assert.Contains(t, body, `"release":"0.1.0"`)
	assert.Contains(t, body, `"protocol":1`)

	status, out := post(t, url, httpBody(t))
	require.Equal(t, 200, status, "%v", out)
	status, body = get("/metrics")
	assert.Equal(t, 200, status)
	assert.Contains(t, body, "vlanode_plans_total 1")

	resp, err := http.Get(url + "/v1/infer")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	// Once the node shuts down it is no longer ready.
	n.closing.Store(true)
	status, _ = get("/v1/health/ready")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	n.closing.Store(false)
}

// TestHTTPBodySlots: at most httpBodySlots bodies are read at once. With
// every slot held by a client that sends half a body and stalls, a whole
// request waits, unread, and is answered once one of them gives up; its
// client leaving while it waits costs nothing.
func TestHTTPBodySlots(t *testing.T) {
	_, url := httpNode(t, &testEngine{})
	addr := strings.TrimPrefix(url, "http://")
	var stalled []net.Conn
	for range httpBodySlots {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		fmt.Fprintf(c, "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"images\": [\"")
		stalled = append(stalled, c)
	}
	defer func() {
		for _, c := range stalled {
			c.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond) // the stalled bodies hold the slots

	raw, err := json.Marshal(httpBody(t))
	require.NoError(t, err)
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(url+"/v1/infer", "application/json", bytes.NewReader(raw))
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case code := <-done:
		t.Fatalf("answered (%d) while every body slot was held", code)
	case <-time.After(300 * time.Millisecond):
	}
	stalled[0].Close() // that body fails; its slot frees
	select {
	case code := <-done:
		assert.Equal(t, http.StatusOK, code)
	case <-time.After(10 * time.Second):
		t.Fatal("not answered after a slot freed")
	}

	// A client that leaves while it waits for a slot: nothing is read, and
	// once a slot frees the next request gets it. Three stalled bodies are
	// left; a fourth holds the last slot.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	fmt.Fprintf(c, "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	stalled = append(stalled, c)
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/infer", bytes.NewReader(raw))
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded, "every slot held: the request waits until its client gives up")
	stalled[1].Close()
	status, out := post(t, url, httpBody(t))
	assert.Equal(t, http.StatusOK, status, "%v", out)
}

// TestHTTPBodyAllocations measures what reading and decoding one body
// allocates, the figure docs/node.md's memory table takes for the HTTP
// API: at most 3.5 times the body (2.83 measured), for a body of about the
// node's limit: the body once, its strings, the frames they decode to.
func TestHTTPBodyAllocations(t *testing.T) {
	n, _ := httpNode(t, &testEngine{})
	pad := int(n.maxPayload)/4 - len(jpegBytes(t)) - 1024 // four images, just under the limit
	img := base64.StdEncoding.EncodeToString(append(jpegBytes(t), make([]byte, pad)...))
	body := httpBody(t)
	body["images"] = []string{img, img, img, img}
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := httptest.NewRecorder()
	b, ok := n.readInfer(w, httptest.NewRequest(http.MethodPost, "/v1/infer", bytes.NewReader(raw)), time.Now())
	runtime.ReadMemStats(&after)
	require.True(t, ok, w.Body.String())
	require.Len(t, b.req.Frames, 4)
	ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(raw))
	t.Logf("a %d-byte body (limit %d) allocated %.2f times its size", len(raw), n.httpBodyLimit(), ratio)
	assert.LessOrEqual(t, ratio, 3.5)
}

// TestHTTPTrajectorySamples: num_traj_samples reaches the engine as the
// NATS key does, and the answer carries the other samples under samples
// (absent for one sample).
func TestHTTPTrajectorySamples(t *testing.T) {
	eng := &testEngine{plan: func(obs *Observation) (*msgs.Plan, error) {
		p := &msgs.Plan{Trajectory: msgs.Trajectory{DT: 0.1, XYZ: [][3]float64{{1, 0, 0}}, Rot: [][9]float64{{1, 0, 0, 0, 1, 0, 0, 0, 1}}},
			Actions: [][2]float64{{0.5, 0}}}
		for i := 1; i < max(obs.NumTrajSamples, 1); i++ {
			s := msgs.TrajSample{Trajectory: p.Trajectory, Actions: [][2]float64{{float64(i), 0}}}
			p.Samples = append(p.Samples, s)
		}
		return p, nil
	}}
	_, url := httpNode(t, eng)
	body := httpBody(t)
	body["num_traj_samples"] = 3
	status, out := post(t, url, body)
	require.Equal(t, http.StatusOK, status, "%v", out)
	samples, ok := out["samples"].([]any)
	require.True(t, ok, "%v", out)
	require.Len(t, samples, 2)
	s1 := samples[1].(map[string]any)
	assert.Equal(t, "[[2 0]]", fmt.Sprint(s1["actions"]))
	assert.Contains(t, s1, "trajectory")

	status, out = post(t, url, httpBody(t))
	require.Equal(t, http.StatusOK, status)
	assert.NotContains(t, out, "samples", "one sample: the answer has no samples")
}
