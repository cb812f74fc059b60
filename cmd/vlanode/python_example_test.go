package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/engine"
	"vlanode/synth"
)

// TestPythonExample runs examples/python/infer.py (standard library only)
// against a real node serving the tiny Alpamayo-R1 over HTTP: it must get
// a plan for a synthetic clip, and a refusal naming the field for a bad
// observation. Without python3 it reports itself skipped.
func TestPythonExample(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("SKIPPED: python3 is not installed; the Python example client is not exercised")
	}
	clip := t.TempDir()
	o := synth.DefaultClip(engine.Cameras)
	o.Seconds, o.Width, o.Height = 0.5, 192, 108
	_, err = synth.WriteClip(context.Background(), clip, o)
	require.NoError(t, err)

	_, stdout, stop := serving(t, alpamayoSpec(), "--model", tinyAlpamayo(t), "--device", "cpu", "--name", "py", "--http-addr", "127.0.0.1:0")
	m := regexp.MustCompile(`HTTP API on (http://\S+) `).FindStringSubmatch(stdout.String())
	require.NotNil(t, m, stdout.String())
	script := filepath.Join("..", "..", "examples", "python", "infer.py")

	out, err := exec.Command(python, script, "--url", m[1], "--max-tokens", "4", clip).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `plan http-1 from py \(\S+\): in 6\.4 s to x=`, string(out))
	assert.Contains(t, string(out), "ms: preprocess")

	// Fifteen images where the model takes sixteen: HTTP 422 naming the field.
	images, err := filepath.Glob(filepath.Join(clip, "*", "*.jpg"))
	require.NoError(t, err)
	out, err = exec.Command(python, append([]string{script, "--url", m[1]}, images[:15]...)...).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "HTTP 422 bad_request: images: got 15 images, want 16")
	require.NoError(t, stop())
}
