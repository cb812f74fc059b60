//go:build nogocv

package video

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNoOpenCV: without OpenCV every way into a video file refuses with
// the reason and the file's name.
func TestNoOpenCV(t *testing.T) {
	path := filepath.Join(t.TempDir(), "front.avi")
	_, err := Open(path)
	assert.ErrorIs(t, err, ErrNoOpenCV)
	assert.ErrorContains(t, err, path+": this vlanode was built without OpenCV (build tag nogocv)")
	_, err = Probe(path)
	assert.ErrorIs(t, err, ErrNoOpenCV)
	_, err = Create(path, 10, 64, 48)
	assert.ErrorIs(t, err, ErrNoOpenCV)
	assert.ErrorContains(t, err, path)
}
