package record

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSubjects(t *testing.T) {
	s := Subject("clip1", "vla.gpu-a.frames.front")
	assert.Equal(t, "vlarec.clip1.vla.gpu-a.frames.front", s)
	orig, ok := Original("clip1", s)
	assert.True(t, ok)
	assert.Equal(t, "vla.gpu-a.frames.front", orig)
	_, ok = Original("clip2", s)
	assert.False(t, ok)
}

func TestNames(t *testing.T) {
	for _, c := range []Config{{Node: "n", Stream: ""}, {Node: "n", Stream: "a.b"}, {Node: "", Stream: "s"}, {Node: "n", Stream: "a b"}} {
		_, err := Record(context.Background(), nil, c, nil)
		assert.ErrorContains(t, err, "must be non-empty", "%+v", c)
	}
}
