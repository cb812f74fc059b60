//go:build nogocv

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVideoWithoutOpenCV: a binary built without OpenCV refuses video
// files, saying why and naming the file, before it asks a node for
// anything; clip --video writes nothing.
func TestVideoWithoutOpenCV(t *testing.T) {
	path := filepath.Join(t.TempDir(), "drive.mp4")
	require.NoError(t, os.WriteFile(path, []byte("a video"), 0o644))
	code, _, stderr := runCLI("replay", "--node", "n", "--nats-url", "nats://127.0.0.1:1", path)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, path+": this vlanode was built without OpenCV (build tag nogocv)")
	assert.Contains(t, stderr, "or extract its frames into a clip folder of images")

	dir := filepath.Join(t.TempDir(), "clip")
	code, _, stderr = runCLI("clip", "--out", dir, "--video")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "clip --video: this vlanode was built without OpenCV")
	assert.NoDirExists(t, dir)
}
